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

    /// Every reason an import gives for an entry it leaves out is one Protocol/ §9.6 lists, word for word (an app
    /// reads them, and the independent client found one that the list lacked).
    @Test func everySkipReasonIsTheProtocols() throws {
        let held = try read(CacheFixtures.msalCache(expiresOn: now + 7200, label: "new"))
        let current = CacheContents(held.entries)
        var reasons = Set<String>()
        // Older tokens; the same document again; an expired one; a key twice.
        for document in [
            CacheFixtures.msalCache(expiresOn: now + 3600, label: "old"),
            CacheFixtures.msalCache(expiresOn: now + 7200, label: "new"),
            CacheFixtures.msalCache(expiresOn: now - 10, label: "gone"),
        ] {
            let plan = try read(document)
            reasons.formUnion(
                CacheImport(entries: plan.entries, skipped: plan.skipped, into: current, now: now).skipped.map(\.reason)
            )
        }
        let twice = try read(CacheFixtures.msalCache(label: "x")).entries
        reasons.formUnion(
            CacheImport(entries: twice + twice, skipped: [], into: CacheContents(), now: now).skipped.map(\.reason)
        )
        let (exported, _, moved) = try familyTokenMoved()
        reasons.formUnion(CacheImport(entries: exported, skipped: [], into: moved, now: now).skipped.map(\.reason))
        #expect(
            reasons.isSuperset(of: [
                "the access token has expired", "the broker holds a newer access token",
                "the broker already holds this refresh token", "a second entry with the same key",
                "the broker holds a newer family refresh token for this account",
            ]),
            "\(reasons)"
        )
        // The text as one line: its lines are wrapped, and a reason may be cut across two.
        let protocolText = try String(
            contentsOf: URL(filePath: #filePath).deletingLastPathComponent().appending(
                path: "../../Protocol/README.md"
            ),
            encoding: .utf8
        )
        .split(whereSeparator: { $0 == " " || $0 == "\n" }).joined(separator: " ")
        for reason in reasons {
            #expect(protocolText.contains("\"\(reason)\""), "Protocol §9.6 does not list \"\(reason)\"")
        }
    }

    /// Two entries whose fields make one key are one credential, read once.
    ///
    /// Keys in a document are not trusted: here the second is under a key of its own, with an unknown field. The
    /// first in key order is read, the other skipped with §9.6's reason, and what is read is what is written and read
    /// again (found by the fuzzer, whose invariant that is).
    @Test func twoEntriesWithOneRebuiltKeyAreReadOnce() throws {
        guard case .object(var document) = CacheFixtures.msalCache(),
            case .object(var tokens)? = document["AccessToken"],
            let (key, token) = tokens.first, case .object(var copy) = token
        else {
            Issue.record("the fixture has no access token")
            return
        }
        copy["x_unknown"] = .string("kept")
        tokens["another key for the same token"] = .object(copy)
        document["AccessToken"] = .object(tokens)
        let read = try read(.object(document))
        let accessTokens = read.entries.filter { $0.id.section == .accessToken }
        #expect(accessTokens.map(\.id.key) == [key])
        #expect(read.skipped == [SkippedEntry(entry: "AccessToken/\(key)", reason: "a second entry with the same key")])
        let again = try MSALCacheDocument.read(try MSALCacheDocument.write(read.entries))
        #expect(Set(again.entries) == Set(read.entries))
        #expect(again.skipped.isEmpty)
    }

    /// An export's family refresh token, and a broker that has since moved it to another app of the family (which
    /// redeemed it, and got a new one).
    private func familyTokenMoved() throws -> (exported: [CacheEntry], family: RefreshToken, current: CacheContents) {
        let exported = try read(CacheFixtures.msalCache(familyId: "1", label: "old")).entries
        let family = try #require(
            exported.lazy.compactMap { entry -> RefreshToken? in
                if case .refreshToken(let token) = entry { return token }
                return nil
            }.first
        )
        var moved = family
        moved.clientId = "22222222-aaaa-4bbb-8ccc-00000000000f"
        moved.secret = Secret("RT-rotated-in")
        moved.lastModificationTime = (family.lastModificationTime ?? now) + 60
        return (exported, family, CacheContents([.refreshToken(moved)]))
    }

    /// A family refresh token the broker moved to another app of the family is not brought back by an older document.
    ///
    /// Under the first app's key, presented again, a rotated-out token would make the provider revoke the sign-in. A
    /// newer family token is imported.
    @Test func neverBringsBackAFamilyTokenTheFamilyReplaced() throws {
        let (exported, family, current) = try familyTokenMoved()
        let plan = CacheImport(entries: exported, skipped: [], into: current, now: now)
        #expect(plan.imported.refreshTokens == 0)
        #expect(plan.skipped.map(\.reason).contains("the broker holds a newer family refresh token for this account"))

        var newer = family
        newer.lastModificationTime = (family.lastModificationTime ?? now) + 120
        let newerPlan = CacheImport(entries: [.refreshToken(newer)], skipped: [], into: current, now: now)
        #expect(newerPlan.imported.refreshTokens == 1)
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
