import BrokerCache
import BrokerTestSupport
import BrokerTime
import Foundation
import Testing

@testable import BrokerCore

/// The grants' book against the cache's real SQLite store, when a load of the store, a creation and a revocation
/// overlap (a load runs when the cache opens or is unlocked, while its grants may be served and revoked).
struct GrantBookTests {
    /// What a ``HeldGrantStore`` holds back until the test lets it go.
    private enum Hold: Hashable {
        /// A load, after its read of the store.
        case loadRead
        /// A save, after it reached the store.
        case saved
        /// A deletion, before it reaches the store.
        case delete
    }

    /// The SQLite store, held where a load, a creation and a revocation can cross.
    ///
    /// `loadGrants` always stops after its read; `saveGrant` and `deleteGrants` stop where `holds` says.
    private final class HeldGrantStore: GrantStore {
        /// Where one kind of call stops: it says it got there, then waits to be let go.
        private struct Gate {
            let reached = AsyncStream<Void>.makeStream()
            let released = AsyncStream<Void>.makeStream()
        }

        private let store: SQLiteTokenStore
        private let holds: Set<Hold>
        private let loadRead = Gate()
        private let saved = Gate()
        private let delete = Gate()

        init(_ store: SQLiteTokenStore, holding holds: Set<Hold> = []) {
            self.store = store
            self.holds = holds.union([.loadRead])
        }

        private func gate(_ hold: Hold) -> Gate {
            switch hold {
            case .loadRead: loadRead
            case .saved: saved
            case .delete: delete
            }
        }

        private func stop(at hold: Hold) async {
            guard holds.contains(hold) else { return }
            gate(hold).reached.continuation.yield()
            for await _ in gate(hold).released.stream { break }
        }

        func loadGrants() async throws -> (records: [String: Data], damaged: [String]) {
            let loaded = try await store.loadGrants()
            await stop(at: .loadRead)
            return loaded
        }

        func saveGrant(id: String, record: Data) async throws {
            try await store.saveGrant(id: id, record: record)
            await stop(at: .saved)
        }

        func deleteGrants(ids: [String]) async throws {
            if !ids.isEmpty { await stop(at: .delete) }  // a load's deletion of expired grants is empty here
            try await store.deleteGrants(ids: ids)
        }

        /// Returns once something stopped at `hold`.
        func reached(_ hold: Hold) async {
            for await _ in gate(hold).reached.stream { break }
        }

        /// Lets what stopped at `hold` go on.
        func release(_ hold: Hold) {
            gate(hold).released.continuation.yield()
        }
    }

    /// A book over a held store in a directory of its own.
    private struct Fixture {
        let directory: TemporaryDirectory
        let clock = TestClock(start: Date())
        let store: HeldGrantStore
        let book: GrantBook

        init(holding holds: Set<Hold> = []) throws {
            directory = try TemporaryDirectory()
            store = HeldGrantStore(
                try CacheLocation(stateDirectory: directory.url).openStore(clock: clock),
                holding: holds
            )
            book = GrantBook(store: store, clock: clock)
        }

        /// The ids of the grants in the store, read by a store of their own.
        func storedIDs() async throws -> Set<String> {
            let store = try CacheLocation(stateDirectory: directory.url).openStore(clock: clock)
            return Set(try await store.loadGrants().records.keys)
        }

        /// A new grant for an hour, and its secret.
        func grant() -> (record: GrantRecord, secret: String) {
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
                createdAt: clock.nowSeconds,
                expiresAt: clock.nowSeconds + 3600,
                listen: ListenAddress.loopback.with(port: 41234),
                secretDigest: made.digest
            )
            return (record, made.secret)
        }
    }

    /// A grant revoked while the store is read again stays revoked.
    ///
    /// The read found it before the revocation deleted it, and the load must not serve it again. One the load found
    /// and nobody revoked keeps what it served; one created meanwhile is served.
    @Test func aGrantRevokedWhileTheStoreIsReadStaysRevoked() async throws {
        let fixture = try Fixture()
        let (store, book) = (fixture.store, fixture.book)
        let (revoked, revokedSecret) = fixture.grant()
        let (kept, keptSecret) = fixture.grant()
        try await book.add(revoked)
        try await book.add(kept)
        book.served(kept.id)

        let load = Task { try await book.load() }
        await store.reached(.loadRead)
        try await book.remove(revoked.id)
        let (created, createdSecret) = fixture.grant()
        try await book.add(created)
        store.release(.loadRead)
        #expect(try await load.value.isEmpty)

        #expect(book.holder(of: revokedSecret) == nil)
        #expect(!book.isServing(revoked.id))
        #expect(book.holder(of: keptSecret) == kept)
        #expect(book.holder(of: createdSecret) == created)
        #expect(Set(book.all.map(\.record.id)) == [kept.id, created.id])
        #expect(book.all.first { $0.record.id == kept.id }?.served == 1, "the load replaced a grant it served")

        // The store agrees, and the next load brings back nothing else.
        #expect(try await fixture.storedIDs() == [kept.id, created.id])
        let reload = Task { try await book.load() }
        await store.reached(.loadRead)
        store.release(.loadRead)
        #expect(try await reload.value.isEmpty)
        #expect(Set(book.all.map(\.record.id)) == [kept.id, created.id])
    }

    /// A grant revoked just before a load, whose deletion reaches the store only after the load read it, stays
    /// revoked, whether the deletion or the load ends first.
    @Test(arguments: [true, false])
    func aGrantRevokedBeforeItsDeletionReachesTheStoreStaysRevoked(deletionEndsFirst: Bool) async throws {
        let fixture = try Fixture(holding: [.delete])
        let (store, book) = (fixture.store, fixture.book)
        let (revoked, revokedSecret) = fixture.grant()
        try await book.add(revoked)

        let removal = Task { try await book.remove(revoked.id) }
        await store.reached(.delete)
        #expect(book.holder(of: revokedSecret) == nil)
        let load = Task { try await book.load() }
        await store.reached(.loadRead)
        if deletionEndsFirst {
            store.release(.delete)
            try await removal.value
            store.release(.loadRead)
            #expect(try await load.value.isEmpty)
        } else {
            store.release(.loadRead)
            #expect(try await load.value.isEmpty)
            #expect(book.holder(of: revokedSecret) == nil)
            store.release(.delete)
            try await removal.value
        }

        #expect(book.holder(of: revokedSecret) == nil)
        #expect(book.all.isEmpty)
        #expect(try await fixture.storedIDs().isEmpty)
    }

    /// A grant served by a load before its creation ended, then revoked, stays revoked when the creation ends.
    @Test func aGrantRevokedBeforeItsCreationEndedStaysRevoked() async throws {
        let fixture = try Fixture(holding: [.saved])
        let (store, book) = (fixture.store, fixture.book)
        let (created, secret) = fixture.grant()

        let creation = Task { try await book.add(created) }
        await store.reached(.saved)
        let load = Task { try await book.load() }
        await store.reached(.loadRead)
        store.release(.loadRead)
        #expect(try await load.value.isEmpty)
        #expect(book.holder(of: secret) == created, "the load serves what the store holds")
        try await book.remove(created.id)
        store.release(.saved)
        try await creation.value

        #expect(book.holder(of: secret) == nil)
        #expect(book.all.isEmpty)
        #expect(try await fixture.storedIDs().isEmpty)
    }
}
