import BrokerCore
import BrokerOAuth
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Synchronization
import Testing

@testable import BrokerCache

/// The silent refresh path against a scripted token endpoint (the integration tests run it against real
/// providers): MSAL's order of refresh tokens, FOCI, rotation, fallback, single flight.
struct RefreshTests {
    static let now = Int64(Date().timeIntervalSince1970)
    static let family = "22222222-aaaa-4bbb-8ccc-00000000000f"
    static let clientInfo = Base64URL.encode(
        Array(#"{"uid":"\#(CacheFixtures.ada.oid)","utid":"\#(CacheFixtures.tenant)"}"#.utf8)
    )

    /// A token answer for Ada, numbered.
    static func issued(_ label: String, foci: Bool = false, refreshIn: Int? = nil) -> ScriptedTransport.Answer {
        var body: [String: Any] = [
            "access_token": "AT-NEW-\(label)", "token_type": "Bearer", "expires_in": 3600, "ext_expires_in": 7200,
            "refresh_token": "RT-NEW-\(label)", "client_info": clientInfo,
            "scope": "https://graph.microsoft.com/User.Read https://graph.microsoft.com/Mail.Read",
        ]
        if foci { body["foci"] = "1" }
        if let refreshIn { body["refresh_in"] = refreshIn }
        return ScriptedTransport.json(200, body)
    }

    /// A cache whose access token needs a refresh (200 s left: inside the 5-minute buffer).
    static func staleCache(familyId: String? = nil, extra: [String: JSONValue] = [:]) -> JSONValue {
        CacheFixtures.msalCache(expiresOn: now + 200, familyId: familyId, extraAccessTokenFields: extra)
    }

    func refreshTokens(_ fixture: BrokerFixture) async -> [String] {
        await fixture.storedEntries().compactMap { entry -> String? in
            guard case .refreshToken(let token) = entry else { return nil }
            return token.secret.reveal()
        }.sorted()
    }

    @Test func refreshesWithTheAppsTokenAndStoresTheRotatedOne() async throws {
        let transport = ScriptedTransport.provider { request in
            request.formFields["refresh_token"] == "RT-SECRET-1-\(CacheFixtures.ada.oid)"
                ? Self.issued("1") : ScriptedTransport.json(400, ["error": "invalid_grant"])
        }
        let fixture = try await BrokerFixture(documents: [Self.staleCache()], transport: transport)
        let result = try await fixture.silent()
        #expect(result.tokenSource == .identityProvider)
        #expect(result.accessToken.reveal() == "AT-NEW-1")
        #expect(result.account.username == "ada@contoso.com")
        #expect(result.extendedExpiresOn != nil)
        // The rotated token replaced the old one, on disk.
        #expect(await refreshTokens(fixture) == ["RT-NEW-1"])
        let sent = transport.sent.last
        #expect(sent?.formFields["client_id"] == CacheFixtures.clientId)
        #expect(sent?.formFields["client_info"] == "1")
        #expect(sent?.formFields["scope"]?.contains("offline_access") == true)
        let anchor = sent?.headers.first { $0.name == "X-AnchorMailbox" }?.value
        #expect(anchor == "Oid:\(CacheFixtures.ada.oid)@\(CacheFixtures.tenant)")
        // Then the cache answers.
        let again = try await fixture.silent()
        #expect(again.tokenSource == .cache && again.accessToken.reveal() == "AT-NEW-1")
        #expect(transport.count(endingIn: "/token") == 1)
    }

    @Test func aNewFamilyAppUsesTheFamilyRefreshToken() async throws {
        let transport = ScriptedTransport.provider { request in
            request.formFields["client_id"] == Self.family ? Self.issued("y", foci: true) : Self.issued("x")
        }
        let fixture = try await BrokerFixture(documents: [CacheFixtures.msalCache(familyId: "1")], transport: transport)
        let result = try await fixture.silent(clientId: Self.family)
        #expect(result.accessToken.reveal() == "AT-NEW-y")
        #expect(transport.sent.last?.formFields["refresh_token"] == "RT-SECRET-1-\(CacheFixtures.ada.oid)")
        // The new family token replaced the one redeemed (the provider may have rotated it out).
        #expect(await refreshTokens(fixture) == ["RT-NEW-y"])
        // The first app now refreshes through the family too.
        let first = try await fixture.silent(clientId: CacheFixtures.clientId, forceRefresh: true)
        #expect(first.accessToken.reveal() == "AT-NEW-x")
        #expect(transport.sent.last?.formFields["refresh_token"] == "RT-NEW-y")
    }

    @Test func clientMismatchMarksTheAppOutsideTheFamily() async throws {
        let transport = ScriptedTransport.provider { _ in
            ScriptedTransport.json(
                400,
                ["error": "invalid_grant", "suberror": "client_mismatch", "error_description": "AADSTS70000"]
            )
        }
        let fixture = try await BrokerFixture(documents: [CacheFixtures.msalCache(familyId: "1")], transport: transport)
        await expectFailure(.interactionRequired) { _ = try await fixture.silent(clientId: Self.family) }
        #expect(transport.count(endingIn: "/token") == 1)
        let metadata = fixture.store.entries.compactMap { entry -> AppMetadata? in
            guard case .appMetadata(let metadata) = entry, metadata.clientId == Self.family else { return nil }
            return metadata
        }
        #expect(metadata.count == 1 && metadata.first?.familyId == nil)
        // Known to be outside the family, the app no longer tries the family's token; the token stays.
        await expectFailure(.interactionRequired) { _ = try await fixture.silent(clientId: Self.family) }
        #expect(transport.count(endingIn: "/token") == 1)
        #expect(await refreshTokens(fixture).count == 1)
    }

    @Test func aDeadRefreshTokenIsForgottenOthersAreKept() async throws {
        let answer = Mutex<[String: Any]>(["error": "invalid_grant", "suberror": "consent_required"])
        let transport = ScriptedTransport.provider { _ in ScriptedTransport.json(400, answer.withLock { $0 }) }
        let fixture = try await BrokerFixture(documents: [Self.staleCache()], transport: transport)
        await expectFailure(.interactionRequired) { _ = try await fixture.silent() }
        #expect(await refreshTokens(fixture).count == 1)
        answer.withLock { $0 = ["error": "invalid_grant", "suberror": "bad_token"] }
        await expectFailure(.interactionRequired) { _ = try await fixture.silent(scopes: ["Files.Read"]) }
        #expect(await refreshTokens(fixture).isEmpty)
    }

    @Test func theCachedTokenServesWhileTheProviderIsDown() async throws {
        let transport = ScriptedTransport.provider { _ in ScriptedTransport.json(503, [:]) }
        var configuration = BrokerConfiguration()
        configuration.retryPolicy = RetryPolicy(attempts: 1)
        let fixture = try await BrokerFixture(
            documents: [Self.staleCache(extra: ["refresh_on": .string(String(Self.now - 10))])],
            transport: transport,
            configuration: configuration
        )
        let result = try await fixture.silent()
        #expect(result.tokenSource == .cache)
        #expect(result.accessToken.reveal().hasPrefix("eyJ"))
        #expect(await refreshTokens(fixture).count == 1)
        // Unless the app insists on a new one.
        await expectFailure(.serverError) { _ = try await fixture.silent(forceRefresh: true) }
        // Or needs more validity than the cached token has.
        await expectFailure(.serverError) { _ = try await fixture.silent(minimumValiditySeconds: 600) }
    }

    @Test func aRefreshDueTokenIsRefreshedProactively() async throws {
        let transport = ScriptedTransport.provider { _ in Self.issued("p", refreshIn: 1800) }
        let fixture = try await BrokerFixture(
            documents: [
                CacheFixtures.msalCache(extraAccessTokenFields: ["refresh_on": .string(String(Self.now - 10))])
            ],
            transport: transport
        )
        let result = try await fixture.silent()
        #expect(result.tokenSource == .identityProvider)
        #expect(result.refreshOn.map { $0 / 1000 - Self.now } ?? 0 >= 1790)
    }

    @Test func concurrentRequestsShareOneRefresh() async throws {
        // The provider answers once every other request has joined the refresh under way (not after a guess at how
        // long that takes); a request that started a refresh of its own would leave it waiting out eventTimeout.
        let joined = Mutex<(@Sendable () -> Int)?>(nil)
        let transport = ScriptedTransport.provider { _ in
            let deadline = ContinuousClock.now + eventTimeout
            while (joined.withLock { $0?() } ?? 0) < 49, ContinuousClock.now < deadline { usleep(1_000) }
            return Self.issued("shared")
        }
        let fixture = try await BrokerFixture(documents: [Self.staleCache()], transport: transport)
        let broker = fixture.broker
        joined.withLock { $0 = { broker.refreshCounts.joined } }
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<50 { group.addTask { try await fixture.silent().accessToken.reveal() } }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(tokens.count == 50 && Set(tokens) == ["AT-NEW-shared"])
        #expect(transport.count(endingIn: "/token") == 1)
        let counts = fixture.broker.refreshCounts
        #expect(counts.started == 1 && counts.joined == 49)
    }

    /// Requests for other scopes, and another app of the family, that need the refresh token being redeemed wait
    /// for it, then redeem the one it rotated in: this provider, like one that detects reuse, revokes the sign-in
    /// when a rotated-out token comes back.
    @Test(arguments: [false, true])
    func aRefreshTokenIsRedeemedOnceAtATime(family: Bool) async throws {
        let valid = Mutex<(token: String, issued: Int)>(("RT-SECRET-1-\(CacheFixtures.ada.oid)", 0))
        let transport = ScriptedTransport.provider { request in
            valid.withLock { valid in
                guard request.formFields["refresh_token"] == valid.token else {
                    valid.token = "revoked"
                    return ScriptedTransport.json(400, ["error": "invalid_grant", "suberror": "bad_token"])
                }
                valid.issued += 1
                valid.token = "RT-NEW-\(valid.issued)"
                return Self.issued("\(valid.issued)", foci: family)
            }
        }
        let fixture = try await BrokerFixture(
            documents: [Self.staleCache(familyId: family ? "1" : nil)],
            transport: transport
        )
        // The first redemption is answered once the two other requests wait for their turn (were they let through,
        // they would be held too, having presented the same token, and fail after eventTimeout).
        let broker = fixture.broker
        transport.holdAnswers(endingIn: "/token") { broker.refreshCounts.waitedForToken >= 2 }
        let requests: [(clientId: String, scopes: [String])] = [
            (CacheFixtures.clientId, ["https://graph.microsoft.com/User.Read"]),
            (CacheFixtures.clientId, ["Files.Read"]),
            (family ? Self.family : CacheFixtures.clientId, ["Mail.Read"]),
        ]
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for request in requests {
                group.addTask {
                    try await fixture.silent(clientId: request.clientId, scopes: request.scopes).accessToken.reveal()
                }
            }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(Set(tokens) == ["AT-NEW-1", "AT-NEW-2", "AT-NEW-3"])
        #expect(transport.count(endingIn: "/token") == 3)
        // The sign-in lives on: the last rotated token is the one kept, and it still works.
        #expect(await refreshTokens(fixture) == ["RT-NEW-3"])
        let next = try await fixture.silent(scopes: ["Calendars.Read"])
        #expect(next.accessToken.reveal() == "AT-NEW-4")
    }

    /// A refresh of the fixture's stale token, once it is at the provider, its answer held until `release`; and the
    /// refresh token a sign-in puts in the same entry meanwhile (`RT-SIGNED-IN`), for the test to commit.
    private func heldRefresh(
        _ fixture: BrokerFixture,
        _ transport: ScriptedTransport
    ) async throws -> (
        refresh: Task<TokenResult, any Error>, release: @Sendable () -> Void, cache: TokenCache, signIn: RefreshToken
    ) {
        // The hold's first look says the refresh is at the provider.
        let hold = Mutex((arrived: false, released: false))
        transport.holdAnswers(endingIn: "/token") {
            hold.withLock { hold in
                hold.arrived = true
                return hold.released
            }
        }
        let refresh = Task { try await fixture.silent() }
        try await waitUntil("the refresh is at the provider") { hold.withLock { $0.arrived } }
        let cache = try #require(fixture.broker.vault.cache)
        var signIn = try #require(cache.read { $0.refreshTokens.values.first })
        signIn.secret = Secret("RT-SIGNED-IN")
        return (refresh, { hold.withLock { $0.released = true } }, cache, signIn)
    }

    /// A sign-in that replaced the refresh token while the provider answered its refresh wins: the refresh keeps
    /// nothing of the older session's answer, and redeems the sign-in's token instead.
    @Test func aRefreshKeepsNothingOnceASignInReplacedItsToken() async throws {
        // The refresh tokens the provider honours, and how many answers it gave.
        let provider = Mutex<(valid: Set<String>, issued: Int)>((["RT-SECRET-1-\(CacheFixtures.ada.oid)"], 0))
        let transport = ScriptedTransport.provider { request in
            provider.withLock { provider in
                guard let presented = request.formFields["refresh_token"], provider.valid.remove(presented) != nil
                else { return ScriptedTransport.json(400, ["error": "invalid_grant", "suberror": "bad_token"]) }
                provider.issued += 1
                provider.valid.insert("RT-NEW-\(provider.issued)")
                return Self.issued("\(provider.issued)")
            }
        }
        let fixture = try await BrokerFixture(documents: [Self.staleCache()], transport: transport)
        let (refresh, release, cache, signIn) = try await heldRefresh(fixture, transport)
        // The user signs in again meanwhile: a new refresh token in the same entry.
        provider.withLock { _ = $0.valid.insert("RT-SIGNED-IN") }
        try await cache.commit(CacheChanges(upserts: [.refreshToken(signIn)]))
        release()
        #expect(try await refresh.value.accessToken.reveal() == "AT-NEW-2")
        #expect(transport.sent.last?.formFields["refresh_token"] == "RT-SIGNED-IN")
        #expect(await refreshTokens(fixture) == ["RT-NEW-2"])
    }

    /// A refresh token the provider calls dead is removed only while it is the one cached: a sign-in's token in its
    /// place, even one still on its way to the disk, stays, and the refresh redeems it.
    @Test func aDeadTokensSuccessorFromASignInIsKeptAndRedeemed() async throws {
        let transport = ScriptedTransport.provider { request in
            request.formFields["refresh_token"] == "RT-SIGNED-IN"
                ? Self.issued("after-sign-in")
                : ScriptedTransport.json(400, ["error": "invalid_grant", "suberror": "bad_token"])
        }
        let fixture = try await BrokerFixture(documents: [Self.staleCache()], transport: transport)
        let (refresh, release, cache, signIn) = try await heldRefresh(fixture, transport)
        let releaseWrites = fixture.store.holdWrites()
        let signInCommit = Task { try await cache.commit(CacheChanges(upserts: [.refreshToken(signIn)])) }
        try await waitUntil("the sign-in's write is in line") { cache.isWriting }
        release()
        // The dead token's removal comes behind the sign-in, before the disk took it.
        try await waitUntil("the removal is in line behind the sign-in") { cache.writesInLine == 2 }
        releaseWrites()
        try await signInCommit.value
        #expect(try await refresh.value.accessToken.reveal() == "AT-NEW-after-sign-in")
        #expect(transport.sent.last?.formFields["refresh_token"] == "RT-SIGNED-IN")
        #expect(await refreshTokens(fixture) == ["RT-NEW-after-sign-in"])
    }

    @Test func aClaimsChallengeGoesToTheProvider() async throws {
        let transport = ScriptedTransport.provider { _ in Self.issued("claims") }
        let fixture = try await BrokerFixture(transport: transport)
        let claims = #"{"access_token":{"acrs":{"essential":true,"value":"c1"}}}"#
        let result = try await fixture.broker.acquireTokenSilently(
            AcquireTokenSilentlyParams(
                authParameters: AuthParameters(
                    clientId: CacheFixtures.clientId,
                    authority: CacheFixtures.authority,
                    requestedScopes: ["https://graph.microsoft.com/User.Read"],
                    account: AccountSelector(username: "ada@contoso.com"),
                    decodedClaims: claims
                )
            ),
            caller: fixture.caller
        ).brokerTokenResponse
        #expect(result.accessToken.reveal() == "AT-NEW-claims")
        #expect(transport.sent.last?.formFields["claims"] == claims)
    }

    @Test func noRefreshTokenMeansSignIn() async throws {
        let fixture = try await BrokerFixture()
        await expectFailure(.interactionRequired) { _ = try await fixture.silent(clientId: "not-seen-before") }
        #expect(fixture.transport.sent.isEmpty)
    }

    @Test func neverLogsTokens() async throws {
        let transport = ScriptedTransport.provider { _ in Self.issued("logged") }
        let fixture = try await BrokerFixture(documents: [Self.staleCache()], transport: transport)
        _ = try await fixture.silent()
        let text = fixture.logs.text
        #expect(!text.isEmpty)
        for secret in ["AT-NEW-logged", "RT-NEW-logged", "RT-SECRET-1"] { #expect(!text.contains(secret), "\(secret)") }
    }
}
