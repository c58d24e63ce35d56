import BrokerCache
import BrokerCore
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

struct AccountsTests {
    private let twoPeople = [CacheFixtures.msalCache(people: [CacheFixtures.ada, CacheFixtures.alan])]

    /// getAccounts lists everyone, or filters by client id and authority.
    @Test func listsAndFiltersAccounts() async throws {
        let fixture = try await BrokerFixture(documents: twoPeople)
        #expect(
            try fixture.broker.accounts(GetAccountsParams()).accounts.map(\.username) == [
                "ada@contoso.com", "alan@contoso.com",
            ]
        )
        #expect(try fixture.broker.accounts(GetAccountsParams(clientId: CacheFixtures.clientId)).accounts.count == 2)
        #expect(try fixture.broker.accounts(GetAccountsParams(clientId: "someone-else")).accounts.isEmpty)
        #expect(try fixture.broker.accounts(GetAccountsParams(authority: CacheFixtures.authority)).accounts.count == 2)
        #expect(
            try fixture.broker.accounts(
                GetAccountsParams(authority: "https://login.microsoftonline.com/00000000-0000-0000-0000-000000000001")
            ).accounts.isEmpty
        )
        #expect(
            try fixture.broker.accounts(GetAccountsParams(authority: "https://accounts.example.com")).accounts.isEmpty
        )
    }

    /// A bad authority filter is named as the field it came in; an unknown account's name is echoed shortened.
    @Test func namesFieldsAndBoundsEchoes() async throws {
        let fixture = try await BrokerFixture()
        await expectFailure(.invalidParams) {
            _ = try fixture.broker.accounts(GetAccountsParams(authority: "http://example.com"))
        }
        do {
            _ = try fixture.broker.accounts(GetAccountsParams(authority: "http://example.com"))
        } catch {
            #expect(error.details.field == "params.authority")
        }
        let huge = String(repeating: "x", count: 100_000)
        do {
            _ = try fixture.broker.account(GetAccountParams(AccountSelector(username: huge)))
            Issue.record("found an account")
        } catch {
            #expect(error.code == .noAccount)
            #expect(error.message.count < 200)
        }
    }

    /// The version lists the methods the daemon serves: the broker's, and the endpoint's grants.
    @Test func versionListsServedMethods() async throws {
        let fixture = try await BrokerFixture()
        let version = try fixture.broker.version(GetVersionParams())
        #expect(version.methods.contains("acquireTokenSilently"))
        let served = fixture.broker.handlers(status: { preconditionFailure("status is not asked for") }).served
        #expect(Set(version.methods) == Set((served + MethodName.grantMethods).map(\.rawValue)))
        await expectFailure(.unsupportedProtocolVersion) {
            _ = try fixture.broker.version(GetVersionParams(protocolVersion: "2.0"))
        }
        // major.minor, decimal without leading zeros, as the schema's pattern says (Protocol/ §9.1).
        for malformed in ["x", "1", "01.0", "1.0.0", "1.x", "", "+1.0", "1.01", "1234567890.0"] {
            await expectFailure(.invalidParams) {
                _ = try fixture.broker.version(GetVersionParams(protocolVersion: malformed))
            }
        }
        for served in ["1.0", "1.9", "1.123"] {
            #expect(
                try fixture.broker.version(GetVersionParams(protocolVersion: served)).protocolVersion
                    == WireProtocol.version
            )
        }
    }

    /// getAccount: by identifier when given, by username otherwise or when the identifier is unknown.
    @Test func findsOneAccountByTheSeedsRule() async throws {
        let fixture = try await BrokerFixture(documents: twoPeople)
        let byIdentifier = try fixture.broker.account(
            GetAccountParams(AccountSelector(identifier: CacheFixtures.alan.homeAccountId, username: "ada@contoso.com"))
        )
        #expect(byIdentifier.account.username == "alan@contoso.com")
        let byUsername = try fixture.broker.account(
            GetAccountParams(AccountSelector(identifier: "unknown", username: "Ada@Contoso.com"))
        )
        #expect(byUsername.account.identifier == CacheFixtures.ada.homeAccountId)
        await expectFailure(.noAccount) {
            _ = try fixture.broker.account(GetAccountParams(AccountSelector(username: "x@y")))
        }
        await expectFailure(.invalidParams) { _ = try fixture.broker.account(GetAccountParams(AccountSelector())) }
    }

    /// removeAccount without a client id removes the account and all it has; nobody gets a token after.
    @Test func removesAnAccountEntirely() async throws {
        let fixture = try await BrokerFixture(documents: twoPeople)
        let result = try await fixture.broker.removeAccount(
            RemoveAccountParams(account: AccountSelector(username: "ada@contoso.com")),
            caller: fixture.caller
        )
        #expect(result.accountRemoved)
        #expect(result.removedCredentials == 3)
        await expectFailure(.noAccount) { _ = try await fixture.silent() }
        #expect(try fixture.broker.accounts(GetAccountsParams()).accounts.map(\.username) == ["alan@contoso.com"])
        #expect(fixture.store.entries.count == 5)
        await fixture.broker.audit.written()
        #expect(fixture.logs.lines(containing: "account removed").count == 1)
    }

    /// removeAccount for one client id keeps the account and the family refresh token for other apps.
    @Test func removesOneClientButKeepsTheFamilyToken() async throws {
        let fixture = try await BrokerFixture(documents: [CacheFixtures.msalCache(familyId: "1")])
        let result = try await fixture.broker.removeAccount(
            RemoveAccountParams(
                account: AccountSelector(username: "ada@contoso.com"),
                clientId: CacheFixtures.clientId
            ),
            caller: fixture.caller
        )
        #expect(!result.accountRemoved)
        #expect(result.removedCredentials == 2)
        #expect(fixture.broker.cacheCounts.refreshTokens == 1)
        #expect(fixture.broker.cacheCounts.accounts == 1)
        await expectFailure(.interactionRequired) { _ = try await fixture.silent() }
    }
}
