/// What a token request asks for: the shape of Microsoft's broker `authParameters`.
public struct AuthParameters: Sendable, Hashable, Codable {
    /// The application (client) id registered at the identity provider.
    public var clientId: String
    /// The authority URL: `https://login.microsoftonline.com/<tenant>` (`common`, `organizations`, `consumers`, a
    /// tenant id or domain) or an OpenID Connect issuer.
    ///
    /// Default: `https://login.microsoftonline.com/common`.
    public var authority: String?
    /// The scopes wanted.
    ///
    /// `openid profile offline_access` are added by the broker and ignored in matching.
    public var requestedScopes: [String]?
    /// An ADAL v1 resource, in place of scopes: asks for `<resource>/.default`.
    public var resource: String?
    /// The account to use; absent means "the only account of this authority".
    public var account: AccountSelector?
    /// A username, used like `account.username` when `account` is absent (Microsoft's broker sends it so).
    public var username: String?
    /// The redirect URI registered for the app; used by `embedded` sign-in and sent on token requests.
    public var redirectUri: String?
    /// A claims challenge (JSON) from a resource API.
    ///
    /// Bypasses the access-token cache.
    public var decodedClaims: String?
    /// Skip the access-token cache and refresh.
    public var forceRefresh: Bool?
    /// The token must stay valid at least this long (seconds); more than the broker's 5-minute buffer counts.
    public var minimumValiditySeconds: Int?
    /// Microsoft's broker request kind; accepted for compatibility and otherwise ignored.
    public var authorizationType: Int?
    /// Interactive only: `login`, `consent`, `select_account` or `none`.
    public var prompt: String?
    /// Interactive only: pre-fills the username on the sign-in page.
    public var loginHint: String?
    /// Interactive only: skips home-realm discovery (`domain_hint`).
    public var domainHint: String?
    /// Interactive only: extra query parameters for the authorization URL.
    public var additionalQueryParametersForAuthorization: [String: String]?

    package enum CodingKeys: String, CodingKey {
        case clientId, authority, requestedScopes, resource, account, username, redirectUri, decodedClaims,
            forceRefresh, minimumValiditySeconds, authorizationType, prompt, loginHint, domainHint,
            additionalQueryParametersForAuthorization
    }

    /// Creates the parameters.
    ///
    /// Give `requestedScopes` or `resource`.
    public init(
        clientId: String,
        authority: String? = nil,
        requestedScopes: [String]? = nil,
        resource: String? = nil,
        account: AccountSelector? = nil,
        username: String? = nil,
        redirectUri: String? = nil,
        decodedClaims: String? = nil,
        forceRefresh: Bool? = nil,
        minimumValiditySeconds: Int? = nil,
        authorizationType: Int? = nil,
        prompt: String? = nil,
        loginHint: String? = nil,
        domainHint: String? = nil,
        additionalQueryParametersForAuthorization: [String: String]? = nil
    ) {
        self.clientId = clientId
        self.authority = authority
        self.requestedScopes = requestedScopes
        self.resource = resource
        self.account = account
        self.username = username
        self.redirectUri = redirectUri
        self.decodedClaims = decodedClaims
        self.forceRefresh = forceRefresh
        self.minimumValiditySeconds = minimumValiditySeconds
        self.authorizationType = authorizationType
        self.prompt = prompt
        self.loginHint = loginHint
        self.domainHint = domainHint
        self.additionalQueryParametersForAuthorization = additionalQueryParametersForAuthorization
    }

    /// The account selector in effect: `account`, else `username`.
    public var accountSelector: AccountSelector? {
        if let account, !account.isEmpty { return account }
        if let username, !username.isEmpty { return AccountSelector(username: username) }
        return nil
    }
}

/// Params of `acquireTokenSilently`.
public struct AcquireTokenSilentlyParams: Sendable, Hashable, Codable {
    /// What is asked for.
    public var authParameters: AuthParameters
    /// Follows the request into the broker's logs and identity-provider calls (a UUID).
    ///
    /// The client library generates one when the app gives none; the broker does when a raw client sends none.
    public var correlationId: String?

    package enum CodingKeys: String, CodingKey {
        case authParameters, correlationId
    }

    /// Creates the params.
    public init(authParameters: AuthParameters, correlationId: String? = nil) {
        self.authParameters = authParameters
        self.correlationId = correlationId
    }
}

/// Where a token came from.
///
/// Open for new values in minor protocol versions: treat unknown ones as "not the cache".
public struct TokenSource: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible {
    /// The wire name.
    public let rawValue: String

    /// Creates a source from its wire name.
    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// The broker's cache.
    public static let cache = TokenSource(rawValue: "cache")
    /// The identity provider, just now (refresh or sign-in).
    public static let identityProvider = TokenSource(rawValue: "identityProvider")

    /// The wire name.
    public var description: String {
        rawValue
    }
}

/// A token handed to a caller: Microsoft's broker `brokerTokenResponse`.
public struct TokenResult: Sendable, Hashable, Codable {
    /// The access token.
    public var accessToken: Secret
    /// The token type, `Bearer` (or `pop`).
    public var accessTokenType: String
    /// When the access token expires, in milliseconds since the Unix epoch.
    public var expiresOn: Int64
    /// How long the token stays usable while the identity provider is down (ms since the epoch), if known.
    public var extendedExpiresOn: Int64?
    /// When the broker will refresh the token ahead of expiry (ms since the epoch), if the provider hinted.
    public var refreshOn: Int64?
    /// The scopes the token carries.
    public var grantedScopes: [String]
    /// The account's latest id token, if any.
    public var idToken: Secret?
    /// Entra ID's `client_info` (base64url JSON of `uid` and `utid`), if any.
    public var clientInfo: String?
    /// The account the token is for.
    public var account: Account
    /// Whether the token came from the cache or the identity provider.
    public var tokenSource: TokenSource
    /// The request's correlation id.
    public var correlationId: String

    /// Creates a result.
    public init(
        accessToken: Secret,
        accessTokenType: String,
        expiresOn: Int64,
        extendedExpiresOn: Int64? = nil,
        refreshOn: Int64? = nil,
        grantedScopes: [String],
        idToken: Secret? = nil,
        clientInfo: String? = nil,
        account: Account,
        tokenSource: TokenSource,
        correlationId: String
    ) {
        self.accessToken = accessToken
        self.accessTokenType = accessTokenType
        self.expiresOn = expiresOn
        self.extendedExpiresOn = extendedExpiresOn
        self.refreshOn = refreshOn
        self.grantedScopes = grantedScopes
        self.idToken = idToken
        self.clientInfo = clientInfo
        self.account = account
        self.tokenSource = tokenSource
        self.correlationId = correlationId
    }
}

/// Result of `acquireTokenSilently` and `acquireTokenInteractively`.
public struct AcquireTokenResult: Sendable, Hashable, Codable {
    /// The token.
    public var brokerTokenResponse: TokenResult

    /// Creates the result.
    public init(brokerTokenResponse: TokenResult) {
        self.brokerTokenResponse = brokerTokenResponse
    }
}

/// Auth parameters with their hash worked out once: the key the broker remembers cached answers by.
///
/// The memo of silent requests keeps one with each line it remembers, so that a request read from memory is not
/// hashed again: hashing its strings was a tenth of the daemon's instructions for a cached answer. The parameters sit
/// in a box of their own, so that a copy of the key is one reference, not fifteen fields. Package-only: apps that link
/// BrokerProtocol have no use for it.
package struct HashedAuthParameters: Hashable, Sendable {
    private final class Box: Sendable {
        let parameters: AuthParameters

        init(_ parameters: AuthParameters) {
            self.parameters = parameters
        }
    }

    private let box: Box
    private let parametersHash: Int

    /// The key of `parameters`.
    package init(_ parameters: AuthParameters) {
        box = Box(parameters)
        parametersHash = parameters.hashValue
    }

    /// The parameters.
    package var parameters: AuthParameters {
        box.parameters
    }

    package func hash(into hasher: inout Hasher) {
        hasher.combine(parametersHash)
    }

    package static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.parametersHash == rhs.parametersHash && (lhs.box === rhs.box || lhs.box.parameters == rhs.box.parameters)
    }
}
