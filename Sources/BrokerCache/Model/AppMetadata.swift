public import BrokerProtocol

/// What the broker knows about an app: whether it belongs to the family of client ids (FOCI).
///
/// An entry without `familyId` means "seen, not known to be in the family"; an empty `familyId` written after a
/// `client_mismatch` means "known not to be in the family".
public struct AppMetadata: Sendable, Hashable {
    /// The app's client id.
    public var clientId: String
    /// The authority host.
    public var environment: String
    /// `1` when the app is in the family.
    public var familyId: String?
    /// Fields this version does not know, kept for export.
    public var extra: [String: JSONValue]

    /// Creates an entry.
    public init(clientId: String, environment: String, familyId: String? = nil, extra: [String: JSONValue] = [:]) {
        self.clientId = clientId
        self.environment = environment
        self.familyId = familyId
        self.extra = extra
    }

    /// Reads an entry from its MSAL JSON fields.
    public init(fields: [String: JSONValue]) throws(EntryError) {
        var reader = FieldReader(fields)
        clientId = try reader.requiredString("client_id")
        environment = try reader.requiredString("environment")
        familyId = try reader.string("family_id")
        extra = reader.remaining
    }

    /// The entry as MSAL JSON fields.
    public var fields: [String: JSONValue] {
        var writer = FieldWriter()
        writer.set("client_id", clientId)
        writer.set("environment", environment)
        writer.set("family_id", familyId)
        return writer.merging(extra: extra)
    }

    /// `appmetadata-environment-client_id` (MSAL Python's key, not lowercased).
    public var id: EntryID {
        EntryID(section: .appMetadata, key: "appmetadata-\(environment)-\(clientId)")
    }
}
