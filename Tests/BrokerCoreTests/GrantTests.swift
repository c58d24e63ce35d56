import BrokerCache
import BrokerCore
import BrokerProtocol
import BrokerTestSupport
import BrokerTime
import Foundation
import Testing

/// Grants of the managed-identity endpoint: what they let a holder ask for, and nothing more.
struct GrantTests {
    private let graph = "https://graph.microsoft.com"

    private func create(
        _ fixture: BrokerFixture,
        resources: [String]? = ["https://graph.microsoft.com"],
        scopes: [String]? = nil,
        label: String? = "devcontainer",
        lifetime: Int? = nil
    ) async throws -> (grant: GrantRecord, secret: Secret) {
        let plan = try fixture.broker.planGrant(
            CreateGrantParams(
                clientId: CacheFixtures.clientId,
                authority: CacheFixtures.authority,
                resources: resources,
                scopes: scopes,
                lifetimeSeconds: lifetime,
                label: label
            )
        )
        #expect(plan.listen == .loopback)
        return try await fixture.broker.createGrant(
            plan,
            boundAt: plan.listen.with(port: 41234),
            caller: fixture.caller,
            correlationId: "corr-grant"
        )
    }

    /// A grant names the only account, hands out its cached token for the resource (with or without a trailing
    /// slash), and its secret finds it; another secret finds nothing.
    @Test func servesItsResourceFromTheCache() async throws {
        let fixture = try await BrokerFixture()
        let (grant, secret) = try await create(fixture)
        #expect(grant.accountIdentifier == CacheFixtures.ada.homeAccountId)
        #expect(grant.username == "ada@contoso.com")
        #expect(grant.expiresAt == fixture.clock.nowSeconds + 28_800)
        #expect(grant.listen.endpointURL == "http://127.0.0.1:41234/msi/token")
        #expect(fixture.broker.grants.holder(of: secret.reveal()) == grant)
        #expect(fixture.broker.grants.holder(of: secret.reveal() + "x") == nil)
        #expect(fixture.broker.grants.holder(of: "") == nil)
        // A first answer reads the token's secret from the store (off the event loop); from then on it is in memory.
        let cached = try await fixture.silent()
        for resource in [graph, graph + "/"] {
            let caller = Caller(pid: 0, uid: 0, gid: 0, executable: nil, via: .endpoint, grant: grant.label)
            guard
                case .now(let result) = try fixture.broker.answer(
                    grant,
                    resource: resource,
                    caller: caller,
                    correlationId: "c"
                )
            else {
                Issue.record("a cached token was not answered at once")
                return
            }
            #expect(result.brokerTokenResponse.accessToken == cached.accessToken)
        }
        await fixture.broker.audit.written()
        let audit = fixture.logs.lines(containing: "token issued").joined()
        #expect(audit.contains("caller_via=endpoint") && audit.contains("caller_grant=devcontainer"))
        #expect(!fixture.logs.text.contains(secret.reveal()))
    }

    /// A resource the grant does not name is refused, before any lookup.
    @Test func refusesWhatItDoesNotCover() async throws {
        let fixture = try await BrokerFixture()
        let (grant, _) = try await create(fixture, resources: nil, scopes: ["https://graph.microsoft.com/User.Read"])
        #expect(
            grant.ask(for: "https://graph.microsoft.com/User.Read") == .scope("https://graph.microsoft.com/User.Read")
        )
        #expect(grant.ask(for: graph) == nil)
        #expect(grant.ask(for: "https://vault.azure.net") == nil)
        let caller = fixture.caller
        await expectFailure(.permissionDenied) {
            _ = try fixture.broker.answer(
                grant,
                resource: "https://vault.azure.net",
                caller: caller,
                correlationId: "c"
            )
        }
    }

    /// Every bad field is refused with its path; an unknown account is no_account; nothing is kept.
    @Test func refusesBadParams() async throws {
        let fixture = try await BrokerFixture()
        let bad: [(CreateGrantParams, String)] = [
            (CreateGrantParams(clientId: CacheFixtures.clientId), "params.resources"),
            (CreateGrantParams(clientId: CacheFixtures.clientId, resources: ["a b"]), "params.resources"),
            (
                CreateGrantParams(clientId: CacheFixtures.clientId, resources: [graph], lifetimeSeconds: 0),
                "params.lifetimeSeconds"
            ),
            (
                CreateGrantParams(clientId: CacheFixtures.clientId, resources: [graph], lifetimeSeconds: 2_592_001),
                "params.lifetimeSeconds"
            ),
            (
                CreateGrantParams(clientId: CacheFixtures.clientId, resources: [graph], label: "a\u{1b}[31m"),
                "params.label"
            ),
            (
                CreateGrantParams(clientId: CacheFixtures.clientId, resources: [graph], listen: "0.0.0.0:80"),
                "params.listen"
            ),
            (
                CreateGrantParams(clientId: CacheFixtures.clientId, resources: [graph], listen: "[::]:80"),
                "params.listen"
            ),
            (
                CreateGrantParams(clientId: CacheFixtures.clientId, resources: [graph], listen: "localhost:80"),
                "params.listen"
            ),
            (
                CreateGrantParams(clientId: CacheFixtures.clientId, resources: [graph], listen: "127.0.0.1:99999"),
                "params.listen"
            ),
        ]
        for (params, field) in bad {
            do {
                _ = try fixture.broker.planGrant(params)
                Issue.record("accepted \(field)")
            } catch {
                #expect(error.code == .invalidParams && error.details.field == field, "\(error)")
            }
        }
        await expectFailure(.noAccount) {
            _ = try fixture.broker.planGrant(
                CreateGrantParams(
                    clientId: CacheFixtures.clientId,
                    resources: [graph],
                    account: AccountSelector(username: "nobody@contoso.com")
                )
            )
        }
        #expect(fixture.broker.grants.all.isEmpty)
    }

    /// Revoking by id or by a unique label stops the secret at once; a label two grants share is refused.
    @Test func revokesByIdOrUniqueLabel() async throws {
        let fixture = try await BrokerFixture()
        let (first, firstSecret) = try await create(fixture, label: "same")
        let (second, _) = try await create(fixture, label: "same")
        let (third, thirdSecret) = try await create(fixture, label: "other")
        await expectFailure(.invalidParams) {
            _ = try await fixture.broker.revokeGrant(RevokeGrantParams(grant: "same"), caller: fixture.caller)
        }
        #expect(
            try await fixture.broker.revokeGrant(RevokeGrantParams(grant: first.id), caller: fixture.caller) == first
        )
        #expect(
            try await fixture.broker.revokeGrant(RevokeGrantParams(grant: "other"), caller: fixture.caller) == third
        )
        #expect(fixture.broker.grants.holder(of: firstSecret.reveal()) == nil)
        #expect(fixture.broker.grants.holder(of: thirdSecret.reveal()) == nil)
        #expect(fixture.broker.grants.all.map(\.record) == [second])
        await expectFailure(.invalidParams) {
            _ = try await fixture.broker.revokeGrant(RevokeGrantParams(grant: "gone"), caller: fixture.caller)
        }
        await fixture.broker.audit.written()
        #expect(fixture.logs.lines(containing: "grant revoked").count == 2)
    }

    /// An expired grant is no longer listed; its secret still names it, so the endpoint can say it expired.
    @Test func expiresOnTime() async throws {
        let fixture = try await BrokerFixture()
        let (grant, secret) = try await create(fixture, lifetime: 60)
        fixture.clock.advance(by: .seconds(59))
        #expect(fixture.broker.grants.all.count == 1)
        fixture.clock.advance(by: .seconds(1))
        #expect(fixture.broker.grants.all.isEmpty)
        #expect(fixture.broker.grants.holder(of: secret.reveal())?.expiresAt == grant.expiresAt)
        // A day later it is forgotten.
        try await fixture.broker.grants.dropExpired()
        #expect(fixture.broker.grants.holder(of: secret.reveal()) != nil)
        fixture.clock.advance(by: .seconds(86_400))
        try await fixture.broker.grants.dropExpired()
        #expect(fixture.broker.grants.holder(of: secret.reveal()) == nil)
    }

    /// Grants are kept sealed in the cache's database: a new broker over it serves them; an expired one is
    /// dropped from the store when it loads.
    @Test func survivesARestartOverTheSQLiteStore() async throws {
        let directory = try TemporaryDirectory()
        let location = CacheLocation(stateDirectory: directory.url)
        let fixture = try await BrokerFixture()
        let entries = try MSALCacheDocument.read(Data(CacheFixtures.text(CacheFixtures.msalCache()).utf8)).entries
        let clock = TestClock(start: Date())
        func broker() async throws -> TokenBroker {
            let cache = try await TokenCache(store: try location.openStore())
            try await cache.commit(CacheChanges(upserts: entries))
            return TokenBroker(cache: cache, logger: LogCapture().logger(), clock: clock)
        }
        let first = try await broker()
        let plan = try first.planGrant(
            CreateGrantParams(
                clientId: CacheFixtures.clientId,
                resources: [graph],
                lifetimeSeconds: 3600,
                label: "kept"
            )
        )
        let shortPlan = try first.planGrant(
            CreateGrantParams(clientId: CacheFixtures.clientId, resources: [graph], lifetimeSeconds: 60, label: "short")
        )
        let (kept, secret) = try await first.createGrant(
            plan,
            boundAt: plan.listen,
            caller: fixture.caller,
            correlationId: "c"
        )
        _ = try await first.createGrant(shortPlan, boundAt: plan.listen, caller: fixture.caller, correlationId: "c")
        clock.advance(by: .seconds(61))
        let second = try await broker()
        #expect(try await second.grants.load().isEmpty)
        #expect(second.grants.all.map(\.record) == [kept])
        #expect(second.grants.holder(of: secret.reveal()) == kept)
        let stored = try await location.openStore().loadGrants()
        #expect(stored.records.count == 1 && stored.damaged.isEmpty)
        for file in try FileManager.default.contentsOfDirectory(
            atPath: location.databaseURL.deletingLastPathComponent().path
        ) {
            let bytes = try Data(contentsOf: location.databaseURL.deletingLastPathComponent().appending(path: file))
            #expect(bytes.range(of: Data("kept".utf8)) == nil, "\(file) holds a grant in the clear")
        }
    }

    /// `discardAccessToken` drops exactly the token given; the next request must refresh.
    @Test func discardsTheRefusedTokenOnly() async throws {
        let fixture = try await BrokerFixture()
        let token = try await fixture.silent().accessToken
        let before = fixture.broker.cacheCounts.accessTokens
        // One that ends as the cached one does (its length and last 64 bytes, which find the candidates) is not it.
        let lookalike = Secret((token.reveal().first == "x" ? "y" : "x") + token.reveal().dropFirst())
        let none = try await fixture.broker.discardAccessToken(
            DiscardAccessTokenParams(accessToken: lookalike),
            caller: fixture.caller
        )
        #expect(!none.discarded)
        #expect(fixture.broker.cacheCounts.accessTokens == before)
        let first = try await fixture.broker.discardAccessToken(
            DiscardAccessTokenParams(accessToken: token),
            caller: fixture.caller
        )
        #expect(first.discarded)
        #expect(fixture.broker.cacheCounts.accessTokens == before - 1)
        let again = try await fixture.broker.discardAccessToken(
            DiscardAccessTokenParams(accessToken: token),
            caller: fixture.caller
        )
        #expect(!again.discarded)
        await expectFailure(.interactionRequired) { _ = try await fixture.silent() }
        await expectFailure(.invalidParams) {
            _ = try await fixture.broker.discardAccessToken(
                DiscardAccessTokenParams(accessToken: Secret("")),
                caller: fixture.caller
            )
        }
        await fixture.broker.audit.written()
        #expect(fixture.logs.lines(containing: "access token discarded").count == 1)
        #expect(!fixture.logs.text.contains(token.reveal()))
    }

    /// Listen addresses: literal IPs of this host only, never the wildcard, with a port.
    @Test func parsesListenAddresses() {
        let good = ["127.0.0.1:0": "127.0.0.1:0", "172.17.0.1:8181": "172.17.0.1:8181", "[::1]:80": "[::1]:80"]
        for (text, shown) in good {
            #expect((try? ListenAddress.parse(text).get())?.description == shown, "\(text)")
        }
        for text in [
            "0.0.0.0:1", "[::]:1", "host:1", "127.0.0.1", "::1:80", "127.0.0.1:-1", "127.0.0.1:65536", "224.0.0.1:1",
            "[ff02::1]:1", "[::ffff:0.0.0.0]:1", "[::ffff:127.0.0.1]:1", "127.0.0.1:+1",
        ] {
            #expect((try? ListenAddress.parse(text).get()) == nil, "\(text)")
        }
        #expect((try? ListenAddress.parse("[FD00:0::1]:8").get())?.description == "[fd00::1]:8")
        #expect((try? ListenAddress.parse("127.0.0.1:0").get())?.isLoopback == true)
        #expect((try? ListenAddress.parse("10.0.0.1:0").get())?.isLoopback == false)
    }
}
