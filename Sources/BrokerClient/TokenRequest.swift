public import BrokerProtocol

/// A silent token request: what MSAL calls `MSALSilentTokenParameters`.
public struct TokenRequest: Sendable, Hashable {
    /// The app's client id.
    public var clientId: String
    /// The scopes wanted (`openid profile offline_access` are added by the broker).
    public var scopes: [String]
    /// An ADAL v1 resource, asked for as `<resource>/.default`, in place of (or besides) scopes.
    public var resource: String?
    /// The authority; default `https://login.microsoftonline.com/common`.
    public var authority: String?
    /// The account: by identifier when given, else by username.
    ///
    /// Absent: the authority's only account.
    public var account: AccountSelector?
    /// The token must stay valid at least this long (the broker always keeps a 5-minute margin).
    public var minimumValidity: Duration?
    /// Skip the cached access token and refresh.
    public var forceRefresh: Bool
    /// A claims challenge (JSON) from a resource API; bypasses the cache.
    public var claims: String?
    /// Follows the request through the broker's logs and identity-provider calls.
    public var correlationId: String

    /// Creates a request; a correlation id is generated unless given.
    public init(
        clientId: String,
        scopes: [String],
        resource: String? = nil,
        authority: String? = nil,
        account: AccountSelector? = nil,
        minimumValidity: Duration? = nil,
        forceRefresh: Bool = false,
        claims: String? = nil,
        correlationId: String = WireProtocol.newCorrelationId()
    ) {
        self.clientId = clientId
        self.scopes = scopes
        self.resource = resource
        self.authority = authority
        self.account = account
        self.minimumValidity = minimumValidity
        self.forceRefresh = forceRefresh
        self.claims = claims
        self.correlationId = correlationId
    }

    /// The wire form.
    package var authParameters: AuthParameters {
        AuthParameters(
            clientId: clientId,
            authority: authority,
            requestedScopes: scopes.isEmpty ? nil : scopes,
            resource: resource,
            account: account,
            decodedClaims: claims,
            forceRefresh: forceRefresh ? true : nil,
            minimumValiditySeconds: minimumValidity.map { Int($0.components.seconds) }
        )
    }
}
