import BrokerCache
import BrokerCore
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Logging
import Testing

/// A broker over an in-memory store, with captured logs and a test clock (which starts at the real time, as the
/// cache fixtures' expiry times do).
struct BrokerFixture {
    let broker: TokenBroker
    let clock = TestClock(start: Date())
    let store: InMemoryTokenStore
    let logs: LogCapture
    /// The identity provider the broker talks to: by default one that refuses every refresh token.
    let transport: ScriptedTransport
    let caller = Caller(pid: 4242, uid: getuid(), gid: getgid(), executable: "/usr/bin/test-app")

    init(
        documents: [JSONValue] = [CacheFixtures.msalCache()],
        auditWindow: Duration = .seconds(60),
        transport: ScriptedTransport = .refusingProvider(),
        configuration: BrokerConfiguration = BrokerConfiguration()
    ) async throws {
        self.transport = transport
        var entries: [CacheEntry] = []
        for document in documents {
            entries += try MSALCacheDocument.read(Data(CacheFixtures.text(document).utf8)).entries
        }
        store = InMemoryTokenStore(entries)
        logs = LogCapture()
        broker = TokenBroker(
            cache: try await TokenCache(store: store),
            configuration: configuration,
            logger: logs.logger(label: "tokenbroker"),
            audit: AuditLog(logger: logs.logger(label: "tokenbroker.audit"), window: auditWindow, clock: clock),
            transport: transport,
            clock: clock
        )
    }

    /// The entries in the store once the writes in line are done (a refresh answers before its write is).
    func storedEntries() async -> [CacheEntry] {
        await broker.finishRefreshes()
        return store.entries
    }

    func silent(
        clientId: String = CacheFixtures.clientId,
        authority: String? = CacheFixtures.authority,
        scopes: [String]? = ["https://graph.microsoft.com/User.Read"],
        resource: String? = nil,
        account: AccountSelector? = AccountSelector(username: "ada@contoso.com"),
        minimumValiditySeconds: Int? = nil,
        forceRefresh: Bool? = nil,
        caller: Caller? = nil
    ) async throws(BrokerFailure) -> TokenResult {
        try await broker.acquireTokenSilently(
            AcquireTokenSilentlyParams(
                authParameters: AuthParameters(
                    clientId: clientId,
                    authority: authority,
                    requestedScopes: scopes,
                    resource: resource,
                    account: account,
                    forceRefresh: forceRefresh,
                    minimumValiditySeconds: minimumValiditySeconds
                ),
                correlationId: "corr-1"
            ),
            caller: caller ?? self.caller
        ).brokerTokenResponse
    }
}

/// Expects `body` to fail with a ``BrokerFailure`` of `code`.
func expectFailure(
    _ code: ErrorCode,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("expected \(code), but it succeeded", sourceLocation: sourceLocation)
    } catch let failure as BrokerFailure {
        #expect(failure.code == code, "\(failure)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
    }
}
