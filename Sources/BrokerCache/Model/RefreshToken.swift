public import BrokerProtocol

/// A refresh token entry: an app's own, or a family refresh token (FOCI) when `familyId` is set.
public struct RefreshToken: Sendable, Hashable {
    /// The account's `uid.utid` (or `sub`).
    public var homeAccountId: String
    /// The authority host.
    public var environment: String
    /// The client id the token was issued to.
    public var clientId: String
    /// The scopes of the grant, when the writer stored them.
    public var target: String?
    /// The token.
    public var secret: Secret
    /// `1` for a family refresh token any app of the family may redeem.
    public var familyId: String?
    /// When it was last written (epoch seconds); candidates are tried newest first.
    public var lastModificationTime: Int64?
    /// Fields this version does not know, kept for export.
    public var extra: [String: JSONValue]

    /// Creates a refresh token entry.
    public init(
        homeAccountId: String,
        environment: String,
        clientId: String,
        target: String? = nil,
        secret: Secret,
        familyId: String? = nil,
        lastModificationTime: Int64? = nil,
        extra: [String: JSONValue] = [:]
    ) {
        self.homeAccountId = homeAccountId
        self.environment = environment
        self.clientId = clientId
        self.target = target
        self.secret = secret
        self.familyId = familyId
        self.lastModificationTime = lastModificationTime
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
        target = try reader.string("target")
        familyId = try reader.string("family_id").flatMap { $0.isEmpty ? nil : $0 }
        lastModificationTime = try reader.epochSeconds("last_modification_time")
        extra = reader.remaining
    }

    /// The entry as MSAL JSON fields.
    public var fields: [String: JSONValue] {
        var writer = FieldWriter()
        writer.set("credential_type", Section.refreshToken.name)
        writer.set("secret", secret.reveal())
        writer.set("home_account_id", homeAccountId)
        writer.set("environment", environment)
        writer.set("client_id", clientId)
        writer.set("target", target)
        writer.set("family_id", familyId)
        writer.set("last_modification_time", seconds: lastModificationTime)
        return writer.merging(extra: extra)
    }

    /// `home_account_id-environment-refreshtoken-client_id--target`, lowercased (MSAL Python's key; the realm
    /// is empty because a refresh token is cross-tenant).
    public var id: EntryID {
        EntryID(
            section: .refreshToken,
            key: EntryID.key(homeAccountId, environment, Section.refreshToken.name, clientId, "", target ?? "")
        )
    }

    /// Whether this is a family refresh token.
    public var isFamilyToken: Bool {
        familyId != nil
    }
}
