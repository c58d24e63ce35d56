import BrokerCache
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

struct CacheContentsTests {
    private func contents() throws -> CacheContents {
        let document = CacheFixtures.msalCache(people: [CacheFixtures.ada, CacheFixtures.alan])
        return CacheContents(try MSALCacheDocument.read(Data(CacheFixtures.text(document).utf8)).entries)
    }

    /// Accounts are found by identifier and by username, case-insensitively.
    @Test func findsAccountsByIdentifierAndUsername() throws {
        let contents = try contents()
        #expect(contents.accounts(identifier: CacheFixtures.ada.homeAccountId).map(\.username) == ["ada@contoso.com"])
        #expect(contents.accounts(identifier: CacheFixtures.ada.homeAccountId.uppercased()).count == 1)
        #expect(
            contents.accounts(username: "ALAN@contoso.com").map(\.homeAccountId) == [CacheFixtures.alan.homeAccountId]
        )
        #expect(contents.accounts(username: "nobody@contoso.com").isEmpty)
    }

    /// An app's metadata is found in the first of the environments, in sorted order, that has it; none when no
    /// environment has it, or when it belongs to another app.
    @Test func findsAppMetadataInTheFirstEnvironmentThatHasIt() {
        let contents = CacheContents([
            .appMetadata(AppMetadata(clientId: "app", environment: "login.windows.net", familyId: nil)),
            .appMetadata(AppMetadata(clientId: "app", environment: "login.microsoftonline.com", familyId: "1")),
            .appMetadata(AppMetadata(clientId: "other", environment: "login.microsoft.com", familyId: "1")),
        ])
        let aliases: Set = ["login.windows.net", "login.microsoftonline.com", "login.microsoft.com"]
        #expect(
            contents.appMetadata(clientId: "app", environments: aliases)?.environment == "login.microsoftonline.com"
        )
        #expect(contents.appMetadata(clientId: "app", environments: ["login.windows.net"])?.familyId == nil)
        #expect(contents.appMetadata(clientId: "app", environments: ["login.windows.net"]) != nil)
        #expect(contents.appMetadata(clientId: "app", environments: ["login.microsoft.com"]) == nil)
        #expect(contents.appMetadata(clientId: "app", environments: []) == nil)
    }

    /// Where the secrets stay in the store, a token handed back finds the tokens whose secrets end as it does (its
    /// length and last 64 bytes): candidates, each read and compared whole by the broker; one that ends otherwise
    /// finds none.
    @Test func tokensLeftInTheStoreAreFoundByTheirSecretsEnds() {
        let tail = String(repeating: "t", count: 100)
        func token(_ target: String, _ secret: String) -> AccessToken {
            AccessToken(
                homeAccountId: "uid.utid",
                environment: "login.microsoftonline.com",
                clientId: "client",
                realm: "utid",
                target: target,
                secret: Secret(secret),
                cachedAt: 1,
                expiresOn: 2
            )
        }
        let first = token("api://one/Read", "a" + tail)
        let lookalike = token("api://two/Read", "b" + tail)
        let other = token("api://three/Read", "a" + tail.dropLast() + "u")
        let contents = CacheContents(
            [.accessToken(first), .accessToken(lookalike), .accessToken(other)],
            leavingAccessTokenSecretsInStore: true
        )
        #expect(Set(contents.accessTokens(holding: Secret("a" + tail)).map(\.id)) == [first.id, lookalike.id])
        #expect(contents.accessTokens(holding: Secret("a" + tail.dropLast() + "u")).map(\.id) == [other.id])
        #expect(contents.accessTokens(holding: Secret(tail)).isEmpty)
        #expect(contents.accessTokens(holding: Secret("a" + tail + "t")).isEmpty)
    }

    /// Access tokens are found by account, client and realm in any alias of the environment; id tokens carry
    /// their decoded claims.
    @Test func findsTokensAndClaims() throws {
        let contents = try contents()
        let found = contents.accessTokens(
            homeAccountId: CacheFixtures.ada.homeAccountId,
            clientId: CacheFixtures.clientId,
            realm: CacheFixtures.tenant,
            environments: ["login.microsoftonline.com", "login.windows.net"]
        )
        #expect(found.count == 1)
        #expect(found.first?.scopes.normalized.contains("https://graph.microsoft.com/user.read") == true)
        let idToken = contents.idToken(
            homeAccountId: CacheFixtures.ada.homeAccountId,
            clientId: CacheFixtures.clientId,
            realm: CacheFixtures.tenant,
            environments: ["login.microsoftonline.com"]
        )
        #expect(idToken?.claims?["preferred_username"] == .string("ada@contoso.com"))
        #expect(contents.clientInfo(of: try #require(contents.accounts(username: "ada@contoso.com").first)) != nil)
    }

    /// Deleting entries removes them from every index.
    @Test func deletionsLeaveNoStaleIndexEntries() throws {
        var contents = try contents()
        let account = try #require(contents.accounts(username: "ada@contoso.com").first)
        let tokens = contents.accessTokens(
            homeAccountId: account.homeAccountId,
            clientId: CacheFixtures.clientId,
            realm: CacheFixtures.tenant,
            environments: [CacheFixtures.environment]
        )
        contents.apply(CacheChanges(deletions: [account.id] + tokens.map(\.token.id)))
        #expect(contents.accounts(username: "ada@contoso.com").isEmpty)
        #expect(contents.accounts(identifier: account.homeAccountId).isEmpty)
        #expect(
            contents.accessTokens(
                homeAccountId: account.homeAccountId,
                clientId: CacheFixtures.clientId,
                realm: CacheFixtures.tenant,
                environments: [CacheFixtures.environment]
            ).isEmpty
        )
        #expect(contents.count.accounts == 1)
        #expect(contents.count.accessTokens == 1)
    }

    /// Applying says which upserts changed nothing: an account or app metadata held as it is, but not a token (a token
    /// upserted is a new one), a changed account, or an account its deletion took out first.
    @Test func applyingTellsWhichUpsertsChangedNothing() throws {
        var contents = try contents()
        let account = try #require(contents.accounts(username: "ada@contoso.com").first)
        let metadata = try #require(
            contents.appMetadata(clientId: CacheFixtures.clientId, environments: [CacheFixtures.environment])
        )
        let token = try #require(contents.accessTokens.values.first)
        var renamed = account
        renamed.name = "Ada King"
        var refamilied = metadata
        refamilied.familyId = metadata.familyId == nil ? "1" : nil

        #expect(
            contents.apply(CacheChanges(upserts: [.accessToken(token), .account(account), .appMetadata(metadata)])) == [
                1, 2,
            ]
        )
        #expect(contents.apply(CacheChanges(upserts: [.appMetadata(refamilied), .account(renamed)])).isEmpty)
        #expect(contents.accounts(username: "ada@contoso.com").first?.name == "Ada King")
        #expect(contents.apply(CacheChanges(upserts: [.account(renamed), .appMetadata(refamilied)])) == [0, 1])
        #expect(contents.apply(CacheChanges(upserts: [.account(renamed)], deletions: [renamed.id])).isEmpty)
        #expect(contents.accounts(username: "ada@contoso.com").first?.name == "Ada King")
    }
}
