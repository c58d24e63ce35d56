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
}
