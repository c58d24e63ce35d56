/// What one run of the test identity provider serves: its tenant, its clients and its token lifetimes.
///
/// Client ids and the tenant id are kept lowercased; requests are compared case-insensitively, as Entra ID does.
struct ProviderConfiguration: Sendable {
    /// The tenant id used when none is given on the command line.
    static let defaultTenantID = "7d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a"

    /// The family (FOCI) clients used when none is given on the command line.
    static let defaultFamilyClients = ["aaaaaaaa-0000-4000-8000-00000000000a", "bbbbbbbb-0000-4000-8000-00000000000b"]

    /// The non-family clients used when none is given on the command line.
    static let defaultOtherClients = ["cccccccc-0000-4000-8000-00000000000c"]

    /// The one tenant this provider is.
    var tenantID: String

    /// Clients whose refresh tokens are family refresh tokens.
    var familyClients: Set<String>

    /// Clients outside the family.
    var otherClients: Set<String>

    /// Access and id token lifetime in seconds (`expires_in`).
    var tokenLifetime: Int

    /// The `refresh_in` hint in seconds, sent only when set.
    var refreshIn: Int?

    /// Refresh token lifetime in seconds; nil means refresh tokens never expire by time.
    var refreshTokenLifetime: Int?

    /// Whether every successful refresh returns a new refresh token and retires the old one.
    var rotatesRefreshTokens: Bool

    /// The device code polling interval in seconds.
    var deviceCodeInterval: Int

    /// The device code lifetime in seconds.
    var deviceCodeLifetime: Int

    /// `http://127.0.0.1:<port>`, or `https://…` when serving TLS; known once the listener is bound.
    var baseURL: String

    /// The `iss` of access tokens and v2.0 id tokens: the tenant's v2.0 issuer.
    var issuer: String { "\(baseURL)/\(tenantID)/v2.0" }

    /// The `iss` of v1 id tokens (`oauth2/token`): `<base>/<tenantId>/`, shaped like Entra's `sts.windows.net` one.
    var v1Issuer: String { "\(baseURL)/\(tenantID)/" }

    /// The authority a client configures: the base URL and the tenant id.
    var authority: String { "\(baseURL)/\(tenantID)" }

    /// The page where a device code is entered.
    var deviceLoginURL: String { "\(baseURL)/devicelogin" }

    /// Whether `clientID` is registered, in the family or not.
    func isKnownClient(_ clientID: String) -> Bool {
        let id = clientID.lowercased()
        return familyClients.contains(id) || otherClients.contains(id)
    }

    /// Whether `clientID` belongs to the family of client ids (FOCI).
    func isFamilyClient(_ clientID: String) -> Bool {
        familyClients.contains(clientID.lowercased())
    }

    /// Whether a `{tenant}` path segment names this tenant: its id, `common` or `organizations`.
    func acceptsTenant(_ segment: String) -> Bool {
        let tenant = segment.lowercased()
        return tenant == tenantID || tenant == "common" || tenant == "organizations"
    }
}
