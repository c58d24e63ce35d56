import BrokerProtocol
import Crypto
import Foundation

/// A user who signed in: any username is accepted, and the same username (ignoring case) is always the same user.
struct User: Sendable, Hashable {
    /// The username as typed at sign-in (trimmed); the id token's `preferred_username`.
    let username: String

    /// The lowercased username, which identifies the user.
    let key: String

    /// The object id (`oid`, and `uid` in `client_info`): a name-based UUID (version 5) of the lowercased username.
    let objectID: String

    /// The display name: the part of the username before `@`, capitalized.
    let displayName: String

    /// The namespace of the name-based object ids, fixed so that object ids are stable across runs.
    private static let namespace: [UInt8] = [
        0x5b, 0x3a, 0x1c, 0x2e, 0x9d, 0x47, 0x4f, 0x10, 0x8a, 0x61, 0x0c, 0x7e, 0x2b, 0x94, 0xd3, 0x55,
    ]

    /// Creates the user for a username.
    init(username: String) {
        let trimmed = username.trimmingCharacters(in: .whitespacesAndNewlines)
        self.username = trimmed
        key = trimmed.lowercased()
        var digest = Array(Insecure.SHA1.hash(data: Self.namespace + Array(key.utf8)).prefix(16))
        digest[6] = (digest[6] & 0x0F) | 0x50
        digest[8] = (digest[8] & 0x3F) | 0x80
        objectID = UUIDText.format(digest)
        let local = key.split(separator: "@", maxSplits: 1).first.map(String.init) ?? key
        displayName = local.prefix(1).uppercased() + local.dropFirst()
    }

    /// The `sub` claim for one client: stable per user and client, as Entra ID's pairwise subject is.
    func subject(for clientID: String) -> String {
        Base64URL.encode(Array(SHA256.hash(data: Array("\(objectID):\(clientID)".utf8))))
    }
}
