public import BrokerProtocol
public import BrokerTime
import CLinuxSupport
public import Foundation
import GRDB

/// The cache on disk: SQLite (GRDB) in WAL mode with `synchronous=FULL`, every entry sealed.
///
/// The contents it loads leave the access tokens' secrets here, read back by ``secrets(of:)``: with 10,000 tokens
/// they were 17 MB of the daemon's 35 MB of heap.
///
/// One table of `(section, row id) → sealed body`. The row id is an HMAC of the entry's MSAL key (which holds
/// account and client ids); the body is the key and the entry's MSAL JSON, sealed with AES-GCM and bound to its
/// row. The file alone reveals no token, no username and no account id: only how many entries of each section.
public final class SQLiteTokenStore: TokenStore {
    private let pool: DatabasePool
    private let sealer: SecretSealer
    private let clock: any BrokerClock
    private let encoder = WireEncoder()

    /// Opens (creating and migrating as needed) the database at `url`, checking it belongs with `sealer`'s key.
    public init(url: URL, sealer: SecretSealer, clock: any BrokerClock = .system) throws {
        self.clock = clock
        var configuration = Configuration()
        configuration.label = "tokenbroker.cache"
        configuration.prepareDatabase { db in
            // Every entry is read once, at start, into memory, which answers all lookups; an access token's secret
            // is read back by its row when an answer is first made. SQLite's page cache (2 MB per connection by
            // default) would mostly keep copies of sealed rows: 256 KiB holds the B-tree's inner pages for those
            // single-row reads and writes, the leaves come from the kernel's page cache.
            try db.execute(sql: "PRAGMA cache_size = -256")
        }
        do {
            pool = try DatabasePool(path: url.path, configuration: configuration)
            // WAL commits are durable only with FULL: NORMAL may lose the last commits on power loss. Set on the
            // writer after the pool opened it: the pool sets NORMAL when it turns WAL on, after prepareDatabase.
            try pool.writeWithoutTransaction { try $0.execute(sql: "PRAGMA synchronous = FULL") }
            try Self.migrator.migrate(pool)
        } catch {
            throw CacheError(.io, "cannot open the cache database \(url.path)", underlying: error)
        }
        self.sealer = sealer
        try checkKey()
    }

    /// The writer connection's `PRAGMA synchronous` (2 is FULL), for tests.
    func writerSynchronousMode() throws -> Int? {
        try pool.writeWithoutTransaction { try Int.fetchOne($0, sql: "PRAGMA synchronous") }
    }

    /// Versioned migrations; a released migration never changes, later schemas add new ones.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: sealed entries") { db in
            try db.execute(
                sql: """
                    CREATE TABLE meta (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
                    CREATE TABLE entry (
                        section TEXT NOT NULL,
                        row_id TEXT NOT NULL,
                        body BLOB NOT NULL,
                        updated_at INTEGER NOT NULL,
                        PRIMARY KEY (section, row_id)
                    ) WITHOUT ROWID;
                    """
            )
        }
        migrator.registerMigration("v2: sealed grants") { db in
            try db.execute(
                sql: """
                    CREATE TABLE grant_record (
                        id TEXT PRIMARY KEY NOT NULL,
                        body BLOB NOT NULL,
                        updated_at INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    """
            )
        }
        return migrator
    }

    /// Whether the database at `url` holds entries or a key check: a key must never be made up for it.
    public static func holdsData(at url: URL) -> Bool {
        guard FileManager.default.fileExists(atPath: url.path) else { return false }
        guard let queue = try? DatabaseQueue(path: url.path, configuration: readOnlyConfiguration) else { return true }
        let rows = try? queue.read { db -> Int in
            guard try db.tableExists("entry") else { return 0 }
            let entries = try Int.fetchOne(db, sql: "SELECT count(*) FROM entry") ?? 0
            let checks = try Int.fetchOne(db, sql: "SELECT count(*) FROM meta WHERE name = 'key_check'") ?? 0
            return entries + checks
        }
        return rows.map { $0 > 0 } ?? true
    }

    private static var readOnlyConfiguration: Configuration {
        var configuration = Configuration()
        configuration.readonly = true
        return configuration
    }

    private func checkKey() throws {
        let check = sealer.keyCheck
        let stored = try pool.write { db -> String? in
            if let value = try String.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'key_check'") {
                return value
            }
            try db.execute(sql: "INSERT INTO meta (name, value) VALUES ('key_check', ?)", arguments: [check])
            return nil
        }
        if let stored, stored != check {
            throw CacheError(
                .keyMismatch,
                "the cache key does not open this database: restore the key file the database was created with, "
                    + "or move the database away to start empty"
            )
        }
    }

    /// Reads and opens every entry.
    ///
    /// Row by row, on the reader's queue, each entry going into the contents as it is read: a sealed body is
    /// opened, and its copies of shared values dropped, before the next row is read. Reading every body first held
    /// them all beside the entries (with 10,000 tokens, 20 MB more at the peak) and left the heap fragmented by the
    /// bodies and copies freed between the entries kept (6 MB resident after the load).
    public func loadAll() async throws -> StoredEntries {
        try await pool.read { db in
            var contents = CacheContents(leavingAccessTokenSecretsInStore: true)
            var damaged: [(id: EntryID, reason: String)] = []
            let rows = try Row.fetchCursor(db, sql: "SELECT section, row_id, body FROM entry")
            while let row = try rows.next() {
                let sectionName: String = row["section"]
                let rowID: String = row["row_id"]
                let section = Section(name: sectionName)
                do {
                    let body: Data = row["body"]
                    let plaintext = try self.sealer.open(
                        body,
                        context: Self.context(section: sectionName, rowID: rowID)
                    )
                    let stored = try WireDecoder().decode(StoredBody.self, from: plaintext)
                    guard self.sealer.computedRowID(section: sectionName, key: stored.key) == rowID else {
                        throw CacheError(.corrupt, "an entry's key does not match its row")
                    }
                    let entry = try CacheEntry(section: section, key: stored.key, value: stored.value)
                    contents.insert(entry, id: entry.id)
                } catch {
                    damaged.append((EntryID(section: section, key: "row \(rowID)"), String(describing: error)))
                }
            }
            return StoredEntries(contents: contents, damaged: damaged)
        }
    }

    /// Puts the write in line on the writer's queue: there its change set is made, sealed and written in one
    /// transaction, then `afterCommit` and `completion` run, before the next write in line.
    ///
    /// Sealing is done on the writer's queue, not by the caller: a refresh answers its caller once the contents
    /// show its tokens, and the 0.2 ms of sealing five entries is not on that path. It is done before the
    /// transaction begins, so SQLite's write lock is held for the SQL alone.
    ///
    /// The writer's thread is made SCHED_BATCH. A thread that wakes may preempt the one running on its CPU, and
    /// libdispatch runs GRDB's queue at nice -4 (nice 0 under the unit, whose filter refuses setpriority): the event
    /// loop lost its CPU to the writer in the middle of a refresh's answer, when the commit woke the writer and again
    /// when its sync completed, for up to 0.2 ms. A SCHED_BATCH thread never preempts when it wakes; it runs when a
    /// CPU is free, or at the next tick.
    public func enqueueCommit(
        preparing changes: @escaping @Sendable () -> CacheChanges,
        afterCommit: @escaping @Sendable () -> Void,
        completion: @escaping @Sendable ((any Error)?) -> Void
    ) {
        pool.asyncWriteWithoutTransaction { db in
            _ = tb_make_thread_batch()
            do {
                try self.write(changes(), in: db)
            } catch {
                completion(error)
                return
            }
            afterCommit()
            completion(nil)
        }
    }

    private func write(_ changes: CacheChanges, in db: Database) throws {
        guard !changes.isEmpty else { return }
        let now = clock.nowSeconds
        try changes.checkStorable()
        let sealed = try changes.identifiedUpserts.map { entry, id in
            let rowID = sealer.rowID(section: id.section.name, key: id.key)
            let plaintext = Data(try encoder.encode(StoredBody(key: id.key, value: entry.value)))
            let body = try sealer.seal(plaintext, context: Self.context(section: id.section.name, rowID: rowID))
            return (section: id.section.name, rowID: rowID, body: body)
        }
        let deletions = changes.deletions.map { id in
            (section: id.section.name, rowID: sealer.rowIDForgetting(section: id.section.name, key: id.key))
        }
        try db.inTransaction(.immediate) {
            // Cached statements: compiled once per connection, not at every commit (a refresh's few rows spent more
            // in SQLite's parser than in writing them).
            for row in deletions {
                try db.cachedStatement(sql: "DELETE FROM entry WHERE section = ? AND row_id = ?")
                    .execute(arguments: [row.section, row.rowID])
            }
            for row in sealed {
                try db.cachedStatement(
                    sql: """
                        INSERT INTO entry (section, row_id, body, updated_at) VALUES (?, ?, ?, ?)
                        ON CONFLICT (section, row_id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at
                        """
                )
                .execute(arguments: [row.section, row.rowID, row.body, now])
            }
            return .commit
        }
    }

    /// Reads and opens the rows of the access tokens `ids` in one read transaction, on one of the pool's readers
    /// (in WAL mode they never wait for the writer).
    public func secrets(of ids: [EntryID]) async throws -> [EntryID: Secret] {
        let rows = ids.filter { $0.section == .accessToken }.map { id in
            (id: id, rowID: sealer.rowID(section: id.section.name, key: id.key))
        }
        guard !rows.isEmpty else { return [:] }
        return try await pool.read { db in
            var secrets: [EntryID: Secret] = [:]
            for row in rows {
                let section = row.id.section.name
                guard
                    let body = try Data.fetchOne(
                        db.cachedStatement(sql: "SELECT body FROM entry WHERE section = ? AND row_id = ?"),
                        arguments: [section, row.rowID]
                    )
                else { continue }
                let plaintext = try self.sealer.open(body, context: Self.context(section: section, rowID: row.rowID))
                let stored = try WireDecoder().decode(StoredSecret.self, from: plaintext)
                guard stored.key == row.id.key else {
                    throw CacheError(.corrupt, "an entry's key does not match its row")
                }
                secrets[row.id] = stored.value.secret
            }
            return secrets
        }
    }

    /// The authenticated data a body is sealed with: its row.
    static func context(section: String, rowID: String) -> String {
        "tokenbroker.entry.v1\u{0}\(section)\u{0}\(rowID)"
    }
}

extension SQLiteTokenStore: GrantStore {
    /// Reads and opens every grant record.
    public func loadGrants() async throws -> (records: [String: Data], damaged: [String]) {
        let rows = try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT id, body FROM grant_record").map { row in
                (id: row["id"] as String, body: row["body"] as Data)
            }
        }
        var records: [String: Data] = [:]
        var damaged: [String] = []
        for row in rows {
            do {
                records[row.id] = try sealer.open(row.body, context: Self.grantContext(id: row.id))
            } catch {
                damaged.append(row.id)
            }
        }
        return (records, damaged)
    }

    /// Seals and writes one grant record.
    public func saveGrant(id: String, record: Data) async throws {
        let body = try sealer.seal(record, context: Self.grantContext(id: id))
        let now = clock.nowSeconds
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO grant_record (id, body, updated_at) VALUES (?, ?, ?)
                    ON CONFLICT (id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at
                    """,
                arguments: [id, body, now]
            )
        }
    }

    /// Deletes grant records in one transaction.
    public func deleteGrants(ids: [String]) async throws {
        guard !ids.isEmpty else { return }
        try await pool.write { db in
            for id in ids {
                try db.execute(sql: "DELETE FROM grant_record WHERE id = ?", arguments: [id])
            }
        }
    }

    /// The authenticated data a grant record is sealed with: its id.
    static func grantContext(id: String) -> String {
        "tokenbroker.grant.v1\u{0}\(id)"
    }
}

/// What a row's sealed body holds: the entry's MSAL key and its MSAL JSON.
private struct StoredBody: Codable {
    let key: String
    let value: JSONValue
}

/// A row's sealed body read for its secret alone: the key, and the entry's `secret` field.
private struct StoredSecret: Decodable {
    struct Value: Decodable {
        let secret: Secret
    }

    let key: String
    let value: Value
}
