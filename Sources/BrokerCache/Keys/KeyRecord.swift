import Crypto
public import Foundation

/// Where the data key of one cache is kept, and what it takes to find it: `<state>/key.json`, 0600.
///
/// It never holds the key itself. For the TPM it holds the sealed blob (useless without that TPM), for the
/// passphrase the wrapped key and the Argon2id parameters (useless without the passphrase). It is replaced as a
/// whole by an atomic rename, so a `kill -9` leaves either the old record or the new one.
public struct KeyRecord: Codable, Sendable, Equatable {
    /// The record's format.
    public var version = 1
    /// The store that keeps the key.
    public var store: KeyStoreKind
    /// The cache's id: the keyring's item is found by it, and it is bound into the passphrase's wrap.
    public var cacheID: String
    /// Whether the user chose the store (`tokenbroker key move`): only a plain key file the user did not choose
    /// moves to a better store by itself.
    public var chosen: Bool
    /// The store the key was moved from, while what that store kept is not yet removed.
    public var previous: KeyStoreKind?
    /// TPM: the sealed object (its public and private parts, as tpm2-tss marshals them).
    public var sealed: Data?
    /// Passphrase: the wrapped key and how the passphrase is stretched.
    public var wrapped: PassphraseWrap?

    /// A record for a new or moved key.
    public init(store: KeyStoreKind, cacheID: String, chosen: Bool) {
        self.store = store
        self.cacheID = cacheID
        self.chosen = chosen
    }

    /// The cache id of the cache sealed with `key`: a one-way function of the key (HMAC-SHA256 of a fixed label,
    /// 128 bits in hex), so that a move cut short and tried again names the keyring item it already made instead of
    /// leaving it behind under another id.
    static func cacheID(of key: KeyMemory) -> String {
        let code = key.withKey { HMAC<SHA256>.authenticationCode(for: Data("tokenbroker cache id".utf8), using: $0) }
        return code.prefix(16).map { String(format: "%02x", $0) }.joined()
    }

    /// The record in `url`; nil when there is none.
    static func read(_ url: URL) throws -> KeyRecord? {
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch CocoaError.fileReadNoSuchFile {
            return nil
        } catch {
            throw CacheError(.io, "cannot read \(url.path)", underlying: error)
        }
        do {
            return try JSONDecoder().decode(KeyRecord.self, from: data)
        } catch {
            throw CacheError(
                .corrupt,
                "\(url.path) is damaged: restore it from a backup (the cache key is not in it, so no secret is lost)",
                underlying: error
            )
        }
    }

    /// Replaces the record in `url` durably: a temporary file written and synced, renamed over it, the
    /// directory synced.
    func write(to url: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let data = try encoder.encode(self)
        let temporary = url.deletingLastPathComponent().appending(path: ".\(url.lastPathComponent).new")
        unlink(temporary.path)
        let fd = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw CacheError(.io, "cannot write \(temporary.path): \(String(cString: strerror(errno)))")
        }
        let written = data.withUnsafeBytes { bytes in Glibc.write(fd, bytes.baseAddress, bytes.count) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == data.count, synced, rename(temporary.path, url.path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary.path)
            throw CacheError(.io, "cannot write \(url.path): \(reason)")
        }
        try Directories.syncDirectory(url.deletingLastPathComponent())
    }
}

/// The data key wrapped with a key derived from the passphrase by Argon2id.
public struct PassphraseWrap: Codable, Sendable, Equatable {
    /// Always `argon2id`.
    public var algorithm = "argon2id"
    /// Passes over memory.
    public var iterations: UInt32
    /// Memory, in KiB.
    public var memoryKiB: UInt32
    /// Lanes.
    public var parallelism: UInt32
    /// 16 random bytes.
    public var salt: Data
    /// The data key sealed with AES-256-GCM under the derived key, bound to the cache id.
    public var sealedKey: Data
}
