public import Crypto
public import Foundation
import Synchronization

/// Seals cache entries with AES-256-GCM under a key kept apart from the database.
///
/// Each sealed box is bound to the entry's id (section and key) as authenticated data, so a sealed body moved
/// to another row fails to open instead of serving the wrong token.
public struct SecretSealer: Sendable {
    private static let formatVersion: UInt8 = 1
    private let key: KeyMemory
    /// A subkey for row ids, derived so that no value is computed twice under the sealing key.
    private let rowKey: KeyMemory
    private let rowIDs = RowIDMemo()

    /// A sealer for `key`, kept in memory that core dumps leave out.
    public init(key: KeyMemory) throws {
        self.key = key
        rowKey = try key.withKey { key in
            try KeyMemory(
                HKDF<SHA256>.deriveKey(
                    inputKeyMaterial: key,
                    info: Data("tokenbroker row ids v1".utf8),
                    outputByteCount: KeyMemory.length
                )
            )
        }
    }

    /// A sealer for `key` (32 bytes).
    public init(key: SymmetricKey) throws {
        try self.init(key: try KeyMemory(key))
    }

    /// Seals `plaintext` for the entry `context`.
    public func seal(_ plaintext: Data, context: String) throws -> Data {
        let box = try key.withKey { key in try AES.GCM.seal(plaintext, using: key, authenticating: Data(context.utf8)) }
        guard let combined = box.combined else { throw CacheError(.corrupt, "AES-GCM produced no combined box") }
        return Data([Self.formatVersion]) + combined
    }

    /// Opens a body sealed for `context`; throws when it was sealed under another key or for another entry.
    public func open(_ sealed: Data, context: String) throws -> Data {
        guard sealed.first == Self.formatVersion else {
            throw CacheError(.corrupt, "a sealed entry has an unknown format")
        }
        do {
            let box = try AES.GCM.SealedBox(combined: sealed.dropFirst())
            return try key.withKey { key in try AES.GCM.open(box, using: key, authenticating: Data(context.utf8)) }
        } catch {
            throw CacheError(.corrupt, "a sealed entry failed authentication", underlying: error)
        }
    }

    /// The row id an entry is stored under: an HMAC of its section and key, so the database reveals neither
    /// account ids nor client ids (MSAL keys are built from both).
    ///
    /// Remembered (``RowIDMemo``), for the entries written and read again.
    public func rowID(section: String, key: String) -> String {
        rowIDs.rowID(section: section, key: key) { computedRowID(section: section, key: key) }
    }

    /// The row id of an entry being removed, which the memo forgets: a removed account's ids do not stay in memory.
    public func rowIDForgetting(section: String, key: String) -> String {
        rowIDs.forget(section: section, key: key) ?? computedRowID(section: section, key: key)
    }

    /// The row id, computed and not remembered: for the rows a load checks, each once.
    public func computedRowID(section: String, key: String) -> String {
        let input = Data("tokenbroker.row.v1\u{0}\(section)\u{0}\(key)".utf8)
        return rowKey.withKey { key in Data(HMAC<SHA256>.authenticationCode(for: input, using: key)) }
            .base64EncodedString()
    }

    /// How many row ids the memo holds, for tests.
    var rememberedRowIDs: Int { rowIDs.count }

    /// A value that identifies the key without revealing it: HMAC-SHA256 of a fixed label.
    public var keyCheck: String {
        let mac = key.withKey { key in
            Data(HMAC<SHA256>.authenticationCode(for: Data("tokenbroker key check v1".utf8), using: key))
        }
        return mac.base64EncodedString()
    }
}

/// The row ids of the entries written lately.
///
/// Each is an HMAC of a hundred-byte key, some 30,000 instructions through swift-crypto, and a refresh writes five
/// entries, the same five at each refresh of theirs: 22 % of the writer's instructions went to computing the same ids
/// again. They are a function of the key alone, and none of them is secret (the database holds them in the clear). At
/// most `capacity` are kept, forgotten all at once when full, and an entry's when it is removed.
final class RowIDMemo: Sendable {
    static let capacity = 1024

    private struct Entry: Hashable {
        let section: String
        let key: String
    }

    private let ids = Mutex<[Entry: String]>([:])

    /// `compute`'s id for the entry, computed once while it is remembered.
    func rowID(section: String, key: String, compute: () -> String) -> String {
        let entry = Entry(section: section, key: key)
        if let id = ids.withLock({ $0[entry] }) { return id }
        let id = compute()
        ids.withLock { ids in
            if ids.count >= Self.capacity { ids.removeAll(keepingCapacity: true) }
            ids[entry] = id
        }
        return id
    }

    /// Forgets the entry's id, returning it if it was remembered.
    func forget(section: String, key: String) -> String? {
        let entry = Entry(section: section, key: key)
        return ids.withLock { $0.removeValue(forKey: entry) }
    }

    /// How many ids are remembered, for tests.
    var count: Int { ids.withLock { $0.count } }
}
