import BrokerProtocol
public import BrokerTime
import Crypto
public import Foundation
public import Logging
import Synchronization

/// The cache: the in-memory contents every lookup reads, kept in step with a durable ``TokenStore``.
///
/// Writes go to the store first; memory changes only after the store committed, in commit order. A write
/// that throws changed nothing, on disk or in memory.
public final class TokenCache: Sendable {
    private let store: any TokenStore
    private let contents: ReadWriteLocked<CacheContents>
    /// Entries found on disk that could not be opened; left in place, reported by status.
    public let damaged: [(id: EntryID, reason: String)]
    /// Whether the database was missing beside an existing key when the cache was opened (it started empty).
    public let databaseWasMissing: Bool
    private let failures = Mutex<WriteFailures>(WriteFailures())
    private let changeCount = Atomic<UInt64>(0)
    private let logger: Logger?
    private let clock: any BrokerClock

    /// Writes that failed since the cache was opened (a full disk, a read-only file system), for status.
    public struct WriteFailures: Sendable {
        /// How many failed.
        public var count = 0
        /// The last one's reason, and when it failed (epoch milliseconds).
        public var last: (reason: String, at: Int64)?
    }

    /// Loads everything `store` holds; `databaseWasMissing` is what ``CacheLocation/openCache(logger:clock:)`` found.
    ///
    /// A failed write is logged to `logger` at error level, and counted in ``writeFailures``.
    public init(
        store: any TokenStore,
        databaseWasMissing: Bool = false,
        logger: Logger? = nil,
        clock: any BrokerClock = .system
    ) async throws {
        self.logger = logger
        self.clock = clock
        let stored = try await store.loadAll()
        self.store = store
        self.contents = ReadWriteLocked(stored.contents)
        self.damaged = stored.damaged
        self.databaseWasMissing = databaseWasMissing
        if stored.contents.count.total >= FreeMemory.bulk { FreeMemory.release() }
    }

    /// Where the managed-identity endpoint's grants are kept: beside the entries, when the store can hold them.
    public var grantStore: (any GrantStore)? {
        store as? any GrantStore
    }

    /// Writes that failed since the cache was opened.
    public var writeFailures: WriteFailures {
        failures.withLock { $0 }
    }

    /// Runs `body` on the current contents under the cache's shared lock (readers never wait for each other).
    ///
    /// Keep it short and free of I/O.
    public func read<Result, Failure: Error>(
        _ body: (borrowing CacheContents) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        try contents.read(body)
    }

    /// How many commits changed the contents so far: an answer worked out from the contents holds while this stays.
    ///
    /// Read it inside ``read(_:)`` to pair it with what was read there; it moves under the exclusive lock, with
    /// the contents, and before ``commit(_:)`` returns.
    public var generation: UInt64 {
        changeCount.load(ordering: .acquiring)
    }

    /// Writes `changes` durably, then applies them in memory.
    public func commit(_ changes: CacheChanges) async throws {
        do {
            try await store.commit(changes) {
                self.contents.write {
                    $0.apply(changes)
                    self.changeCount.add(1, ordering: .releasing)
                }
            }
            if changes.upserts.count + changes.deletions.count >= FreeMemory.bulk { FreeMemory.release() }
        } catch {
            let reason = String(String(describing: error).prefix(300))
            let at = clock.nowMilliseconds
            failures.withLock {
                $0.count += 1
                $0.last = (reason, at)
            }
            logger?.error("a cache write failed; none of it was kept", metadata: ["reason": "\(reason)"])
            throw error
        }
    }
}

/// Where the cache lives inside the state directory, and how it is opened safely.
public struct CacheLocation: Sendable {
    /// The state directory (0700).
    public var stateDirectory: URL

    /// The cache inside `stateDirectory`.
    public init(stateDirectory: URL) {
        self.stateDirectory = stateDirectory
    }

    /// Where the daemon keeps its state: `option` (`--state-directory`), else `$STATE_DIRECTORY` (systemd's
    /// `StateDirectory=`, its first entry), else `$XDG_STATE_HOME/tokenbroker`, else `~/.local/state/tokenbroker`;
    /// nil when none of them is set to an absolute path.
    public static func stateDirectory(option: String?, environment: [String: String]) -> URL? {
        if let option { return URL(filePath: option) }
        if let systemd = environment["STATE_DIRECTORY"]?.split(separator: ":").first, systemd.hasPrefix("/") {
            return URL(filePath: String(systemd))
        }
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") {
            return URL(filePath: state).appending(path: "tokenbroker")
        }
        guard let home = environment["HOME"], home.hasPrefix("/") else { return nil }
        return URL(filePath: home).appending(path: ".local/state/tokenbroker")
    }

    /// The database: `<state>/db/cache.sqlite3` (with its `-wal` and `-shm` files beside it).
    public var databaseURL: URL {
        stateDirectory.appending(path: "db/cache.sqlite3")
    }

    /// The sealing key: `<state>/cache.key`, outside the database's directory, so a copy of `db/` alone reveals
    /// nothing.
    public var keyURL: URL {
        stateDirectory.appending(path: "cache.key")
    }

    /// Where the key is kept, and what it takes to find it: `<state>/key.json` (never the key itself).
    public var keyRecordURL: URL {
        stateDirectory.appending(path: "key.json")
    }

    /// The lock that keeps two daemons off one state directory: `<state>/lock`.
    public var lockURL: URL {
        stateDirectory.appending(path: "lock")
    }

    /// Opens the cache over ``openStore(clock:)``.
    ///
    /// Where the key exists and the database does not (deleted, or lost with its directory), the new empty cache
    /// says so in ``TokenCache/databaseWasMissing``: every token the key sealed is gone, and the user should hear it.
    public func openCache(logger: Logger? = nil, clock: any BrokerClock = .system) async throws -> TokenCache {
        let databaseWasMissing =
            FileManager.default.fileExists(atPath: keyURL.path)
            && !FileManager.default.fileExists(atPath: databaseURL.path)
        return try await TokenCache(
            store: try openStore(clock: clock),
            databaseWasMissing: databaseWasMissing,
            logger: logger,
            clock: clock
        )
    }

    /// Opens the cache sealed with `key` (the ``KeyVault``'s), creating the database's directory 0700; refuses a
    /// database sealed with another key.
    ///
    /// A database missing beside a key that is not new is said in ``TokenCache/databaseWasMissing``.
    public func openCache(
        key: KeyMemory,
        keyIsNew: Bool,
        logger: Logger? = nil,
        clock: any BrokerClock = .system
    ) async throws -> TokenCache {
        try Directories.ensurePrivateDirectory(stateDirectory)
        try Directories.ensurePrivateDirectory(databaseURL.deletingLastPathComponent())
        let databaseWasMissing = !keyIsNew && !FileManager.default.fileExists(atPath: databaseURL.path)
        return try await TokenCache(
            store: try SQLiteTokenStore(url: databaseURL, sealer: try SecretSealer(key: key), clock: clock),
            databaseWasMissing: databaseWasMissing,
            logger: logger,
            clock: clock
        )
    }

    /// Opens the SQLite store: creates the directories 0700 and a new key only for a database without data;
    /// refuses a database whose key is missing or different.
    public func openStore(clock: any BrokerClock = .system) throws -> SQLiteTokenStore {
        try Directories.ensurePrivateDirectory(stateDirectory)
        try Directories.ensurePrivateDirectory(databaseURL.deletingLastPathComponent())
        let key: KeyMemory
        if let existing = try KeyFile.load(keyURL) {
            key = existing
        } else if SQLiteTokenStore.holdsData(at: databaseURL) {
            throw CacheError(
                .keyMismatch,
                "the cache key \(keyURL.path) is missing but the database \(databaseURL.path) holds tokens: "
                    + "restore the key, or move the database away to start empty"
            )
        } else {
            key = try KeyFile.create(keyURL)
        }
        return try SQLiteTokenStore(url: databaseURL, sealer: try SecretSealer(key: key), clock: clock)
    }
}
