import BrokerClient
import BrokerProtocol
import BrokerTestSupport
import Foundation
import GRDB
import Testing

/// What went wrong with the cache's storage is in `getStatus` and in the log at error level, not only at start or
/// at debug level: entries that cannot be opened, a database lost beside its key. (Writes that fail on a full disk
/// are proven by `Tests/security/attacks.py`, which gives the daemon a tiny file system of its own.)
@Suite(.timeLimit(.minutes(1)))
struct StoreHealthTests {
    let directory: TemporaryDirectory

    init() throws {
        directory = try TemporaryDirectory(prefix: "health")
    }

    /// A healthy broker says so: nothing damaged, no failed write, the database found.
    @Test func aHealthyStoreSaysSo() async throws {
        try await withDaemon { broker, _ in
            _ = try await broker.importCache(Secret(CacheFixtures.text(CacheFixtures.msalCache())))
            let store = try #require(try await broker.status().store)
            #expect(store.isHealthy, "\(store)")
            #expect(store.lastWriteError == nil)
        }
    }

    /// The database deleted while its key stayed: the daemon starts empty, and says so in status and at error
    /// level; the next start, with the new database, has nothing to report.
    @Test func aDatabaseMissingBesideItsKeyIsReported() async throws {
        try await withDaemon { broker, _ in
            _ = try await broker.importCache(Secret(CacheFixtures.text(CacheFixtures.msalCache())))
        }
        try FileManager.default.removeItem(atPath: directory.path("state/db"))
        try await withDaemon { broker, daemon in
            let status = try await broker.status()
            #expect(status.store?.databaseWasMissing == true)
            #expect(status.cache.accounts == 0)
            #expect(
                errorLine(in: daemon.log, saying: "the cache database was missing beside its key"),
                "\(daemon.log)"
            )
        }
        try await withDaemon { broker, _ in
            let store = try await broker.status().store
            #expect(store?.isHealthy == true)
        }
    }

    /// A sealed body moved to another row cannot be opened: the entry is left in place, counted in status, and
    /// logged at error level at start.
    @Test func damagedEntriesAreCounted() async throws {
        try await withDaemon { broker, _ in
            _ = try await broker.importCache(Secret(CacheFixtures.text(CacheFixtures.msalCache())))
        }
        let queue = try DatabaseQueue(path: directory.path("state/db/cache.sqlite3"))
        let rows = try await queue.write { db -> Int in
            let rows = try Row.fetchAll(db, sql: "SELECT row_id, body FROM entry ORDER BY row_id LIMIT 2")
            guard rows.count == 2 else { return rows.count }
            try db.execute(
                sql: "UPDATE entry SET body = ? WHERE row_id = ?",
                arguments: [rows[1]["body"] as Data, rows[0]["row_id"] as String]
            )
            return rows.count
        }
        try queue.close()
        try #require(rows == 2)

        try await withDaemon { broker, daemon in
            let store = try #require(try await broker.status().store)
            #expect(store.damagedEntries == 1)
            #expect(!store.isHealthy)
            #expect(errorLine(in: daemon.log, saying: "could not be opened"), "\(daemon.log)")
        }
    }

    /// Starts the daemon on this test's directory, runs `body` with a connected client, then stops it (exit 0).
    private func withDaemon(_ body: (Broker, DaemonProcess) async throws -> Void) async throws {
        let daemon = try await DaemonProcess.start(in: directory)
        let broker = try await Broker.connect(socketPath: daemon.socketPath)
        do {
            try await body(broker, daemon)
        } catch {
            await broker.close()
            _ = try? await daemon.stop()
            throw error
        }
        await broker.close()
        #expect(try await daemon.stop() == 0)
    }

    /// Whether a line of `log` at error level says `text`.
    private func errorLine(in log: String, saying text: String) -> Bool {
        log.split(separator: "\n").contains { $0.contains(" error ") && $0.contains(text) }
    }
}
