public import BrokerProtocol
import Foundation

/// An account entry: one per account, environment and tenant.
public struct AccountEntry: Sendable, Hashable {
    /// `uid.utid` from `client_info`, else the id token's `sub`: MSAL's `identifier`, ADAL's `homeAccountId`.
    public var homeAccountId: String
    /// The authority host.
    public var environment: String
    /// The tenant (or issuer path).
    public var realm: String
    /// The `oid` (or `sub`) inside the tenant.
    public var localAccountId: String
    /// `preferred_username`, else `upn`; ADAL's `userId`.
    ///
    /// May be empty.
    public var username: String
    /// `MSSTS` (Entra ID v2 and MSA), `ADFS`, or `Generic` for other OpenID Connect providers.
    public var authorityType: String
    /// How the account was signed in or imported.
    public var accountSource: String?
    /// The display name.
    public var name: String?
    /// The given name.
    public var givenName: String?
    /// The family name.
    public var familyName: String?
    /// The raw `client_info` the account came from.
    public var clientInfo: String?
    /// Fields this version does not know, kept for export.
    public var extra: [String: JSONValue]

    /// Creates an account entry.
    public init(
        homeAccountId: String,
        environment: String,
        realm: String,
        localAccountId: String,
        username: String,
        authorityType: String = "MSSTS",
        accountSource: String? = nil,
        name: String? = nil,
        givenName: String? = nil,
        familyName: String? = nil,
        clientInfo: String? = nil,
        extra: [String: JSONValue] = [:]
    ) {
        self.homeAccountId = homeAccountId
        self.environment = environment
        self.realm = realm
        self.localAccountId = localAccountId
        self.username = username
        self.authorityType = authorityType
        self.accountSource = accountSource
        self.name = name
        self.givenName = givenName
        self.familyName = familyName
        self.clientInfo = clientInfo
        self.extra = extra
    }

    /// Reads an entry from its MSAL JSON fields.
    public init(fields: [String: JSONValue]) throws(EntryError) {
        var reader = FieldReader(fields)
        homeAccountId = try reader.requiredString("home_account_id")
        environment = try reader.requiredString("environment")
        realm = try reader.string("realm") ?? ""
        localAccountId = try reader.string("local_account_id") ?? ""
        username = try reader.string("username") ?? ""
        authorityType = try reader.string("authority_type") ?? "MSSTS"
        accountSource = try reader.string("account_source")
        name = try reader.string("name")
        givenName = try reader.string("given_name")
        familyName = try reader.string("family_name")
        clientInfo = try reader.string("client_info")
        extra = reader.remaining
    }

    /// The entry as MSAL JSON fields.
    public var fields: [String: JSONValue] {
        var writer = FieldWriter()
        writer.set("home_account_id", homeAccountId)
        writer.set("environment", environment)
        writer.set("realm", realm)
        writer.set("local_account_id", localAccountId)
        writer.set("username", username)
        writer.set("authority_type", authorityType)
        writer.set("account_source", accountSource)
        writer.set("name", name)
        writer.set("given_name", givenName)
        writer.set("family_name", familyName)
        writer.set("client_info", clientInfo)
        return writer.merging(extra: extra)
    }

    /// `home_account_id-environment-realm`, lowercased (MSAL Python's key).
    public var id: EntryID {
        EntryID(
            section: .account,
            key: EntryID.key(homeAccountId, environment, realm)
        )
    }

    /// `client_info` rebuilt from `uid.utid`, for Microsoft accounts imported without it.
    var derivedClientInfo: String? {
        guard authorityType == "MSSTS" else { return nil }
        let parts = homeAccountId.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else { return nil }
        let json = try? JSONEncoder().encode(["uid": String(parts[0]), "utid": String(parts[1])])
        return json.map { Base64URL.encode($0) }
    }
}
