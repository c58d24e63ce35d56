import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

@testable import BrokerCache

/// Commits that wait only for memory (a refresh's): the contents change at once, the write follows in line, and
/// memory and store end in the same order whatever the mix of commits.
struct TokenCacheWriteLineTests {
    private struct DiskFull: Error {}

    private func cache() async throws -> (TokenCache, InMemoryTokenStore, AccessToken) {
        let document = CacheFixtures.msalCache(people: [CacheFixtures.ada], label: "1")
        let store = InMemoryTokenStore(try MSALCacheDocument.read(Data(CacheFixtures.text(document).utf8)).entries)
        let cache = try await TokenCache(store: store)
        let token = try #require(cache.read { $0.accessTokens.values.first })
        return (cache, store, token)
    }

    private func storedSecret(_ store: InMemoryTokenStore, _ id: EntryID) -> Secret? {
        store.entries.lazy.compactMap { entry -> Secret? in
            guard case .accessToken(let token) = entry, token.id == id else { return nil }
            return token.secret
        }.first
    }

    /// Memory answers with the new token while its write waits behind a slow disk, the store's old row is never
    /// read for it, and the write lands in the store.
    @Test func memoryShowsTheCommitBeforeTheStoreHasIt() async throws {
        let (cache, store, token) = try await cache()
        var renewed = token
        renewed.secret = Secret("AT-renewed")
        renewed.expiresOn += 3600
        let release = store.holdWrites()
        try await cache.commit(CacheChanges(upserts: [.accessToken(renewed)]), waitingFor: .memory)
        // More tokens than the secrets remembered per generation, so that only the unwritten ones' table knows it.
        let others = (0..<300).map { index in
            var other = token
            other.target = "api://other/\(index)"
            other.secret = Secret("AT-other-\(index)")
            return CacheEntry.accessToken(other)
        }
        try await cache.commit(CacheChanges(upserts: others), waitingFor: .memory)
        #expect(cache.isWriting)
        #expect(cache.read { $0.accessTokens[renewed.id.key]?.expiresOn } == renewed.expiresOn)
        #expect(storedSecret(store, renewed.id) != Secret("AT-renewed"))
        let inMemory = try #require(cache.read { $0.accessTokens[renewed.id.key] })
        #expect(try await cache.secret(of: inMemory) == Secret("AT-renewed"))
        #expect(try await cache.allEntriesWithSecrets().contains(.accessToken(renewed)))
        #expect(store.secretReads == 0)
        release()
        await cache.finishWrites()
        #expect(!cache.isWriting)
        #expect(storedSecret(store, renewed.id) == Secret("AT-renewed"))
        #expect(cache.writeFailures.count == 0)
    }

    /// A commit that waits only for memory does not overtake one that waits for the disk and is still in line:
    /// memory and store end with the later one's token.
    @Test func neverOvertakesACommitWaitingForTheDisk() async throws {
        let (cache, store, token) = try await cache()
        var first = token
        first.secret = Secret("AT-first")
        var second = token
        second.secret = Secret("AT-second")
        let release = store.holdWrites()
        let durable = Task { try await cache.commit(CacheChanges(upserts: [.accessToken(first)])) }
        try await waitUntil("the durable commit is in line") { cache.isWriting }
        let ahead = Task {
            try await cache.commit(CacheChanges(upserts: [.accessToken(second)]), waitingFor: .memory)
        }
        // Both in line before the disk moves: the second commit meets the first one still waiting.
        try await waitUntil("the second commit is in line") { cache.writesInLine == 2 }
        release()
        try await durable.value
        try await ahead.value
        await cache.finishWrites()
        #expect(storedSecret(store, token.id) == Secret("AT-second"))
        let inMemory = try #require(cache.read { $0.accessTokens[token.id.key] })
        #expect(try await cache.secret(of: inMemory) == Secret("AT-second"))
    }

    /// A commit whose condition does not hold once the commits ahead of it are in memory changes nothing: a refresh
    /// that comes back after a sign-out of its account, still on its way to the disk, keeps none of its tokens.
    @Test func aCommitBehindARemovalThatUndoesItsConditionChangesNothing() async throws {
        let (cache, store, token) = try await cache()
        let refreshToken = try #require(cache.read { $0.refreshTokens.values.first })
        var renewed = token
        renewed.secret = Secret("AT-renewed")
        let release = store.holdWrites()
        let removal = Task { try await cache.commit(CacheChanges(deletions: [token.id, refreshToken.id])) }
        try await waitUntil("the removal is in line") { cache.isWriting }
        let refreshed = Task {
            try await cache.commitInMemory(CacheChanges(upserts: [.accessToken(renewed)])) {
                $0.refreshTokens[refreshToken.id.key] != nil
            }
        }
        // Before the disk moves, the refresh waits behind the removal, in line (the token is still in memory).
        try await waitUntil("the refresh's commit is in line") { cache.writesInLine == 2 }
        #expect(cache.read { $0.refreshTokens[refreshToken.id.key] } != nil)
        release()
        try await removal.value
        #expect(try await refreshed.value == false)
        await cache.finishWrites()
        #expect(!cache.isWriting)
        #expect(cache.read { $0.accessTokens[token.id.key] } == nil)
        #expect(storedSecret(store, token.id) == nil)
        // With nothing ahead, a commit whose condition holds is in memory at once.
        #expect(try await cache.commitInMemory(CacheChanges(upserts: [.accessToken(renewed)])) { _ in true })
        #expect(cache.read { $0.accessTokens[token.id.key] } != nil)
    }

    /// A planned commit reads the contents once the commits ahead are in them: a removal planned while a sign-in's
    /// write is still on its way to the disk takes the sign-in's tokens too.
    @Test func aPlannedCommitSeesTheCommitsAheadOfIt() async throws {
        let (cache, store, token) = try await cache()
        var signedIn = token
        signedIn.target = "api://signed-in/Things.Read"
        signedIn.secret = Secret("AT-signed-in")
        let signInChanges = CacheChanges(upserts: [.accessToken(signedIn)])
        let release = store.holdWrites()
        let signIn = Task { try await cache.commit(signInChanges) }
        try await waitUntil("the sign-in is in line") { cache.isWriting }
        let removal = Task {
            try await cache.commit { contents in
                let all = contents.accessTokens.values.map(\.id)
                return (CacheChanges(deletions: all), all.count)
            }
        }
        // The removal waits for the sign-in to be in memory; nothing is read for it before.
        try await waitUntil("the removal waits behind the sign-in") { cache.waitingBehindTheDisk == 1 }
        #expect(cache.read { $0.accessTokens[signedIn.id.key] } == nil)
        release()
        try await signIn.value
        #expect(try await removal.value == 2)
        await cache.finishWrites()
        #expect(cache.read { $0.accessTokens.isEmpty })
        #expect(storedSecret(store, signedIn.id) == nil && storedSecret(store, token.id) == nil)
    }

    /// What a plan throws comes out as it is, with nothing changed and no write failure counted; a planned write the
    /// store refuses is counted and logged, as every commit's is.
    @Test func aPlanThatThrowsChangesNothing() async throws {
        let (cache, store, token) = try await cache()
        let generation = cache.generation
        await #expect(throws: DiskFull.self) {
            let _: Int = try await cache.commit { _ throws(DiskFull) in throw DiskFull() }
        }
        #expect(cache.generation == generation)
        #expect(!cache.isWriting)
        #expect(cache.writeFailures.count == 0)

        store.failCommits(with: DiskFull())
        await #expect(throws: DiskFull.self) {
            try await cache.commit { _ in (CacheChanges(deletions: [token.id]), 1) }
        }
        #expect(cache.generation == generation)
        #expect(cache.writeFailures.count == 1)
        #expect(cache.read { $0.accessTokens[token.id.key] } != nil)
    }

    /// A write behind that fails leaves memory with the tokens (already handed out), is counted and logged, and
    /// memory keeps answering with the token's secret, not the store's old one.
    @Test func aFailedWriteBehindKeepsTheTokensInMemory() async throws {
        let (cache, store, token) = try await cache()
        var renewed = token
        renewed.secret = Secret("AT-renewed")
        store.failCommits(with: DiskFull())
        try await cache.commit(CacheChanges(upserts: [.accessToken(renewed)]), waitingFor: .memory)
        await cache.finishWrites()
        #expect(cache.writeFailures.count == 1)
        #expect(cache.writeFailures.last?.reason.contains("DiskFull") == true)
        #expect(storedSecret(store, token.id) != Secret("AT-renewed"))
        let inMemory = try #require(cache.read { $0.accessTokens[token.id.key] })
        #expect(try await cache.secret(of: inMemory) == Secret("AT-renewed"))
        // A later write of the same token that lands brings the store up to date.
        store.failCommits(with: nil)
        var again = token
        again.secret = Secret("AT-again")
        try await cache.commit(CacheChanges(upserts: [.accessToken(again)]), waitingFor: .memory)
        await cache.finishWrites()
        #expect(storedSecret(store, token.id) == Secret("AT-again"))
    }

    /// An access token without its secret is refused before memory changes, as the store refuses it.
    @Test func anUnstorableCommitChangesNothing() async throws {
        let (cache, store, token) = try await cache()
        let generation = cache.generation
        await #expect(throws: CacheError.self) {
            try await cache.commit(CacheChanges(upserts: [.accessToken(token)]), waitingFor: .memory)
        }
        #expect(cache.generation == generation)
        #expect(!cache.isWriting)
        #expect(store.entries.count == cache.read { $0.count.total })
    }

    /// A write in memory leaves out an account held as it is, when its turn comes, only while every write that changed
    /// memory landed: behind one that failed, it and every later write are written whole.
    @Test func unchangedEntriesAreLeftOutOnlyWhileTheStoreHasThem() async throws {
        let (cache, store, token) = try await cache()
        let account = try #require(cache.read { $0.accounts.values.first })
        var renamed = account
        renamed.name = "Ada King"
        var renewed = token
        renewed.secret = Secret("AT-renewed")
        func refresh(_ account: AccountEntry) async throws -> [EntryID]? {
            let before = store.committedUpserts.count
            try await cache.commit(
                CacheChanges(upserts: [.accessToken(renewed), .account(account)]),
                waitingFor: .memory
            )
            await cache.finishWrites()
            return store.committedUpserts.count == before + 1 ? store.committedUpserts.last : nil
        }

        #expect(try await refresh(account) == [renewed.id])
        // The account changed: written.
        #expect(try await refresh(renamed) == [renewed.id, account.id])

        // Behind a write still in line that lands, the same account is left out.
        var other = renamed
        other.name = "Ada Lovelace"
        var release = store.holdWrites()
        try await cache.commit(CacheChanges(upserts: [.account(other)]), waitingFor: .memory)
        try await cache.commit(CacheChanges(upserts: [.accessToken(renewed), .account(other)]), waitingFor: .memory)
        release()
        await cache.finishWrites()
        #expect(store.committedUpserts.suffix(2) == [[account.id], [renewed.id]])
        #expect(store.entries.contains(.account(other)))

        // Behind one that fails, the account memory kept is written by the write that follows.
        release = store.holdWrites()
        store.failCommits(with: DiskFull(), count: 1)
        try await cache.commit(CacheChanges(upserts: [.account(renamed)]), waitingFor: .memory)
        try await cache.commit(CacheChanges(upserts: [.accessToken(renewed), .account(renamed)]), waitingFor: .memory)
        release()
        await cache.finishWrites()
        #expect(cache.writeFailures.count == 1)
        #expect(store.committedUpserts.last == [renewed.id, account.id])
        #expect(store.entries.contains(.account(renamed)))
        // And from then on, nothing is left out.
        #expect(try await refresh(renamed) == [renewed.id, account.id])
    }
}
