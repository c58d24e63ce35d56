import BrokerCache
import BrokerTestSupport
import BrokerTime
import Foundation
import Testing

@testable import BrokerCore

/// The grants' book against the cache's real SQLite store, when a load of the store and a revocation overlap.
struct GrantBookTests {
    /// The SQLite store, held where a revocation and a load can cross.
    ///
    /// Its `loadGrants` stops after the read until the test lets it go: the moment a revocation can come between a
    /// load's read and its merge (the cache unlocked again while its grants are served). With `holdingDeletes`,
    /// each `deleteGrants` waits too before it reaches the store.
    private final class HeldGrantStore: GrantStore {
        private let store: SQLiteTokenStore
        private let holdsDeletes: Bool
        private let read = AsyncStream<Void>.makeStream()
        private let resume = AsyncStream<Void>.makeStream()
        private let deleteHeld = AsyncStream<Void>.makeStream()
        private let deleteResume = AsyncStream<Void>.makeStream()

        init(_ store: SQLiteTokenStore, holdingDeletes: Bool = false) {
            self.store = store
            holdsDeletes = holdingDeletes
        }

        func loadGrants() async throws -> (records: [String: Data], damaged: [String]) {
            let loaded = try await store.loadGrants()
            read.continuation.yield()
            for await _ in resume.stream { break }
            return loaded
        }

        func saveGrant(id: String, record: Data) async throws {
            try await store.saveGrant(id: id, record: record)
        }

        func deleteGrants(ids: [String]) async throws {
            if holdsDeletes, !ids.isEmpty {
                deleteHeld.continuation.yield()
                for await _ in deleteResume.stream { break }
            }
            try await store.deleteGrants(ids: ids)
        }

        /// Returns once a deletion waits.
        func deleteIsHeld() async {
            for await _ in deleteHeld.stream { break }
        }

        func letTheDeleteGo() {
            deleteResume.continuation.yield()
        }

        /// Returns once a load has read the store.
        func loadHasRead() async {
            for await _ in read.stream { break }
        }

        func letTheLoadGo() {
            resume.continuation.yield()
        }
    }

    private func grant(expiringAt expiresAt: Int64) -> (record: GrantRecord, secret: String) {
        let made = GrantBook.newSecret()
        let record = GrantRecord(
            id: made.id,
            label: "devcontainer",
            clientId: CacheFixtures.clientId,
            authority: nil,
            resources: ["https://graph.microsoft.com"],
            scopes: [],
            accountIdentifier: CacheFixtures.ada.homeAccountId,
            username: "ada@contoso.com",
            createdAt: expiresAt - 3600,
            expiresAt: expiresAt,
            listen: ListenAddress.loopback.with(port: 41234),
            secretDigest: made.digest
        )
        return (record, made.secret)
    }

    /// A grant revoked while the store is read again stays revoked.
    ///
    /// The read found it before the revocation deleted it, and the load must not serve it again. One created
    /// meanwhile is served; one the load found and nobody revoked is served too.
    @Test func aGrantRevokedWhileTheStoreIsReadStaysRevoked() async throws {
        let directory = try TemporaryDirectory()
        let clock = TestClock(start: Date())
        let store = HeldGrantStore(try CacheLocation(stateDirectory: directory.url).openStore(clock: clock))
        let book = GrantBook(store: store, clock: clock)
        let expiry = clock.nowSeconds + 3600
        let (revoked, revokedSecret) = grant(expiringAt: expiry)
        let (kept, keptSecret) = grant(expiringAt: expiry)
        try await book.add(revoked)
        try await book.add(kept)

        let load = Task { try await book.load() }
        await store.loadHasRead()
        try await book.remove(revoked.id)
        let (created, createdSecret) = grant(expiringAt: expiry)
        try await book.add(created)
        store.letTheLoadGo()
        #expect(try await load.value.isEmpty)

        #expect(book.holder(of: revokedSecret) == nil)
        #expect(!book.isServing(revoked.id))
        #expect(book.holder(of: keptSecret) == kept)
        #expect(book.holder(of: createdSecret) == created)
        #expect(Set(book.all.map(\.record.id)) == [kept.id, created.id])

        // The store agrees, and the next load (no revocation under way) brings back nothing else.
        let stored = try await CacheLocation(stateDirectory: directory.url).openStore(clock: clock).loadGrants()
        #expect(Set(stored.records.keys) == [kept.id, created.id])
        let reload = Task { try await book.load() }
        await store.loadHasRead()
        store.letTheLoadGo()
        #expect(try await reload.value.isEmpty)
        #expect(Set(book.all.map(\.record.id)) == [kept.id, created.id])
    }

    /// A grant revoked just before a load, whose deletion reaches the store after the load read it, stays revoked.
    @Test func aGrantRevokedBeforeItsDeletionReachesTheStoreStaysRevoked() async throws {
        let directory = try TemporaryDirectory()
        let clock = TestClock(start: Date())
        let location = CacheLocation(stateDirectory: directory.url)
        let store = HeldGrantStore(try location.openStore(clock: clock), holdingDeletes: true)
        let book = GrantBook(store: store, clock: clock)
        let (revoked, revokedSecret) = grant(expiringAt: clock.nowSeconds + 3600)
        try await book.add(revoked)

        let removal = Task { try await book.remove(revoked.id) }
        await store.deleteIsHeld()
        #expect(book.holder(of: revokedSecret) == nil)
        let load = Task { try await book.load() }
        await store.loadHasRead()
        store.letTheDeleteGo()
        try await removal.value
        store.letTheLoadGo()
        #expect(try await load.value.isEmpty)

        #expect(book.holder(of: revokedSecret) == nil)
        #expect(book.all.isEmpty)
        #expect(try await location.openStore(clock: clock).loadGrants().records.isEmpty)
    }
}
