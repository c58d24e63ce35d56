public import BrokerProtocol
import Foundation

/// An id token entry: the raw JWT the account's claims come from.
public struct IdToken: Sendable, Hashable {
    /// The account's `uid.utid` (or `sub`).
    public var homeAccountId: String
    /// The authority host.
    public var environment: String
    /// The tenant (or issuer path) that issued it.
    public var realm: String
    /// The client id it was issued to (its audience).
    public var clientId: String
    /// The JWT.
    public var secret: Secret
    /// Fields this version does not know, kept for export.
    public var extra: [String: JSONValue]

    /// Creates an id token entry.
    public init(
        homeAccountId: String,
        environment: String,
        realm: String,
        clientId: String,
        secret: Secret,
        extra: [String: JSONValue] = [:]
    ) {
        self.homeAccountId = homeAccountId
        self.environment = environment
        self.realm = realm
        self.clientId = clientId
        self.secret = secret
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
        extra = reader.remaining
    }

    /// The entry as MSAL JSON fields.
    public var fields: [String: JSONValue] {
        var writer = FieldWriter()
        writer.set("credential_type", Section.idToken.name)
        writer.set("secret", secret.reveal())
        writer.set("home_account_id", homeAccountId)
        writer.set("environment", environment)
        writer.set("realm", realm)
        writer.set("client_id", clientId)
        return writer.merging(extra: extra)
    }

    /// `home_account_id-environment-idtoken-client_id-realm-`, lowercased (MSAL Python's key).
    public var id: EntryID {
        EntryID(
            section: .idToken,
            key: EntryID.key(homeAccountId, environment, Section.idToken.name, clientId, realm, "")
        )
    }

    /// The JWT's payload claims, read without checking the signature; nil when the secret is not a JWT.
    public var unverifiedClaims: [String: JSONValue]? {
        guard let jws = CompactJWS.parts(of: secret.reveal()),
            let data = Base64URL.decode(utf8: jws.bytes[jws.payload])
        else { return nil }
        return (try? JSONValue.parse(Array(data)))?.objectValue
    }
}
