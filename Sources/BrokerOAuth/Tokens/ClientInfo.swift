import BrokerProtocol
import BrokerTime
import Foundation

/// Entra ID's `client_info`: base64url JSON `{"uid": "<object id>", "utid": "<tenant id>"}`.
public struct ClientInfo: Sendable, Hashable {
    /// The user's object id in its home tenant.
    public var uid: String
    /// The home tenant id.
    public var utid: String

    /// Creates client info.
    public init(uid: String, utid: String) {
        self.uid = uid
        self.utid = utid
    }

    /// Decodes the base64url form; nil when it is not client info.
    ///
    /// An account's `client_info` comes back the same in every refresh: the last one is decoded once (its base64
    /// and its JSON were 10,700 instructions of each refresh, callgrind).
    public init?(encoded: String) {
        guard let decoded = Self.lastDecoded.value(of: encoded, Self.decode) else { return nil }
        self = decoded
    }

    private static let lastDecoded = LastDecoded<String, ClientInfo>()

    private static func decode(_ encoded: String) -> ClientInfo? {
        guard let data = Base64URL.decode(encoded),
            let object = (try? JSONValue.parse(Array(data)))?.objectValue,
            let uid = object["uid"]?.stringValue, let utid = object["utid"]?.stringValue, !uid.isEmpty
        else { return nil }
        return ClientInfo(uid: uid, utid: utid)
    }

    /// MSAL's home account id: `uid.utid`.
    public var homeAccountId: String {
        "\(uid).\(utid)"
    }
}
