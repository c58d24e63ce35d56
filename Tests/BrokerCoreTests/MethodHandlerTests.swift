import BrokerCache
import BrokerCore
import BrokerProtocol
import BrokerTestSupport
import Testing

/// The broker's method handlers: one for every method of the table, and the silent one answering from memory
/// when it can and handing its lookup on when it cannot.
struct MethodHandlerTests {
    private static func params(account: String = "ada@contoso.com") -> AcquireTokenSilentlyParams {
        AcquireTokenSilentlyParams(
            authParameters: AuthParameters(
                clientId: CacheFixtures.clientId,
                authority: CacheFixtures.authority,
                requestedScopes: ["https://graph.microsoft.com/User.Read"],
                account: AccountSelector(username: account)
            ),
            correlationId: "corr-1"
        )
    }

    @Test func handlesEveryMethodOfTheTable() async throws {
        let fixture = try await BrokerFixture()
        let handlers = fixture.broker.handlers(status: { preconditionFailure("status is not asked for") })
        // The grants' methods are the managed-identity endpoint's (it binds their listeners): BrokerManagedIdentity.
        #expect(handlers.served == MethodName.allCases.filter { !MethodName.grantMethods.contains($0) })
        #expect(handlers.handler(for: Methods.ImportCache.self) != nil)
    }

    /// A fresh cached token is answered now, without a task, once its secret is in memory; the first answer, whose
    /// secret the store keeps (as the daemon's does), reads it in a task, off the event loop.
    @Test func answersAFreshTokenNow() async throws {
        let fixture = try await BrokerFixture()
        let first = try fixture.broker.answerSilently(Self.params(), caller: fixture.caller)
        guard case .later = first else {
            Issue.record("a token whose secret only the store holds was answered on the event loop")
            return
        }
        #expect(try await first.value(owner: .none).brokerTokenResponse.tokenSource == .cache)
        guard case .now(let result) = try fixture.broker.answerSilently(Self.params(), caller: fixture.caller) else {
            Issue.record("a fresh token was not answered at once")
            return
        }
        #expect(result.brokerTokenResponse.tokenSource == .cache)
        #expect(result.brokerTokenResponse.correlationId == "corr-1")
    }

    /// A stale token is refreshed later, from what the lookup found; the refresh is the provider's answer.
    @Test func handsAStaleLookupToTheTask() async throws {
        let transport = ScriptedTransport.provider { _ in RefreshTests.issued("later") }
        let fixture = try await BrokerFixture(documents: [RefreshTests.staleCache()], transport: transport)
        let answer = try fixture.broker.answerSilently(Self.params(), caller: fixture.caller)
        guard case .later = answer else {
            Issue.record("a stale token was answered at once")
            return
        }
        #expect(transport.sent.isEmpty)
        let result = try await answer.value(owner: .none)
        #expect(result.brokerTokenResponse.accessToken.reveal() == "AT-NEW-later")
        #expect(result.brokerTokenResponse.tokenSource == .identityProvider)
    }

    /// What no provider could change fails at once, on the event loop: an unknown account, bad params.
    @Test func failsAtOnceWhatNoRefreshCouldChange() async throws {
        let fixture = try await BrokerFixture()
        await expectFailure(.noAccount) {
            _ = try fixture.broker.answerSilently(Self.params(account: "nobody@contoso.com"), caller: fixture.caller)
        }
        var bad = Self.params()
        bad.authParameters.clientId = ""
        await expectFailure(.invalidParams) { _ = try fixture.broker.answerSilently(bad, caller: fixture.caller) }
    }
}

extension MethodName {
    /// The methods the managed-identity endpoint serves beside the broker's.
    static let grantMethods: [MethodName] = [
        Methods.CreateGrant.name, Methods.ListGrants.name, Methods.RevokeGrant.name,
    ]
}
