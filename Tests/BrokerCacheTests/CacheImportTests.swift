import BrokerCache
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Synchronization
import Testing

struct CacheImportTests {
    private let now = Int64(Date().timeIntervalSince1970)

    private func read(_ document: JSONValue) throws -> (entries: [CacheEntry], skipped: [SkippedEntry]) {
        try MSALCacheDocument.read(Data(CacheFixtures.text(document).utf8))
    }

    /// An import adds and updates, but never replaces a newer token with an older one, and skips expired
    /// access tokens, each with a reason.
    @Test func keepsNewerTokensAndSkipsExpiredOnes() throws {
        let current = CacheContents(try read(CacheFixtures.msalCache(expiresOn: now + 7200, label: "new")).entries)
        let older = try read(CacheFixtures.msalCache(expiresOn: now + 3600, label: "old"))
        let plan = CacheImport(entries: older.entries, skipped: older.skipped, into: current, now: now)
        #expect(plan.imported.accessTokens == 0)
        #expect(plan.imported.refreshTokens == 0)
        #expect(plan.imported.accounts == 1)
        #expect(
            Set(plan.skipped.map(\.reason)) == [
                "the broker holds a newer access token", "the broker holds a newer refresh token",
            ]
        )

        let expired = try read(CacheFixtures.msalCache(expiresOn: now - 10))
        let expiredPlan = CacheImport(entries: expired.entries, skipped: [], into: CacheContents(), now: now)
        #expect(expiredPlan.imported.accessTokens == 0)
        #expect(expiredPlan.imported.refreshTokens == 1)
        #expect(expiredPlan.skipped.map(\.reason) == ["the access token has expired"])
    }

    /// Family membership the broker learned is not erased by a file that lacks it.
    @Test func keepsKnownFamilyMembership() throws {
        let current = CacheContents(try read(CacheFixtures.msalCache(familyId: "1")).entries)
        let plain = try read(CacheFixtures.msalCache())
        let plan = CacheImport(entries: plain.entries, skipped: [], into: current, now: now)
        let metadata = plan.changes.upserts.compactMap { entry -> AppMetadata? in
            if case .appMetadata(let metadata) = entry { return metadata }
            return nil
        }
        #expect(metadata.map(\.familyId) == ["1"])
    }
}

struct TokenCacheTests {
    /// A write the store refuses changes nothing in memory.
    @Test func failedCommitsLeaveMemoryUnchanged() async throws {
        let store = InMemoryTokenStore()
        let cache = try await TokenCache(store: store)
        let entries = try MSALCacheDocument.read(Data(CacheFixtures.text(CacheFixtures.msalCache()).utf8)).entries
        try await cache.commit(CacheChanges(upserts: entries))
        #expect(cache.read { $0.count.total } == 5)

        struct DiskFull: Error {}
        store.failCommits(with: DiskFull())
        await #expect(throws: DiskFull.self) {
            try await cache.commit(CacheChanges(deletions: entries.map(\.id)))
        }
        #expect(cache.read { $0.count.total } == 5)
        #expect(store.entries.count == 5)
    }
}
