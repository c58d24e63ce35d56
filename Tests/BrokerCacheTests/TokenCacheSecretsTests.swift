import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

@testable import BrokerCache

/// Access tokens' secrets the contents leave in the store: read from it off the caller's thread, once per token and
/// generation, by one read however many ask at once, and kept across a commit that leaves the token alone.
struct TokenCacheSecretsTests {
    private func cache() async throws -> (TokenCache, InMemoryTokenStore, [AccessToken]) {
        let document = CacheFixtures.msalCache(people: [CacheFixtures.ada, CacheFixtures.alan], label: "1")
        let store = InMemoryTokenStore(try MSALCacheDocument.read(Data(CacheFixtures.text(document).utf8)).entries)
        let cache = try await TokenCache(store: store)
        let tokens = cache.read { $0.accessTokens.values.sorted { $0.id.key < $1.id.key } }
        try #require(tokens.count == 2 && tokens.allSatisfy { $0.secret.isEmpty })
        return (cache, store, tokens)
    }

    @Test func aSecretIsReadOnceAndThenFromMemory() async throws {
        let (cache, store, tokens) = try await cache()
        #expect(cache.secretInMemory(of: tokens[0]) == nil)
        let secret = try #require(try await cache.secret(of: tokens[0]))
        #expect(cache.secretInMemory(of: tokens[0]) == secret)
        #expect(try await cache.secret(of: tokens[0]) == secret)
        #expect(store.secretReads == 1)
    }

    @Test func readsAtOnceShareOneStoreRead() async throws {
        let (cache, store, tokens) = try await cache()
        let token = tokens[1]
        // The first read waits until the other 19 callers have joined it: none can find the secret in memory first.
        store.holdSecretReads { cache.secretReadCounts.joined == 19 }
        let secrets = try await withThrowingTaskGroup(of: Secret?.self) { group in
            for _ in 0..<20 { group.addTask { try await cache.secret(of: token) } }
            return try await group.reduce(into: Set<Secret?>()) { $0.insert($1) }
        }
        #expect(secrets.count == 1 && secrets.first! != nil)
        #expect(store.secretReads == 1)
        #expect(cache.secretReadCounts == (started: 1, joined: 19))
    }

    /// A commit that replaces one token keeps the other's remembered secret, and remembers the new token's.
    @Test func aCommitKeepsTheSecretsItLeftAlone() async throws {
        let (cache, store, tokens) = try await cache()
        let kept = try #require(try await cache.secret(of: tokens[0]))
        var replacement = tokens[1]
        replacement.secret = Secret("AT-replaced")
        try await cache.commit(CacheChanges(upserts: [.accessToken(replacement)]))
        let reads = store.secretReads
        #expect(cache.secretInMemory(of: tokens[0]) == kept)
        let stored = try #require(cache.read { $0.accessTokens[replacement.id.key] })
        #expect(cache.secretInMemory(of: stored) == Secret("AT-replaced"))
        // A token the commit removed is gone from memory and from the store.
        try await cache.commit(CacheChanges(deletions: [tokens[0].id]))
        #expect(cache.secretInMemory(of: tokens[0]) == nil)
        #expect(try await cache.secret(of: tokens[0]) == nil)
        #expect(store.secretReads == reads + 1)
    }
}
