import BrokerProtocol
public import Foundation
import GRDB

/// The cache on disk: SQLite (GRDB) in WAL mode with `synchronous=FULL`, every entry sealed.
///
/// One table of `(section, key) → sealed body`; the body is the entry's MSAL JSON, sealed with AES-GCM and
/// bound to its id. The file alone reveals no token and no username.
public final class SQLiteTokenStore: TokenStore {
    private let pool: DatabasePool
    private let sealer: SecretSealer
    private let encoder: JSONEncoder

    /// Opens (creating and migrating as needed) the database at `url`, checking it belongs with `sealer`'s key.
    public init(url: URL, sealer: SecretSealer) throws {
        var configuration = Configuration()
        configuration.label = "tokenbroker.cache"
        configuration.prepareDatabase { db in
            // WAL commits are durable only with FULL: NORMAL may lose the last commits on power loss.
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        do {
            pool = try DatabasePool(path: url.path, configuration: configuration)
            try Self.migrator.migrate(pool)
        } catch {
            throw CacheError(.io, "cannot open the cache database \(url.path)", underlying: error)
        }
        self.sealer = sealer
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        self.encoder = encoder
        try checkKey()
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
                        key TEXT NOT NULL,
                        body BLOB NOT NULL,
                        updated_at INTEGER NOT NULL,
                        PRIMARY KEY (section, key)
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
    public func loadAll() async throws -> StoredEntries {
        let rows = try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT section, key, body FROM entry").map { row in
                (section: row["section"] as String, key: row["key"] as String, body: row["body"] as Data)
            }
        }
        var result = StoredEntries(entries: [])
        result.entries.reserveCapacity(rows.count)
        let decoder = JSONDecoder()
        for row in rows {
            let id = EntryID(section: Section(name: row.section), key: row.key)
            do {
                let plaintext = try sealer.open(row.body, context: Self.context(id))
                let value = try decoder.decode(JSONValue.self, from: plaintext)
                result.entries.append(try CacheEntry(section: id.section, key: id.key, value: value))
            } catch {
                result.damaged.append((id, String(describing: error)))
            }
        }
        return result
    }

    /// Writes the change set in one transaction, then runs `afterCommit` on the writer's queue.
    public func commit(_ changes: CacheChanges, afterCommit: @Sendable () -> Void) async throws {
        guard !changes.isEmpty else {
            afterCommit()
            return
        }
        // Seal outside the writer so the transaction holds the lock only for SQL.
        let now = Int64(Date().timeIntervalSince1970)
        let sealed = try changes.upserts.map { entry in
            let id = entry.id
            return (id: id, body: try sealer.seal(try encoder.encode(entry.value), context: Self.context(id)))
        }
        try await pool.writeWithoutTransaction { db in
            try db.inTransaction(.immediate) {
                for id in changes.deletions {
                    try db.execute(
                        sql: "DELETE FROM entry WHERE section = ? AND key = ?",
                        arguments: [id.section.name, id.key]
                    )
                }
                for row in sealed {
                    try db.execute(
                        sql: """
                            INSERT INTO entry (section, key, body, updated_at) VALUES (?, ?, ?, ?)
                            ON CONFLICT (section, key) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at
                            """,
                        arguments: [row.id.section.name, row.id.key, row.body, now]
                    )
                }
                return .commit
            }
            afterCommit()
        }
    }

    /// The authenticated data a body is sealed with: its id.
    static func context(_ id: EntryID) -> String {
        "tokenbroker.entry.v1\u{0}\(id.section.name)\u{0}\(id.key)"
    }
}
