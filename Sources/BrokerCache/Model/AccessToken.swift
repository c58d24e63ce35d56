public import BrokerProtocol

/// An access token entry of the MSAL unified cache.
public struct AccessToken: Sendable, Hashable {
    /// The account's `uid.utid` (or `sub`).
    public var homeAccountId: String
    /// The authority host.
    public var environment: String
    /// The client id the token was issued to.
    public var clientId: String
    /// The tenant (or issuer path) that issued it.
    public var realm: String
    /// The granted scopes, space-separated, as stored.
    public var target: String
    /// The token.
    public var secret: Secret
    /// `Bearer` unless the provider said otherwise.
    public var tokenType: String
    /// When it was cached (epoch seconds).
    public var cachedAt: Int64
    /// When it expires (epoch seconds).
    public var expiresOn: Int64
    /// When it stops being usable even while the provider is down (epoch seconds).
    public var extendedExpiresOn: Int64?
    /// When to refresh it ahead of expiry (epoch seconds), if the provider hinted `refresh_in`.
    public var refreshOn: Int64?
    /// The key id of a proof-of-possession or SSH-certificate token.
    public var keyId: String?
    /// Fields this version does not know, kept for export.
    public var extra: [String: JSONValue]

    /// Creates an access token entry.
    public init(
        homeAccountId: String,
        environment: String,
        clientId: String,
        realm: String,
        target: String,
        secret: Secret,
        tokenType: String = "Bearer",
        cachedAt: Int64,
        expiresOn: Int64,
        extendedExpiresOn: Int64? = nil,
        refreshOn: Int64? = nil,
        keyId: String? = nil,
        extra: [String: JSONValue] = [:]
    ) {
        self.homeAccountId = homeAccountId
        self.environment = environment
        self.clientId = clientId
        self.realm = realm
        self.target = target
        self.secret = secret
        self.tokenType = tokenType
        self.cachedAt = cachedAt
        self.expiresOn = expiresOn
        self.extendedExpiresOn = extendedExpiresOn
        self.refreshOn = refreshOn
        self.keyId = keyId
        self.extra = extra
    }

    /// Reads an entry from its MSAL JSON fields.
    public init(fields: [String: JSONValue]) throws(EntryError) {
        var reader = FieldReader(fields)
        _ = try reader.string("credential_type")
        secret = try reader.secret()
        homeAccountId = try reader.requiredString("home_account_id")
        environment = try reader.requiredString("environment")
        clientId = try reader.requiredString("client_id")
        realm = try reader.string("realm") ?? ""
        target = try reader.string("target") ?? ""
        tokenType = try reader.string("token_type") ?? "Bearer"
        guard let expiresOn = try reader.epochSeconds("expires_on") else { throw EntryError("expires_on is missing") }
        self.expiresOn = expiresOn
        cachedAt = try reader.epochSeconds("cached_at") ?? 0
        extendedExpiresOn = try reader.epochSeconds("extended_expires_on")
        refreshOn = try reader.epochSeconds("refresh_on")
        keyId = try reader.string("key_id")
        extra = reader.remaining
    }

    /// The entry as MSAL JSON fields.
    public var fields: [String: JSONValue] {
        var writer = FieldWriter()
        writer.set("credential_type", Section.accessToken.name)
        writer.set("secret", secret.reveal())
        writer.set("home_account_id", homeAccountId)
        writer.set("environment", environment)
        writer.set("client_id", clientId)
        writer.set("realm", realm)
        writer.set("target", target)
        writer.set("token_type", tokenType)
        writer.set("cached_at", seconds: cachedAt)
        writer.set("expires_on", seconds: expiresOn)
        writer.set("extended_expires_on", seconds: extendedExpiresOn)
        writer.set("refresh_on", seconds: refreshOn)
        writer.set("key_id", keyId)
        return writer.merging(extra: extra)
    }

    /// `home_account_id-environment-accesstoken-client_id-realm-target`, lowercased (MSAL Python's key).
    public var id: EntryID {
        EntryID(
            section: .accessToken,
            key: EntryID.key(homeAccountId, environment, Section.accessToken.name, clientId, realm, target)
        )
    }

    /// The stored scopes.
    public var scopes: ScopeSet {
        ScopeSet(target: target)
    }
}
