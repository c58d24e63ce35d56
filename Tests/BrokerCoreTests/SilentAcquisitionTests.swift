import BrokerCache
import BrokerCore
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

struct SilentAcquisitionTests {
    /// A cached token that fits is handed out with its account, id token and client info.
    @Test func servesAFreshCachedToken() async throws {
        let fixture = try await BrokerFixture()
        let result = try await fixture.silent()
        #expect(result.tokenSource == .cache)
        #expect(result.accessToken.reveal().hasPrefix("eyJ"))
        #expect(result.account.identifier == CacheFixtures.ada.homeAccountId)
        #expect(result.account.username == "ada@contoso.com")
        #expect(result.account.accountClaims?["name"] == .string("Ada Lovelace"))
        #expect(result.grantedScopes.contains("https://graph.microsoft.com/User.Read"))
        #expect(result.idToken != nil)
        #expect(result.clientInfo != nil)
        #expect(result.correlationId == "corr-1")
        #expect(result.expiresOn % 1000 == 0 && result.expiresOn > Int64(Date().timeIntervalSince1970) * 1000)
    }

    /// The same token is found through an alias of the environment, by identifier, with the sole account, and
    /// for a subset of its scopes.
    @Test func findsTheTokenEveryWayAnAppMightAsk() async throws {
        let fixture = try await BrokerFixture()
        _ = try await fixture.silent(authority: "https://login.windows.net/\(CacheFixtures.tenant)")
        _ = try await fixture.silent(account: AccountSelector(identifier: CacheFixtures.ada.homeAccountId))
        _ = try await fixture.silent(account: nil)
        _ = try await fixture.silent(authority: "https://login.microsoftonline.com/common")
        _ = try await fixture.silent(authority: "https://login.microsoftonline.com/organizations")
        _ = try await fixture.silent(scopes: ["https://graph.microsoft.com/User.Read", "openid", "profile"])
        _ = try await fixture.silent(scopes: nil, resource: "https://graph.microsoft.com")
        _ = try await fixture.silent(account: AccountSelector(identifier: "unknown.id", username: "ADA@contoso.com"))
    }

    /// When nothing fits, the answer is interaction_required (or no_account when the account is unknown).
    @Test func answersInteractionRequiredWhenNothingFits() async throws {
        let fixture = try await BrokerFixture()
        await expectFailure(.interactionRequired) {
            _ = try await fixture.silent(scopes: ["Files.Read"])
        }
        await expectFailure(.interactionRequired) {
            _ = try await fixture.silent(clientId: "another-app")
        }
        await expectFailure(.interactionRequired) {
            _ = try await fixture.silent(minimumValiditySeconds: 7200)
        }
        await expectFailure(.interactionRequired) {
            _ = try await fixture.silent(forceRefresh: true)
        }
        await expectFailure(.noAccount) {
            _ = try await fixture.silent(account: AccountSelector(username: "nobody@contoso.com"))
        }
        await expectFailure(.noAccount) {
            _ = try await fixture.silent(authority: "https://login.microsoftonline.us/common")
        }
    }

    /// An expired token is never handed out.
    @Test func neverServesAnExpiredToken() async throws {
        let fixture = try await BrokerFixture(documents: [
            CacheFixtures.msalCache(expiresOn: Int64(Date().timeIntervalSince1970) + 200)
        ])
        await expectFailure(.interactionRequired) { _ = try await fixture.silent() }
    }

    /// With two accounts signed in, a request must name one.
    @Test func requiresAnAccountWhenSeveralAreSignedIn() async throws {
        let fixture = try await BrokerFixture(documents: [
            CacheFixtures.msalCache(people: [CacheFixtures.ada, CacheFixtures.alan])
        ])
        await expectFailure(.invalidParams) { _ = try await fixture.silent(account: nil) }
        let alan = try await fixture.silent(account: AccountSelector(username: "alan@contoso.com"))
        #expect(alan.account.username == "alan@contoso.com")
    }

    /// Bad input is refused with the field named: client id, scopes, authority.
    @Test(arguments: [
        ("", ["s"] as [String]?, CacheFixtures.authority, "params.authParameters.clientId"),
        ("app id", ["s"], CacheFixtures.authority, "params.authParameters.clientId"),
        ("app", [], CacheFixtures.authority, "params.authParameters.requestedScopes"),
        ("app", nil, CacheFixtures.authority, "params.authParameters.requestedScopes"),
        (
            "app", ["openid profile", "offline_access"], CacheFixtures.authority,
            "params.authParameters.requestedScopes"
        ),
        ("app", ["offline_access"], "https://idp.example.com/realms/dev", "params.authParameters.requestedScopes"),
        ("app", ["s"], "http://login.example.com/tenant", "params.authParameters.authority"),
        ("app", ["s"], "not a url", "params.authParameters.authority"),
        ("app", ["s"], "https://login.microsoftonline.com/", "params.authParameters.authority"),
        ("app", ["s"], "https://idp.example.com/?q=1", "params.authParameters.authority"),
    ])
    func refusesBadRequests(clientId: String, scopes: [String]?, authority: String, field: String) async throws {
        let fixture = try await BrokerFixture()
        await #expect {
            _ = try await fixture.silent(clientId: clientId, authority: authority, scopes: scopes)
        } throws: { error in
            let failure = error as? BrokerFailure
            return failure?.code == .invalidParams && failure?.details.field == field
        }
    }

    /// The synchronous cache path answers only fresh hits (whose secret is in memory, once a first answer read it
    /// from the store) and leaves everything else to the async path.
    @Test func cachedTokenAnswersOnlyFreshHits() async throws {
        let fixture = try await BrokerFixture()
        let params = { (scopes: [String]) in
            AcquireTokenSilentlyParams(
                authParameters: AuthParameters(
                    clientId: CacheFixtures.clientId,
                    authority: CacheFixtures.authority,
                    requestedScopes: scopes
                )
            )
        }
        let mail = params(["https://graph.microsoft.com/Mail.Read"])
        #expect(try fixture.broker.cachedToken(mail, caller: fixture.caller) == nil)  // its secret is in the store
        _ = try await fixture.broker.acquireTokenSilently(mail, caller: fixture.caller)
        #expect(try fixture.broker.cachedToken(mail, caller: fixture.caller) != nil)
        #expect(try fixture.broker.cachedToken(params(["Files.Read"]), caller: fixture.caller) == nil)
    }
}
