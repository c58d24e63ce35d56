import BrokerProtocol
import BrokerTestSupport
import CLinuxSupport
import Foundation
import GRDB
import Synchronization
import Testing

@testable import BrokerCache

struct SQLiteTokenStoreTests {
    private func entries(label: String = "1") throws -> [CacheEntry] {
        let document = CacheFixtures.msalCache(people: [CacheFixtures.ada, CacheFixtures.alan], label: label)
        return try MSALCacheDocument.read(Data(CacheFixtures.text(document).utf8)).entries
    }

    /// A cache on a new database in `directory`, holding ``entries(label:)`` as written; and where it is.
    private func cacheHoldingEntries(
        in directory: TemporaryDirectory
    ) async throws -> (cache: TokenCache, location: CacheLocation, written: [CacheEntry]) {
        let location = CacheLocation(stateDirectory: directory.url)
        let written = try entries()
        let cache = try await TokenCache(store: try location.openStore())
        try await cache.commit(CacheChanges(upserts: written))
        return (cache, location, written)
    }

    /// The first of `entries` that `match` takes, as it gives it.
    private func first<Match>(
        of entries: [CacheEntry],
        _ match: (CacheEntry) -> Match?,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> Match {
        try #require(entries.lazy.compactMap(match).first, sourceLocation: sourceLocation)
    }

    /// What is committed is there after reopening, in WAL mode, with the migrations recorded.
    @Test func commitsSurviveReopening() async throws {
        let directory = try TemporaryDirectory()
        let location = CacheLocation(stateDirectory: directory.url)
        let written = try entries()
        do {
            let cache = try await TokenCache(store: try location.openStore())
            try await cache.commit(CacheChanges(upserts: written))
        }
        let reopened = try await TokenCache(store: try location.openStore())
        #expect(Set(try await reopened.allEntriesWithSecrets()) == Set(written))
        // In memory, the access tokens are there without their secrets, which the store keeps.
        let inMemory = reopened.read { $0.accessTokens.values.map(\.self) }
        #expect(inMemory.count == 2 && inMemory.allSatisfy { $0.secret.isEmpty })
        for token in inMemory {
            guard case .accessToken(let stored)? = written.first(where: { $0.id == token.id }) else {
                Issue.record("an access token that was not written")
                continue
            }
            #expect(try await reopened.secret(of: token) == stored.secret)
        }
        #expect(reopened.damaged.isEmpty)
        let queue = try DatabaseQueue(path: location.databaseURL.path)
        let (mode, migrations) = try await queue.read { db in
            (
                try String.fetchOne(db, sql: "PRAGMA journal_mode"),
                try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations")
            )
        }
        #expect(mode == "wal")
        #expect(migrations == ["v1: sealed entries", "v2: sealed grants"])
    }

    /// Commits that do not wait for the disk, many in a row, each replacing what the one before wrote, and a removal
    /// that waits for the disk behind them: once the line is done, a reopened database holds what memory held, in
    /// the same order.
    @Test func writesBehindReachTheDiskInOrder() async throws {
        let directory = try TemporaryDirectory()
        let (cache, location, written) = try await cacheHoldingEntries(in: directory)
        var token = try first(of: written) { if case .accessToken(let token) = $0 { token } else { nil } }
        let original = token.secret.reveal()
        for round in 1...50 {
            token.secret = Secret("\(original)-\(round)")
            try await cache.commit(CacheChanges(upserts: [.accessToken(token)]), waitingFor: .memory)
        }
        let removed = try #require(written.first { if case .idToken = $0 { true } else { false } })
        try await cache.commit(CacheChanges(deletions: [removed.id]))
        await cache.finishWrites()
        let expected = try await cache.allEntriesWithSecrets()
        #expect(expected.contains(.accessToken(token)))
        #expect(!expected.contains { $0.id == removed.id })
        #expect(cache.writeFailures.count == 0)
        let reopened = try await TokenCache(store: try location.openStore())
        #expect(try await reopened.allEntriesWithSecrets() == expected)
    }

    /// Each row's sealed body, by section and row id: a row written again has a new body (a new nonce), even with
    /// the same entry in it.
    private func sealedBodies(_ location: CacheLocation) throws -> [String: Data] {
        let queue = try DatabaseQueue(path: location.databaseURL.path)
        return try queue.read { db in
            var bodies: [String: Data] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT section, row_id, body FROM entry") {
                bodies["\(row["section"] as String)/\(row["row_id"] as DatabaseValue)"] = row["body"]
            }
            return bodies
        }
    }

    /// A refresh commits its account and app metadata with its tokens, the same at every refresh: the rows that
    /// hold them already are not written again, only the new tokens'; an account that changed is written, and a
    /// reopened cache has all of it.
    @Test func aRefreshWritesOnlyTheRowsThatChanged() async throws {
        let directory = try TemporaryDirectory()
        let (cache, location, written) = try await cacheHoldingEntries(in: directory)
        let account = try first(of: written) { if case .account(let account) = $0 { account } else { nil } }
        var token = try first(of: written) { entry -> AccessToken? in
            guard case .accessToken(let token) = entry, token.homeAccountId == account.homeAccountId else { return nil }
            return token
        }
        let metadata = try first(of: written) { if case .appMetadata(let metadata) = $0 { metadata } else { nil } }
        func refresh(_ account: AccountEntry, round: Int) async throws -> Set<String> {
            let before = try sealedBodies(location)
            token.secret = Secret("AT-refreshed-\(round)")
            token.expiresOn += 60
            let changes = CacheChanges(upserts: [.accessToken(token), .account(account), .appMetadata(metadata)])
            try await cache.commit(changes, waitingFor: .memory)
            await cache.finishWrites()
            let after = try sealedBodies(location)
            #expect(Set(after.keys) == Set(before.keys))
            return Set(after.keys.filter { after[$0] != before[$0] }.map { String($0.prefix { $0 != "/" }) })
        }

        #expect(try await refresh(account, round: 1) == ["AccessToken"])
        var renamed = account
        renamed.name = "Ada King"
        #expect(try await refresh(renamed, round: 2) == ["AccessToken", "Account"])
        #expect(try await refresh(renamed, round: 3) == ["AccessToken"])
        // Back to back, each behind the one before still in line: the same.
        let before = try sealedBodies(location)
        for round in 4...23 {
            token.secret = Secret("AT-refreshed-\(round)")
            let changes = CacheChanges(upserts: [.accessToken(token), .account(renamed), .appMetadata(metadata)])
            try await cache.commit(changes, waitingFor: .memory)
        }
        await cache.finishWrites()
        let after = try sealedBodies(location)
        #expect(
            after.filter { !$0.key.hasPrefix("AccessToken/") } == before.filter { !$0.key.hasPrefix("AccessToken/") }
        )
        #expect(after != before)
        #expect(cache.writeFailures.count == 0)
        let reopened = try await TokenCache(store: try location.openStore())
        let stored = try await reopened.allEntriesWithSecrets()
        #expect(stored.contains(.accessToken(token)) && stored.contains(.account(renamed)))
        #expect(stored.contains(.appMetadata(metadata)) && !stored.contains(.account(account)))
        #expect(Set(stored) == Set(try await cache.allEntriesWithSecrets()))
    }

    /// An access token read from the contents has no secret in memory: writing it back would lose the token, so the
    /// commit refuses it and nothing changes; a token removed since it was read has no secret to read.
    @Test func anAccessTokenWithoutItsSecretIsNeverWritten() async throws {
        let directory = try TemporaryDirectory()
        let (cache, location, _) = try await cacheHoldingEntries(in: directory)
        let before = try await cache.allEntriesWithSecrets()
        var token = try #require(cache.read { $0.accessTokens.values.first })
        #expect(token.secret.isEmpty)
        token.expiresOn += 60
        await #expect(throws: CacheError.self) { try await cache.commit(CacheChanges(upserts: [.accessToken(token)])) }
        #expect(try await cache.allEntriesWithSecrets() == before)
        let reopened = try await TokenCache(store: try location.openStore())
        #expect(try await reopened.allEntriesWithSecrets() == before)

        // A secret read is kept for the generation it was read in: a token replaced since gives its new secret.
        let first = try #require(try await cache.secret(of: token))
        var replacement = token
        replacement.secret = Secret(first.reveal() + "-rotated")
        try await cache.commit(CacheChanges(upserts: [.accessToken(replacement)]))
        let replaced = try #require(cache.read { $0.accessTokens[token.id.key] })
        #expect(try await cache.secret(of: replaced) == replacement.secret)

        try await cache.commit(CacheChanges(deletions: [token.id]))
        #expect(try await cache.secret(of: token) == nil)
        #expect(try await cache.allEntriesWithSecrets().count == before.count - 1)
    }

    /// Every commit is synced before it is acknowledged: the writer runs with `synchronous = FULL`, which GRDB's
    /// pool would otherwise lower to NORMAL (a power loss could then take the last sign-ins with it).
    @Test func theWriterSyncsEveryCommit() async throws {
        let directory = try TemporaryDirectory()
        let store = try CacheLocation(stateDirectory: directory.url).openStore()
        #expect(try store.writerSynchronousMode() == 2)
    }

    /// The writer's thread is SCHED_BATCH: woken to write a commit, it waits for the event loop's turn to end instead
    /// of taking its CPU in the middle of an answer (as a nice -4 thread of libdispatch's did, at every commit).
    @Test func theWriterNeverPreemptsTheThreadThatAnswers() async throws {
        let directory = try TemporaryDirectory()
        let store = try CacheLocation(stateDirectory: directory.url).openStore()
        let token = try #require(
            try entries().first { if case .accessToken = $0 { true } else { false } }
        )
        let policy: (isBatch: Bool, error: (any Error)?) = await withCheckedContinuation { continuation in
            let isBatch = Mutex(false)
            store.enqueueCommit(
                CacheChanges(upserts: [token]),
                afterCommit: { isBatch.withLock { $0 = tb_thread_is_batch() != 0 } },
                completion: { error in continuation.resume(returning: (isBatch.withLock { $0 }, error)) }
            )
        }
        #expect(policy.error == nil)
        #expect(policy.isBatch)
        // The caller's thread is left as it was.
        #expect(tb_thread_is_batch() == 0)
    }

    /// The database, its WAL and its shared-memory file hold no token, no username, no account id.
    @Test func databaseFilesRevealNoSecretsOrNames() async throws {
        let directory = try TemporaryDirectory()
        let location = CacheLocation(stateDirectory: directory.url)
        let cache = try await TokenCache(store: try location.openStore())
        let written = try entries(label: "grep-me")
        try await cache.commit(CacheChanges(upserts: written))
        var needles = [
            "AT-SECRET-grep-me", "RT-SECRET-grep-me", "ada@contoso.com", CacheFixtures.ada.oid, "Ada Lovelace",
        ]
        for case .accessToken(let token) in written { needles.append(token.secret.reveal()) }
        let files = try FileManager.default.contentsOfDirectory(
            atPath: location.databaseURL.deletingLastPathComponent().path
        )
        #expect(files.contains("cache.sqlite3-wal"))
        for file in files {
            let bytes = try Data(contentsOf: location.databaseURL.deletingLastPathComponent().appending(path: file))
            for needle in needles {
                #expect(bytes.range(of: Data(needle.utf8)) == nil, "\(file) contains \(needle.prefix(12))…")
            }
        }
    }

    /// The key is 32 bytes in a 0600 file outside the database's directory; the directories are 0700.
    @Test func keyAndDirectoriesArePrivate() async throws {
        let directory = try TemporaryDirectory()
        let location = CacheLocation(stateDirectory: directory.url.appending(path: "state"))
        _ = try location.openStore()
        func mode(_ url: URL) throws -> Int {
            (try FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? Int) ?? -1
        }
        #expect(try mode(location.keyURL) == 0o600)
        #expect(try mode(location.stateDirectory) == 0o700)
        #expect(try mode(location.databaseURL.deletingLastPathComponent()) == 0o700)
        #expect(try Data(contentsOf: location.keyURL).count == 32)
        #expect(location.keyURL.deletingLastPathComponent() != location.databaseURL.deletingLastPathComponent())
    }

    /// A database is never opened with a new key: a missing or different key is refused, the data kept.
    @Test func refusesAMissingOrDifferentKey() async throws {
        let directory = try TemporaryDirectory()
        let location = CacheLocation(stateDirectory: directory.url)
        let cache = try await TokenCache(store: try location.openStore())
        try await cache.commit(CacheChanges(upserts: try entries()))
        let original = try Data(contentsOf: location.keyURL)

        try FileManager.default.removeItem(at: location.keyURL)
        #expect {
            try location.openStore()
        } throws: { error in
            (error as? CacheError)?.kind == .keyMismatch
        }
        #expect(!FileManager.default.fileExists(atPath: location.keyURL.path))

        try Data(repeating: 7, count: 32).write(to: location.keyURL)
        chmod(location.keyURL.path, 0o600)
        #expect {
            try location.openStore()
        } throws: { error in
            (error as? CacheError)?.kind == .keyMismatch
        }

        try original.write(to: location.keyURL)
        let restored = try await TokenCache(store: try location.openStore())
        #expect(restored.read { $0.count.accounts } == 2)
    }

    /// A key file others could read is refused, as ssh refuses such a private key.
    @Test func refusesAKeyOthersCanRead() throws {
        let directory = try TemporaryDirectory()
        let location = CacheLocation(stateDirectory: directory.url)
        _ = try location.openStore()
        chmod(location.keyURL.path, 0o644)
        #expect {
            try location.openStore()
        } throws: { error in
            (error as? CacheError)?.kind == .insecure
        }
    }

    /// A sealed body moved to another row fails authentication: the entries are reported damaged and left
    /// on disk, never served and never deleted.
    @Test func detectsBodiesMovedBetweenRows() async throws {
        let directory = try TemporaryDirectory()
        let location = CacheLocation(stateDirectory: directory.url)
        let cache = try await TokenCache(store: try location.openStore())
        try await cache.commit(CacheChanges(upserts: try entries()))
        let queue = try DatabaseQueue(path: location.databaseURL.path)
        let moved = try await queue.write { db -> Bool in
            let rows = try Row.fetchAll(
                db,
                sql: "SELECT row_id, body FROM entry WHERE section = 'AccessToken' ORDER BY row_id"
            )
            guard rows.count == 2 else { return false }
            try db.execute(
                sql: "UPDATE entry SET body = ? WHERE row_id = ?",
                arguments: [rows[1]["body"] as Data, rows[0]["row_id"] as String]
            )
            return true
        }
        #expect(moved)
        let reopened = try await TokenCache(store: try location.openStore())
        #expect(reopened.damaged.count == 1)
        #expect(reopened.read { $0.count.accessTokens } == 1)
        let remaining = try await queue.read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM entry WHERE section = 'AccessToken'")
        }
        #expect(remaining == 2)
    }

    /// Only one process holds the state directory at a time.
    @Test func stateLockIsExclusive() throws {
        let directory = try TemporaryDirectory()
        let url = directory.url.appending(path: "lock")
        let first = try StateLock(url)
        #expect(throws: CacheError.self) { try StateLock(url) }
        withExtendedLifetime(first) {}
    }
}

/// Where the daemon keeps its state, by the rule the README gives.
struct StateDirectoryRuleTests {
    @Test(
        arguments: [
            ("/opt/x", ["STATE_DIRECTORY": "/s", "HOME": "/home/u"], "/opt/x"),
            (nil, ["STATE_DIRECTORY": "/var/lib/u/tokenbroker:/other", "HOME": "/home/u"], "/var/lib/u/tokenbroker"),
            (nil, ["XDG_STATE_HOME": "/xdg", "HOME": "/home/u"], "/xdg/tokenbroker"),
            (nil, ["XDG_STATE_HOME": "relative", "HOME": "/home/u"], "/home/u/.local/state/tokenbroker"),
            (nil, ["HOME": "/home/u"], "/home/u/.local/state/tokenbroker"),
        ] as [(String?, [String: String], String)]
    )
    func followsTheRule(option: String?, environment: [String: String], expected: String) {
        #expect(CacheLocation.stateDirectory(option: option, environment: environment)?.path == expected)
    }

    /// Nothing absolute to go by: no guess.
    @Test func withoutHomeThereIsNone() {
        #expect(CacheLocation.stateDirectory(option: nil, environment: [:]) == nil)
        #expect(CacheLocation.stateDirectory(option: nil, environment: ["HOME": "relative"]) == nil)
    }
}
