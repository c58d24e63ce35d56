import BrokerTestSupport
import Crypto
import Foundation
import Testing

@testable import BrokerCache

/// The row ids entries are stored under: rows written by earlier versions are found by them, so they never change.
struct SecretSealerTests {
    private let key = SymmetricKey(data: Data((0..<32).map { UInt8($0) }))

    /// The id as the store's format defines it: HMAC-SHA256, under a subkey derived from the cache key, of the entry's
    /// section and MSAL key, in base64.
    private func definedRowID(section: String, key entryKey: String) -> String {
        let rowKey = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: key,
            info: Data("tokenbroker row ids v1".utf8),
            outputByteCount: 32
        )
        let input = Data("tokenbroker.row.v1\u{0}\(section)\u{0}\(entryKey)".utf8)
        return Data(HMAC<SHA256>.authenticationCode(for: input, using: rowKey)).base64EncodedString()
    }

    /// One sealer asked again and again, past what it remembers, gives each entry the id the format defines.
    @Test func rowIDsAreTheDefinedHMACWhetherRememberedOrNot() throws {
        let sealer = try SecretSealer(key: key)
        let keys = (0..<(RowIDMemo.capacity + 300)).map { "uid\($0).utid-login.example.com-refreshtoken-client-" }
        for round in 0..<2 {
            for (index, entryKey) in keys.enumerated() {
                let section = index.isMultiple(of: 2) ? "RefreshToken" : "AccessToken"
                #expect(
                    sealer.rowID(section: section, key: entryKey) == definedRowID(section: section, key: entryKey),
                    "round \(round), entry \(index)"
                )
            }
        }
        #expect(sealer.rowID(section: "IdToken", key: keys[0]) != sealer.rowID(section: "AccessToken", key: keys[0]))
        let other = try SecretSealer(key: SymmetricKey(data: Data(repeating: 7, count: 32)))
        #expect(other.rowID(section: "AccessToken", key: keys[1]) != sealer.rowID(section: "AccessToken", key: keys[1]))
    }

    /// The memo holds at most its capacity, and an entry asked for again is not computed again.
    @Test func theMemoIsBoundedAndComputesEachEntryOnce() {
        let memo = RowIDMemo()
        var computed = 0
        for index in 0..<(RowIDMemo.capacity * 2 + 5) {
            _ = memo.rowID(section: "AccessToken", key: "key \(index)") {
                computed += 1
                return "id \(index)"
            }
            #expect(memo.count <= RowIDMemo.capacity)
        }
        #expect(computed == RowIDMemo.capacity * 2 + 5)
        let last = "key \(RowIDMemo.capacity * 2 + 4)"
        let again = memo.rowID(section: "AccessToken", key: last) {
            computed += 1
            return "computed again"
        }
        #expect(again == "id \(RowIDMemo.capacity * 2 + 4)")
        #expect(computed == RowIDMemo.capacity * 2 + 5)
        let remembered = memo.count
        #expect(memo.forget(section: "AccessToken", key: last) == "id \(RowIDMemo.capacity * 2 + 4)")
        #expect(memo.count == remembered - 1)
        #expect(memo.forget(section: "AccessToken", key: last) == nil)
        #expect(
            memo.rowID(section: "AccessToken", key: last) { "computed after it was forgotten" }
                == "computed after it was forgotten"
        )
    }

    /// An entry removed is forgotten, and its id is still the one the format defines.
    @Test func aRemovedEntrysIDIsForgotten() throws {
        let sealer = try SecretSealer(key: key)
        let entryKey = "uid.utid-login.example.com-refreshtoken-client-"
        let id = sealer.rowID(section: "RefreshToken", key: entryKey)
        #expect(sealer.rememberedRowIDs == 1)
        #expect(sealer.rowIDForgetting(section: "RefreshToken", key: entryKey) == id)
        #expect(sealer.rememberedRowIDs == 0)
        #expect(
            sealer.rowIDForgetting(section: "AccessToken", key: entryKey)
                == definedRowID(section: "AccessToken", key: entryKey)
        )
        #expect(sealer.rememberedRowIDs == 0)
        #expect(id == definedRowID(section: "RefreshToken", key: entryKey))
    }

    /// Writing remembers the ids of the entries written; opening a cache checks every row's id without remembering
    /// them (a load reads each row once), and a removal forgets the entries it removed.
    @Test func writesRememberTheirRowsAndLoadsDoNot() async throws {
        let directory = try TemporaryDirectory()
        let url = CacheLocation(stateDirectory: directory.url).databaseURL
        try FileManager.default.createDirectory(
            at: url.deletingLastPathComponent(),
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        let document = CacheFixtures.msalCache(people: [CacheFixtures.ada, CacheFixtures.alan], label: "1")
        let written = try MSALCacheDocument.read(Data(CacheFixtures.text(document).utf8)).entries
        let writer = try SecretSealer(key: key)
        do {
            let cache = try await TokenCache(store: try SQLiteTokenStore(url: url, sealer: writer))
            try await cache.commit(CacheChanges(upserts: written))
            #expect(writer.rememberedRowIDs == written.count)
            try await cache.commit(CacheChanges(deletions: [written[0].id]))
            #expect(writer.rememberedRowIDs == written.count - 1)
        }
        let reader = try SecretSealer(key: key)
        let reopened = try await TokenCache(store: try SQLiteTokenStore(url: url, sealer: reader))
        #expect(reopened.damaged.isEmpty)
        #expect(reader.rememberedRowIDs == 0)
        #expect(Set(try await reopened.allEntriesWithSecrets()) == Set(written.dropFirst()))
    }
}
