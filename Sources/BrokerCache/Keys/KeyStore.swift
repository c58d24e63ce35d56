import Foundation

/// Where the cache's data key is kept: the key that seals every token in the database.
public enum KeyStoreKind: String, Sendable, Hashable, Codable, CaseIterable {
    /// The Secret Service on the session bus (GNOME Keyring, KWallet, KeePassXC): one item in the default
    /// collection.
    case secretService = "secret-service"
    /// Sealed to this machine's TPM 2.0: the sealed blob is useless on another machine.
    case tpm
    /// Wrapped with a passphrase stretched by Argon2id: held only in memory after `tokenbroker unlock`.
    case passphrase
    /// A plain 0600 key file beside the database: the fallback, and a warning.
    case file

    /// The order stores are tried in when the user names none: the passphrase only when chosen.
    public static let defaultOrder: [KeyStoreKind] = [.secretService, .tpm, .file]

    /// The names, as `key-stores` in tokenbrokerd.conf and `tokenbroker key move --to` spell them.
    public static var names: String {
        allCases.map(\.rawValue).joined(separator: ", ")
    }

    /// What the store protects the key against, for status.
    public var protection: String {
        switch self {
        case .secretService:
            "in the Secret Service (the desktop keyring): a copy of the state directory opens nothing"
        case .tpm: "sealed to this machine's TPM: a copy of the state directory opens nothing on another machine"
        case .passphrase: "wrapped with your passphrase (Argon2id): held only in memory after tokenbroker unlock"
        case .file: "in a plain key file beside the database"
        }
    }

    /// The warning status, the journal and `getStatus` give while the key is in this store; nil for the stores
    /// that keep it apart from the state directory.
    public var warning: String? {
        guard self == .file else { return nil }
        return "the cache key is a plain file in the state directory: whoever copies that directory (a backup, a "
            + "synced home, a stolen disk) can read every token; see tokenbroker key status"
    }
}

/// Why a key store could not give or keep the key.
public enum KeyStoreProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// The store is not on this machine or session (no Secret Service on the bus, no usable TPM).
    case unavailable(String)
    /// The store is there but locked: the user has to unlock it (the keyring, a passphrase not given yet).
    case locked(String)
    /// The passphrase given does not open the key.
    case wrongPassphrase
    /// The store answered with an error, or holds something that is not this cache's key.
    case failed(String)

    /// What happened, for people; never a key or passphrase.
    public var description: String {
        switch self {
        case .unavailable(let reason), .locked(let reason), .failed(let reason): reason
        case .wrongPassphrase: "the passphrase does not open the cache key"
        }
    }
}

/// A passphrase the user typed, held as bytes that are wiped when released; it never prints.
///
/// Unchecked-Sendable: the bytes are written once, in `init`, then only read.
public final class Passphrase: @unchecked Sendable, CustomStringConvertible {
    private let bytes: UnsafeMutableBufferPointer<UInt8>

    /// Copies the UTF-8 of `text` (the string the caller holds is the caller's to drop; Swift strings cannot be
    /// wiped).
    public init(_ text: String) {
        let length = text.utf8.count
        bytes = .allocate(capacity: max(length, 1))
        bytes.initialize(repeating: 0)
        _ = bytes.initialize(from: text.utf8)
        count = length
    }

    /// The passphrase's length in bytes.
    public let count: Int

    /// Whether it is empty.
    public var isEmpty: Bool {
        count == 0
    }

    /// Runs `body` with the bytes.
    func withBytes<Result>(_ body: (UnsafeBufferPointer<UInt8>) throws -> Result) rethrows -> Result {
        try body(UnsafeBufferPointer(start: bytes.baseAddress, count: count))
    }

    /// Always `<redacted>`.
    public var description: String {
        "<redacted>"
    }

    deinit {
        if let start = bytes.baseAddress { explicit_bzero(start, bytes.count) }
        bytes.deallocate()
    }
}

/// One place the data key can be kept.
///
/// Calls block (a bus round trip, the TPM, a key derivation): ``KeyVault`` makes them one at a time, off the
/// threads that serve connections.
protocol KeyStore: Sendable {
    /// Which store this is.
    var kind: KeyStoreKind { get }

    /// The key `record` says this store keeps.
    func load(_ record: KeyRecord, passphrase: Passphrase?) throws(KeyStoreProblem) -> KeyMemory

    /// Keeps `key` for `record`'s cache; what is needed to find it again goes into `record` (the TPM's sealed blob,
    /// the passphrase's wrap), which the vault then writes.
    ///
    /// ``KeyStoreProblem/unavailable(_:)`` when the store is not here: a new key then goes to the next store in
    /// the order.
    func save(_ key: KeyMemory, into record: inout KeyRecord, passphrase: Passphrase?) throws(KeyStoreProblem)

    /// Removes what ``save(_:into:passphrase:)`` kept outside the record (the keyring's item, the key file).
    func discard(_ record: KeyRecord) throws(KeyStoreProblem)
}
