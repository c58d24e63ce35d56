public import BrokerProtocol

/// A successful token endpoint answer (RFC 6749 §5.1), with Entra ID's additions: `ext_expires_in`,
/// `refresh_in`, `client_info`, `foci`.
public struct TokenResponse: Sendable, CustomStringConvertible {
    /// The access token.
    public var accessToken: Secret
    /// `Bearer` unless the provider said otherwise.
    public var tokenType: String
    /// Seconds the access token is valid.
    public var expiresIn: Int64
    /// Seconds the access token stays usable while the provider is down (Entra ID).
    public var extendedExpiresIn: Int64?
    /// Seconds after which the provider wants a proactive refresh (Entra ID).
    public var refreshIn: Int64?
    /// A new refresh token; when present it replaces the one redeemed (rotation).
    public var refreshToken: Secret?
    /// Seconds the refresh token is valid, when the provider says.
    public var refreshTokenExpiresIn: Int64?
    /// An id_token, unchecked; ``IDTokenValidator`` checks it.
    public var idToken: Secret?
    /// The granted scopes, when the provider lists them (otherwise the requested ones were granted).
    public var scope: String?
    /// Entra ID's `client_info`, base64url.
    public var clientInfo: String?
    /// Entra ID's family id: `"1"` when the refresh token is a family refresh token.
    public var familyId: String?

    /// Creates a response.
    public init(
        accessToken: Secret,
        tokenType: String = "Bearer",
        expiresIn: Int64,
        extendedExpiresIn: Int64? = nil,
        refreshIn: Int64? = nil,
        refreshToken: Secret? = nil,
        refreshTokenExpiresIn: Int64? = nil,
        idToken: Secret? = nil,
        scope: String? = nil,
        clientInfo: String? = nil,
        familyId: String? = nil
    ) {
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.expiresIn = expiresIn
        self.extendedExpiresIn = extendedExpiresIn
        self.refreshIn = refreshIn
        self.refreshToken = refreshToken
        self.refreshTokenExpiresIn = refreshTokenExpiresIn
        self.idToken = idToken
        self.scope = scope
        self.clientInfo = clientInfo
        self.familyId = familyId
    }

    /// The lifetime the provider gives when it omits `expires_in` (RFC 6749 makes it only recommended).
    public static let defaultLifetime: Int64 = 3600

    /// Parses a 200 answer's body.
    ///
    /// Numbers may come as strings (ADFS sends them so); an answer without an access token is refused.
    public init(body: [UInt8]) throws(OAuthError) {
        guard let object = try? JSONValue.parse(body).objectValue else {
            throw OAuthError(.invalidResponse, "the token endpoint's answer is not a JSON object")
        }
        guard let accessToken = object["access_token"]?.stringValue, !accessToken.isEmpty else {
            throw OAuthError(.invalidResponse, "the token endpoint's answer has no access_token")
        }
        func seconds(_ name: String) throws(OAuthError) -> Int64? {
            guard let value = object[name], value != .null else { return nil }
            guard let number = value.integerValue ?? value.stringValue.flatMap({ Int64($0) }), number >= 0,
                number < 1 << 40
            else {
                throw OAuthError(.invalidResponse, "the token endpoint's \(name) is not a number of seconds")
            }
            return number
        }
        func string(_ name: String) -> String? {
            object[name]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        }
        self.accessToken = Secret(accessToken)
        tokenType = string("token_type") ?? "Bearer"
        expiresIn = try seconds("expires_in") ?? Self.defaultLifetime
        extendedExpiresIn = try seconds("ext_expires_in")
        refreshIn = try seconds("refresh_in")
        refreshToken = string("refresh_token").map(Secret.init)
        refreshTokenExpiresIn = try seconds("refresh_token_expires_in")
        idToken = string("id_token").map(Secret.init)
        scope = string("scope")
        clientInfo = string("client_info")
        familyId = string("foci")
    }

    /// What came, without any secret.
    public var description: String {
        var parts = ["\(tokenType) token for \(expiresIn) s"]
        if refreshToken != nil { parts.append(familyId.map { "family \($0) refresh token" } ?? "refresh token") }
        if idToken != nil { parts.append("id_token") }
        if let scope { parts.append("scope \(scope)") }
        return "TokenResponse(\(parts.joined(separator: ", ")))"
    }
}
