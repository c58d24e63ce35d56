import CLinuxSupport
import Foundation
import Glibc

/// Why the cache key cannot be had now: the cache stays locked and serves nothing sealed.
///
/// Nothing is deleted, overwritten or made anew while it lasts.
public struct KeyUnavailable: Error, Sendable, CustomStringConvertible {
    /// The store that keeps (or was to keep) the key; nil when none is known.
    public var store: KeyStoreKind?
    /// What the store said.
    public var problem: KeyStoreProblem
    /// What the user can do about it.
    public var hint: String
    /// Seconds to wait before the next passphrase is tried (after wrong ones).
    public var retryAfter: Int?
    /// Whether the user chose the store (for status while locked).
    public var chosen: Bool

    /// Creates one.
    public init(
        store: KeyStoreKind?,
        problem: KeyStoreProblem,
        hint: String,
        retryAfter: Int? = nil,
        chosen: Bool = false
    ) {
        self.store = store
        self.problem = problem
        self.hint = hint
        self.retryAfter = retryAfter
        self.chosen = chosen
    }

    /// The problem and the hint.
    public var description: String {
        "\(problem); \(hint)"
    }
}

/// The cache's data key: which store keeps it, finding it at start, and moving it between stores without loss.
///
/// Every call blocks (the bus, the TPM, Argon2id): ``CacheVault`` makes them one at a time on a thread of its own.
public final class KeyVault: Sendable {
    /// The state directory's files.
    public let location: CacheLocation
    /// The stores a new key is offered to, in order.
    public let order: [KeyStoreKind]
    private let stores: [KeyStoreKind: any KeyStore]
    private let keyring = SecretServiceKeyStore()
    /// Where the keyring daemons keep their files (gnome-keyring `keyrings/`, KWallet `kwalletd/`): the user's data
    /// directory.
    private let keyringData: URL?

    /// A vault over `location`'s files trying `order`; `environment` names the TPM's TCTI (`TOKENBROKER_TPM_TCTI`)
    /// and the user's data directory (`XDG_DATA_HOME`, `HOME`).
    public init(
        location: CacheLocation,
        order: [KeyStoreKind] = KeyStoreKind.defaultOrder,
        environment: [String: String] = [:]
    ) {
        self.location = location
        self.order = order.isEmpty ? KeyStoreKind.defaultOrder : order
        if let data = environment["XDG_DATA_HOME"], data.hasPrefix("/") {
            keyringData = URL(filePath: data)
        } else if let home = environment["HOME"], home.hasPrefix("/") {
            keyringData = URL(filePath: home).appending(path: ".local/share")
        } else {
            keyringData = nil
        }
        stores = [
            .secretService: keyring,
            .tpm: TPMKeyStore(tcti: TPMKeyStore.tcti(environment: environment)),
            .passphrase: PassphraseKeyStore(),
            .file: FileKeyStore(url: location.keyURL),
        ]
    }

    /// The key, and where it is kept.
    public struct Opened: Sendable {
        /// The data key.
        public let key: KeyMemory
        /// Where it is kept now.
        public let record: KeyRecord
        /// What happened on the way, for the journal: a new key, a move, a move that could not be made.
        public let notes: [String]
        /// Whether the key was made just now (for a cache without data).
        public var isNew = false
    }

    /// Finds the key: where the record says, else in a plain key file from before records (0.4 and earlier);
    /// for a cache without data, makes one and gives it to the first store in the order that takes it.
    ///
    /// A plain key file the user did not choose moves to the first better store that takes it.
    public func open(passphrase: Passphrase?) throws(KeyUnavailable) -> Opened {
        let record: KeyRecord?
        do {
            record = try KeyRecord.read(location.keyRecordURL)
        } catch {
            throw KeyUnavailable(
                store: nil,
                problem: .failed(String(describing: error)),
                hint: "restore \(location.keyRecordURL.path) from a backup"
            )
        }
        if let record { return try openRecorded(record, passphrase: passphrase) }
        if let key = try loadLegacyFile() {
            let record = KeyRecord(store: .file, cacheID: KeyRecord.cacheID(of: key), chosen: false)
            return settle(key, in: record, written: false)
        }
        guard !SQLiteTokenStore.holdsData(at: location.databaseURL) else {
            throw KeyUnavailable(
                store: nil,
                problem: .failed(
                    "the cache key is missing, and the database \(location.databaseURL.path) holds tokens"
                ),
                hint: "restore \(location.keyRecordURL.lastPathComponent) or \(location.keyURL.lastPathComponent) "
                    + "from a backup, or move the db directory away to start empty"
            )
        }
        return try create(passphrase: passphrase)
    }

    /// Moves `key` from where `record` says to `kind`; the returned record names the new place.
    ///
    /// Moving to where it already is re-wraps it (a new passphrase) or only marks the store as chosen. The steps, in
    /// order: the new store keeps the key; the key read back from it is the same; the record names the new store
    /// (durably: from here on the key is found there); what the old store kept (the key file, the keyring's item)
    /// is removed. A `kill -9` anywhere among them leaves a cache that opens with all its tokens (Tests/keys cuts
    /// each file operation of a move in turn).
    public func move(
        _ key: KeyMemory,
        from record: KeyRecord,
        to kind: KeyStoreKind,
        passphrase: Passphrase?,
        chosen: Bool
    ) throws(KeyStoreProblem) -> KeyRecord {
        var moved = KeyRecord(store: kind, cacheID: record.cacheID, chosen: chosen)
        let store = store(kind)
        try store.save(key, into: &moved, passphrase: passphrase)
        guard try store.load(moved, passphrase: passphrase).matches(key) else {
            throw .failed("the \(kind.rawValue) store gave back another key than it was given")
        }
        if kind == .secretService { flushKeyringFiles() }
        if record.store != kind, record.store == .file || record.store == .secretService {
            moved.previous = record.store
        }
        try write(moved)
        return discardPrevious(moved, cacheID: record.cacheID)
    }

    /// Writes out the file systems of the user's data directory and of the state directory.
    ///
    /// The keyring answered that it holds the key, which says only that its process does: its file may still be in
    /// the page cache, and its rename not on disk (gnome-keyring syncs the file, not its directory). This runs before
    /// the old copy of the key can go, so a power cut after that finds the key in the keyring's file. A keyring that
    /// saves on its own schedule (KeePassXC without its save-on-change setting) is beyond this; SECURITY.md says so.
    private func flushKeyringFiles() {
        for directory in [keyringData, location.stateDirectory].compactMap({ $0 }) {
            let fd = Glibc.open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard fd >= 0 else { continue }
            _ = tb_syncfs(fd)
            close(fd)
        }
    }

    /// Asks the keyring to unlock its default collection (on a desktop, its own prompt); nil when it did.
    func askKeyringToUnlock() -> KeyStoreProblem? {
        keyring.unlock()
    }

    private func store(_ kind: KeyStoreKind) -> any KeyStore {
        stores[kind] ?? FileKeyStore(url: location.keyURL)
    }

    private func openRecorded(_ record: KeyRecord, passphrase: Passphrase?) throws(KeyUnavailable) -> Opened {
        let key: KeyMemory
        do {
            key = try store(record.store).load(record, passphrase: passphrase)
        } catch {
            throw KeyUnavailable(
                store: record.store,
                problem: error,
                hint: Self.hint(for: record.store, error),
                chosen: record.chosen
            )
        }
        var record = record
        var notes: [String] = []
        if record.previous != nil { record = discardPrevious(record, cacheID: record.cacheID) }
        if record.store != .file { notes += removeStrayKeyFile(matching: key) }
        return settle(key, in: record, written: true, notes: notes)
    }

    /// A plain key file the user did not choose moves to the first better store that takes it; else the record
    /// is written as it is, unless it is `written` already.
    private func settle(_ key: KeyMemory, in record: KeyRecord, written: Bool, notes: [String] = []) -> Opened {
        var notes = notes
        guard record.store == .file, !record.chosen else { return Opened(key: key, record: record, notes: notes) }
        for kind in order.prefix(while: { $0 != .file }) where kind != .passphrase {
            do {
                let moved = try move(key, from: record, to: kind, passphrase: nil, chosen: false)
                notes.append("the cache key moved from the plain key file to the \(kind.rawValue) store")
                return Opened(key: key, record: moved, notes: notes)
            } catch .unavailable(let reason) {
                notes.append("\(kind.rawValue) store not available: \(reason)")
            } catch {
                notes.append("the cache key stays in the plain key file for now: \(kind.rawValue): \(error)")
                break
            }
        }
        if !written {
            do {
                try write(record)
            } catch {
                notes.append("cannot write the key record: \(error)")
            }
        }
        return Opened(key: key, record: record, notes: notes)
    }

    /// A new key for a cache without data, kept by the first store in the order that takes it.
    private func create(passphrase: Passphrase?) throws(KeyUnavailable) -> Opened {
        let key: KeyMemory
        do {
            key = try KeyMemory.random()
        } catch {
            throw KeyUnavailable(store: nil, problem: .failed("\(error)"), hint: "see the journal")
        }
        let cacheID = KeyRecord.cacheID(of: key)
        var passed: [String] = []
        for kind in order {
            var record = KeyRecord(store: kind, cacheID: cacheID, chosen: false)
            do throws(KeyStoreProblem) {
                let store = store(kind)
                try store.save(key, into: &record, passphrase: passphrase)
                guard try store.load(record, passphrase: passphrase).matches(key) else {
                    throw KeyStoreProblem.failed("the \(kind.rawValue) store gave back another key than it was given")
                }
                try write(record)
                return Opened(
                    key: key,
                    record: record,
                    notes: passed + ["a new cache key, kept by the \(kind.rawValue) store"],
                    isNew: true
                )
            } catch .unavailable(let reason) {
                passed.append("\(kind.rawValue) store not available: \(reason)")
            } catch {
                throw KeyUnavailable(store: kind, problem: error, hint: Self.hint(for: kind, error))
            }
        }
        throw KeyUnavailable(
            store: nil,
            problem: .unavailable(
                "none of the key stores (\(order.map(\.rawValue).joined(separator: ", "))) is here: "
                    + passed.joined(separator: "; ")
            ),
            hint: "add file to key-stores in tokenbrokerd.conf to accept a plain key file"
        )
    }

    /// The key in a plain key file with no record beside it (every cache of 0.4 and earlier).
    private func loadLegacyFile() throws(KeyUnavailable) -> KeyMemory? {
        do {
            return try KeyFile.load(location.keyURL)
        } catch {
            throw KeyUnavailable(
                store: .file,
                problem: .failed(String(describing: error)),
                hint: "fix the file, then restart"
            )
        }
    }

    /// Removes what the store the key moved from kept; the record keeps naming it when that fails (next start).
    private func discardPrevious(_ record: KeyRecord, cacheID: String) -> KeyRecord {
        guard let previous = record.previous else { return record }
        var done = record
        done.previous = nil
        do {
            var old = KeyRecord(store: previous, cacheID: cacheID, chosen: false)
            old.previous = nil
            try store(previous).discard(old)
            try write(done)
        } catch {
            return record
        }
        return done
    }

    /// A plain key file left by a move that was cut short: removed when it holds the same key.
    private func removeStrayKeyFile(matching key: KeyMemory) -> [String] {
        guard let stray = try? KeyFile.load(location.keyURL) else { return [] }
        guard stray.matches(key) else {
            return ["\(location.keyURL.path) holds another key than the cache's: left in place"]
        }
        do {
            try FileKeyStore(url: location.keyURL).discard(KeyRecord(store: .file, cacheID: "", chosen: false))
            return ["removed \(location.keyURL.path), left by a key move that was cut short"]
        } catch {
            return ["cannot remove \(location.keyURL.path): \(error)"]
        }
    }

    private func write(_ record: KeyRecord) throws(KeyStoreProblem) {
        do {
            try record.write(to: location.keyRecordURL)
        } catch {
            throw .failed(String(describing: error))
        }
    }

    /// What to do when `kind` gave `problem`.
    static func hint(for kind: KeyStoreKind, _ problem: KeyStoreProblem) -> String {
        switch (kind, problem) {
        case (.passphrase, .wrongPassphrase): "try again: tokenbroker unlock"
        case (.passphrase, _): "run: tokenbroker unlock"
        case (.secretService, .locked):
            "unlock the keyring (log in to the desktop, or run tokenbroker unlock to get its prompt); "
                + "the broker tries again at the next request"
        case (.secretService, _):
            "start the keyring (gnome-keyring-daemon, KWallet, KeePassXC) on the session bus; "
                + "the broker tries again at the next request"
        case (.tpm, _): "make the TPM reachable again (the broker tries again at the next request)"
        case (.file, _): "restore the key file, then restart"
        }
    }
}
