import BrokerProtocol
import BrokerTestSupport
import Testing

@testable import BrokerCache

struct SharedValuesTests {
    /// A value is made once for its first holder, handed to the next ones, and goes with its last holder.
    @Test func keepsOneValueWhileItIsHeld() {
        var shared = SharedValues<ScopeSet>()
        var made = 0
        let make = { (target: String) -> ScopeSet in
            made += 1
            return ScopeSet(target: target)
        }
        let first = shared.hold("api://things/Read api://things/Write", make: make)
        let second = shared.hold("api://things/Read api://things/Write", make: make)
        #expect(made == 1)
        #expect(first == second)
        shared.release("api://things/Read api://things/Write")
        #expect(shared.count == 1)
        shared.release("api://things/Read api://things/Write")
        #expect(shared.count == 0)
        shared.release("api://things/Read api://things/Write")
        #expect(shared.count == 0)
        _ = shared.hold("api://things/Read api://things/Write", make: make)
        #expect(made == 2)
    }

    /// Two spellings Unicode calls equal (composed and decomposed) are two values: sharing never swaps the bytes
    /// an entry came with.
    @Test func keepsSpellingsUnicodeCallsEqualApart() {
        let composed = "api://caf\u{E9}/Read"
        let decomposed = "api://cafe\u{301}/Read"
        #expect(composed == decomposed)
        var shared = SharedValues<String>()
        #expect(Array(shared.hold(composed).utf8) == Array(composed.utf8))
        #expect(Array(shared.hold(decomposed).utf8) == Array(decomposed.utf8))
        #expect(shared.count == 2)
    }

    /// Tokens that hold the same strings keep their own bytes through the cache, and an entry without unknown
    /// fields keeps none.
    @Test func entriesKeepTheirBytesInTheCache() throws {
        let composed = "api://caf\u{E9}/Read"
        let decomposed = "api://cafe\u{301}/Read"
        let tokens = [composed, decomposed].enumerated().map { index, target in
            AccessToken(
                homeAccountId: "uid.utid",
                environment: "login.microsoftonline.com",
                clientId: "client-\(index)",
                realm: "utid",
                target: target,
                secret: Secret("token-\(index)"),
                cachedAt: 1,
                expiresOn: 2
            )
        }
        var contents = CacheContents(tokens.map(CacheEntry.accessToken))
        for token in tokens {
            guard case .accessToken(let kept) = try #require(contents.entry(token.id)) else {
                Issue.record("not an access token")
                continue
            }
            #expect(Array(kept.target.utf8) == Array(token.target.utf8))
            #expect(kept == token)
        }
        contents.apply(CacheChanges(deletions: [tokens[0].id]))
        #expect(contents.entry(tokens[0].id) == nil)
        #expect(contents.entry(tokens[1].id) != nil)

        let read = try AccessToken(fields: tokens[0].fields)
        #expect(read.extra.isEmpty)
        #expect(read == tokens[0])
    }

    /// An entry replaced by one of the same id keeps what they share held once, whether its values stay (a
    /// refresh) or change spelling (a tenant in capitals); the last entry's removal lets go of them all.
    @Test func replacingAnEntryKeepsItsSharedValuesCounted() throws {
        func token(realm: String, target: String, secret: String) -> AccessToken {
            AccessToken(
                homeAccountId: "uid.utid",
                environment: "login.microsoftonline.com",
                clientId: "client",
                realm: realm,
                target: target,
                secret: Secret(secret),
                cachedAt: 1,
                expiresOn: 2
            )
        }
        let first = token(realm: "utid", target: "api://things/Read", secret: "first")
        var contents = CacheContents([.accessToken(first)])
        #expect(contents.sharedValueCounts == (5, 1))

        let refreshed = token(realm: "utid", target: "api://things/Read", secret: "refreshed")
        contents.apply(CacheChanges(upserts: [.accessToken(refreshed)]))
        #expect(contents.sharedValueCounts == (5, 1))
        #expect(contents.entry(first.id) == .accessToken(refreshed))
        #expect(contents.accessTokens(holding: Secret("first")).isEmpty)

        let respelled = token(realm: "UTID", target: "API://things/Read", secret: "respelled")
        #expect(respelled.id == first.id)
        contents.apply(CacheChanges(upserts: [.accessToken(respelled)]))
        #expect(contents.sharedValueCounts == (5, 1))
        #expect(contents.entry(first.id) == .accessToken(respelled))
        let found = contents.accessTokens(
            homeAccountId: "uid.utid",
            clientId: "client",
            realm: "utid",
            environments: ["login.microsoftonline.com"]
        )
        #expect(found.map(\.token) == [respelled])
        #expect(found.map(\.scopes) == [ScopeSet(target: "API://things/Read")])

        contents.apply(CacheChanges(deletions: [first.id]))
        #expect(contents.sharedValueCounts == (0, 0))
        #expect(contents.count.accessTokens == 0)
    }

    /// Replaced in place (the same values), tokens are found by their new secrets and claims, not their old ones,
    /// also where the contents leave access tokens' secrets in the store.
    @Test func tokensReplacedInPlaceAnswerWithTheirNewSecrets() throws {
        for leavingSecrets in [false, true] {
            func tokens(_ name: String) -> (AccessToken, IdToken) {
                (
                    AccessToken(
                        homeAccountId: "uid.utid",
                        environment: "login.microsoftonline.com",
                        clientId: "client",
                        realm: "utid",
                        target: "api://things/Read",
                        secret: Secret("access-\(name)"),
                        cachedAt: 1,
                        expiresOn: 2
                    ),
                    IdToken(
                        homeAccountId: "uid.utid",
                        environment: "login.microsoftonline.com",
                        realm: "utid",
                        clientId: "client",
                        secret: Secret(CacheFixtures.jwt(["name": .string(name)]))
                    )
                )
            }
            let (oldAccess, oldId) = tokens("old")
            var contents = CacheContents(
                [.accessToken(oldAccess), .idToken(oldId)],
                leavingAccessTokenSecretsInStore: leavingSecrets
            )
            let counts = contents.sharedValueCounts
            let (newAccess, newId) = tokens("new")
            contents.apply(CacheChanges(upserts: [.accessToken(newAccess), .idToken(newId)]))
            #expect(contents.sharedValueCounts == counts)
            #expect(contents.accessTokens(holding: Secret("access-old")).isEmpty)
            #expect(contents.accessTokens(holding: Secret("access-new")).map(\.id) == [newAccess.id])
            let found = try #require(
                contents.idToken(
                    homeAccountId: "uid.utid",
                    clientId: "client",
                    realm: "utid",
                    environments: ["login.microsoftonline.com"]
                )
            )
            #expect(found.token == newId)
            #expect(found.claims?["name"] == .string("new"))
        }
    }

    /// Lowercasing for keys gives what `lowercased()` gives, and keeps the storage of what has nothing to lowercase.
    @Test func lowercasesKeysAsStringDoesWithoutCopyingLowercaseOnes() {
        let samples = [
            "", "abc", "ABC", "login.microsoftonline.com", "Login.MicrosoftOnline.com",
            "00000000-0000-4000-8000-0000000000ab",
            "caf\u{E9}", "CAF\u{C9}", "cafe\u{301}", "\u{130}stanbul", "stra\u{DF}e", "[a]-z_{@}`~", "\u{1F600} hi",
        ]
        for sample in samples {
            #expect(Array(sample.lowercasedSharingStorage.utf8) == Array(sample.lowercased().utf8), "\(sample)")
        }
        // Every byte value at every offset of a long key (the check goes eight bytes at a time).
        for offset in 0..<20 {
            for byte in UInt8(0x01)...UInt8(0x7F) {
                var bytes = Array(repeating: UInt8(ascii: "a"), count: 24)
                bytes[offset] = byte
                let sample = String(decoding: bytes, as: UTF8.self)
                #expect(Array(sample.lowercasedSharingStorage.utf8) == Array(sample.lowercased().utf8), "\(sample)")
            }
            let sample = String(repeating: "b", count: offset) + "\u{C9}" + String(repeating: "c", count: 20 - offset)
            #expect(Array(sample.lowercasedSharingStorage.utf8) == Array(sample.lowercased().utf8), "\(sample)")
        }
        var long = String(repeating: "0123456789abcdef-", count: 8)
        var copy = long.lowercasedSharingStorage
        #expect(long.withUTF8 { $0.baseAddress } == copy.withUTF8 { $0.baseAddress })
        long = String(repeating: "0123456789ABCDEF-", count: 8)
        copy = long.lowercasedSharingStorage
        #expect(long.withUTF8 { $0.baseAddress } != copy.withUTF8 { $0.baseAddress })
    }

    /// An entry's key is its parts joined by `-` and lowercased as `lowercased()` lowers, whatever they hold: every
    /// byte of 0...127, capitals, non-ASCII letters (a final sigma among them), empty parts.
    @Test func keysAreTheirPartsJoinedAndLowercased() {
        let pieces = [
            "", "-", "uid.utid", "login.microsoftonline.com", "AccessToken", "API://Things/Read offline_access",
            "\u{C9}COLE", "\u{39F}\u{394}\u{39F}\u{3A3}", "caf\u{E9}", "cafe\u{301}", "\u{130}", "\u{1E9E}",
            "\u{1F600}Z",
            String(decoding: Array(0...127), as: UTF8.self),
        ]
        var seen = 0
        for first in pieces {
            for second in pieces {
                for third in pieces {
                    let expected = [first, second, third].joined(separator: "-").lowercased()
                    #expect(Array(EntryID.key(first, second, third).utf8) == Array(expected.utf8))
                    seen += 1
                }
            }
            #expect(Array(EntryID.key(first).utf8) == Array(first.lowercased().utf8))
        }
        #expect(EntryID.key() == "")
        #expect(seen == pieces.count * pieces.count * pieces.count)
    }
}
