/// Params of `createGrant`: a capability for the managed-identity endpoint (Protocol/ §16).
///
/// A grant hands out one account's access tokens for one app, for the resources and scopes it names, until it
/// expires or is revoked. It never hands out a refresh token and never signs anyone in.
public struct CreateGrantParams: Sendable, Hashable, Codable {
    /// The app (client id) whose tokens the grant hands out.
    public var clientId: String
    /// The authority; default as for `acquireTokenSilently`.
    public var authority: String?
    /// Resources (ADAL v1 style, asked for as `<resource>/.default`) a holder may ask for.
    public var resources: [String]?
    /// Scopes a holder may ask for, each named as the endpoint's `resource` parameter.
    public var scopes: [String]?
    /// The account; default: the only account the broker holds.
    public var account: AccountSelector?
    /// How long the grant lasts, in seconds: at least 1, at most 2,592,000 (30 days).
    ///
    /// Default: 28,800 (8 hours).
    public var lifetimeSeconds: Int?
    /// A name for people and the audit log; default: the grant's id.
    public var label: String?
    /// Where the endpoint listens: `ADDRESS:PORT`, or `[ADDRESS]:PORT` for IPv6.
    ///
    /// A loopback address, or an address of this host such as a container bridge's; port 0 picks one. Default: `127.0.0.1:0` (the loopback listener already open, if any).
    public var listen: String?
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    package enum CodingKeys: String, CodingKey {
        case clientId, authority, resources, scopes, account, lifetimeSeconds, label, listen, correlationId
    }

    /// Creates the params.
    public init(
        clientId: String,
        authority: String? = nil,
        resources: [String]? = nil,
        scopes: [String]? = nil,
        account: AccountSelector? = nil,
        lifetimeSeconds: Int? = nil,
        label: String? = nil,
        listen: String? = nil,
        correlationId: String? = nil
    ) {
        self.clientId = clientId
        self.authority = authority
        self.resources = resources
        self.scopes = scopes
        self.account = account
        self.lifetimeSeconds = lifetimeSeconds
        self.label = label
        self.listen = listen
        self.correlationId = correlationId
    }
}

/// A grant as the broker lists it: everything but its secret, which the broker does not keep.
public struct EndpointGrant: Sendable, Hashable, Codable {
    /// The grant's id (`revokeGrant` takes it).
    public var id: String
    /// Its label.
    public var label: String
    /// The app whose tokens it hands out.
    public var clientId: String
    /// The authority, as given.
    public var authority: String?
    /// The resources a holder may ask for.
    public var resources: [String]
    /// The scopes a holder may ask for.
    public var scopes: [String]
    /// The account's identifier.
    public var accountIdentifier: String
    /// The account's username, when the cache knows it.
    public var username: String?
    /// When it was created (epoch seconds).
    public var createdAt: Int64
    /// When it expires (epoch seconds).
    public var expiresAt: Int64
    /// The `IDENTITY_ENDPOINT` URL: `http://ADDRESS:PORT/msi/token`.
    public var endpoint: String
    /// Whether the endpoint is listening now.
    public var listening: Bool
    /// Why it is not listening, when it is not (the address is gone, the port taken).
    public var problem: String?
    /// Tokens served through it since the broker started.
    public var tokensServed: Int

    /// Creates a grant description.
    public init(
        id: String,
        label: String,
        clientId: String,
        authority: String?,
        resources: [String],
        scopes: [String],
        accountIdentifier: String,
        username: String?,
        createdAt: Int64,
        expiresAt: Int64,
        endpoint: String,
        listening: Bool,
        problem: String? = nil,
        tokensServed: Int = 0
    ) {
        self.id = id
        self.label = label
        self.clientId = clientId
        self.authority = authority
        self.resources = resources
        self.scopes = scopes
        self.accountIdentifier = accountIdentifier
        self.username = username
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.endpoint = endpoint
        self.listening = listening
        self.problem = problem
        self.tokensServed = tokensServed
    }
}

/// Result of `createGrant`.
public struct CreateGrantResult: Sendable, Hashable, Codable {
    /// The grant.
    public var grant: EndpointGrant
    /// The `IDENTITY_HEADER` secret: it names the grant and nothing else, and is shown this once (the broker keeps
    /// only its SHA-256).
    public var identityHeader: Secret

    /// Creates the result.
    public init(grant: EndpointGrant, identityHeader: Secret) {
        self.grant = grant
        self.identityHeader = identityHeader
    }
}

/// Params of `listGrants`.
public struct ListGrantsParams: Sendable, Hashable, Codable {
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    /// Creates the params.
    public init(correlationId: String? = nil) {
        self.correlationId = correlationId
    }
}

/// Result of `listGrants`.
public struct ListGrantsResult: Sendable, Hashable, Codable {
    /// The grants not yet expired or revoked, oldest first.
    public var grants: [EndpointGrant]

    /// Creates the result.
    public init(grants: [EndpointGrant]) {
        self.grants = grants
    }
}

/// Params of `revokeGrant`.
public struct RevokeGrantParams: Sendable, Hashable, Codable {
    /// The grant's id, or a label that names exactly one grant.
    public var grant: String
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    package enum CodingKeys: String, CodingKey {
        case grant, correlationId
    }

    /// Creates the params.
    public init(grant: String, correlationId: String? = nil) {
        self.grant = grant
        self.correlationId = correlationId
    }
}

/// Result of `revokeGrant`.
public struct RevokeGrantResult: Sendable, Hashable, Codable {
    /// The grant revoked.
    public var grant: EndpointGrant

    /// Creates the result.
    public init(grant: EndpointGrant) {
        self.grant = grant
    }
}

/// Params of `discardAccessToken`: a token its audience refused (git's credential `erase`).
public struct DiscardAccessTokenParams: Sendable, Hashable, Codable {
    /// The access token to drop from the cache.
    public var accessToken: Secret
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    package enum CodingKeys: String, CodingKey {
        case accessToken, correlationId
    }

    /// Creates the params.
    public init(accessToken: Secret, correlationId: String? = nil) {
        self.accessToken = accessToken
        self.correlationId = correlationId
    }
}

/// Result of `discardAccessToken`.
public struct DiscardAccessTokenResult: Sendable, Hashable, Codable {
    /// Whether the cache held the token (it no longer does).
    public var discarded: Bool

    /// Creates the result.
    public init(discarded: Bool) {
        self.discarded = discarded
    }
}
