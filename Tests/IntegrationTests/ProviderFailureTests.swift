import BrokerClient
import BrokerOAuth
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

/// The provider misbehaves: down, slow, 503, 429, a revoked or replayed refresh token.
///
/// Each gets the right error or the cached token, and no refresh token is lost that the provider still honours.
@Suite(.serialized) struct ProviderFailureTests {
    let directory: TemporaryDirectory
    let scope = "api://tokenbroker-tests/Things.Read"
    let client = EntraTestProvider.familyClientX

    init() throws {
        directory = try TemporaryDirectory(prefix: "idpfail")
    }

    /// A provider, a daemon that gives up on it after 2 s and remembers a down provider for no time, and Ada
    /// signed in through it.
    func signedIn(
        providerArguments: [String] = ["--token-lifetime", "200"],
        daemonArguments: [String] = []
    ) async throws -> (
        EntraTestProvider, DaemonProcess, Broker
    ) {
        let provider = try await EntraTestProvider.start(in: directory, arguments: providerArguments)
        let daemon = try await DaemonProcess.start(
            in: directory,
            arguments: provider.daemonArguments + ["--idp-timeout", "2", "--idp-unavailable-window", "0"]
                + daemonArguments
        )
        let broker = try await Broker.connect(socketPath: daemon.socketPath)
        try daemon.addBrowserProfile(
            "ada",
            command: [try EntraTestProvider.browser(signingIn: "ada@contoso.example", in: directory)]
        )
        try await signIn(broker, provider)
        return (provider, daemon, broker)
    }

    /// Ada signs in interactively, through the daemon's `ada` browser profile.
    func signIn(_ broker: Broker, _ provider: EntraTestProvider) async throws {
        _ = try await broker.acquireToken(
            InteractiveRequest(
                clientId: client,
                scopes: [scope],
                authority: provider.authority,
                webviewType: .customBrowser,
                browserProfile: "ada"
            )
        ) { _ in }
    }

    func silent(
        _ broker: Broker,
        _ provider: EntraTestProvider,
        scopes: [String]? = nil
    ) async throws(BrokerError)
        -> TokenResult
    {
        try await broker.acquireTokenSilent(
            TokenRequest(clientId: client, scopes: scopes ?? [scope], authority: provider.authority)
        )
    }

    func expectError(_ code: BrokerError.Code, _ body: () async throws -> Void) async -> BrokerError? {
        do {
            try await body()
            Issue.record("expected \(code), got a token")
            return nil
        } catch let error as BrokerError {
            #expect(error.code == code, "\(error.debugDescription)")
            return error
        } catch {
            Issue.record("expected a BrokerError, got \(error)")
            return nil
        }
    }

    func refreshTokenCount(_ broker: Broker) async throws -> Int {
        try await broker.status().cache.refreshTokens
    }

    func stop(_ provider: EntraTestProvider, _ daemon: DaemonProcess, _ broker: Broker) async throws {
        await broker.close()
        #expect(try await daemon.stop() == 0)
        await provider.process.stop()
    }

    /// 503 with Retry-After 0: retried, and the second answer is the token.
    @Test func a503IsRetried() async throws {
        let (provider, daemon, broker) = try await signedIn()
        try await provider.control("fail-next", ["status": 503, "retryAfter": 0, "grantType": "refresh_token"])
        let before = try await provider.tokenRequests()
        let token = try await silent(broker, provider)
        #expect(token.tokenSource == .identityProvider)
        #expect(try await provider.tokenRequests() == before + 2)
        try await stop(provider, daemon, broker)
    }

    /// id tokens that do not verify against the provider's JWKS (signed by another key under its `kid`).
    ///
    /// A refresh's id token that names the account whose refresh token was redeemed is taken on the strength of the
    /// connection it came over (OpenID Connect Core §3.1.3.7, step 6), without its RSA verification. One that names
    /// anyone else is checked, refused, and nothing is handed out, yet the rotated refresh token is kept: the provider
    /// detects reuse, so the next refresh works only if the daemon redeems the new token. A sign-in's id token is
    /// always checked, even when it names the user.
    @Test func aForgedIdTokenIsRefusedUnlessARefreshVouchesForItsAccount() async throws {
        let (provider, daemon, broker) = try await signedIn()
        let ada = try await forcedToken(broker, provider).account
        try await provider.control("forge-id-tokens", ["count": 1])
        let vouched = try await forcedToken(broker, provider)
        #expect(vouched.tokenSource == .identityProvider)
        #expect(vouched.account.identifier == ada.identifier && vouched.account.localAccountId == ada.localAccountId)

        let forged = "0000e7e7-0000-4000-8000-00000000e7e7"
        // The count left says the refresh above took the first forgery.
        let queued = try await provider.control("forge-id-tokens", ["count": 1, "objectId": forged])
        #expect(queued["count"]?.integerValue == 1, "\(queued)")
        let refused = await expectError(.serverError) { try await forced(broker, provider) }
        #expect(refused?.message.contains("id_token was refused") == true, "\(String(describing: refused))")
        #expect(refused?.message.contains("signature does not verify") == true, "\(String(describing: refused))")
        #expect(try await refreshTokenCount(broker) == 1)
        // Nothing of the refused token was kept: the account is Ada's as her last good token said.
        let kept = try await broker.account(forIdentifier: ada.identifier)
        #expect(kept.localAccountId == ada.localAccountId && kept.localAccountId != forged)
        #expect(
            kept.accountClaims?["oid"]?.stringValue == ada.localAccountId,
            "\(String(describing: kept.accountClaims))"
        )
        let next = try await forcedToken(broker, provider)
        #expect(next.tokenSource == .identityProvider)
        #expect(next.account.identifier == ada.identifier && next.account.localAccountId == ada.localAccountId)

        try await provider.control("forge-id-tokens", ["count": 1])
        let forgedSignIn = await expectError(.serverError) { try await signIn(broker, provider) }
        #expect(
            forgedSignIn?.message.contains("signature does not verify") == true,
            "\(String(describing: forgedSignIn))"
        )
        try await stop(provider, daemon, broker)
    }

    func forcedToken(_ broker: Broker, _ provider: EntraTestProvider) async throws -> TokenResult {
        try await broker.acquireTokenSilent(
            TokenRequest(clientId: client, scopes: [scope], authority: provider.authority, forceRefresh: true)
        )
    }

    func forced(_ broker: Broker, _ provider: EntraTestProvider) async throws {
        _ = try await forcedToken(broker, provider)
    }

    /// 429 asking for two minutes: not waited out.
    ///
    /// The cached token, still valid for minutes, is handed out; an app that insists on a new one gets `throttled` with
    /// the delay, and identical requests are then answered without asking the provider. The refresh token stays, and
    /// another request gets through.
    @Test func a429IsHonoured() async throws {
        let (provider, daemon, broker) = try await signedIn()
        try await provider.control(
            "fail-next",
            ["status": 429, "error": "too_many_requests", "retryAfter": 120, "grantType": "refresh_token"]
        )
        let before = try await provider.tokenRequests()
        #expect(try await silent(broker, provider).tokenSource == .cache)
        let error = await expectError(.throttled) { try await forced(broker, provider) }
        #expect((115...120).contains(error?.retryAfterSeconds ?? 0), "\(String(describing: error?.retryAfterSeconds))")
        #expect(try await provider.tokenRequests() == before + 1)
        #expect(try await refreshTokenCount(broker) == 1)
        let other = try await silent(broker, provider, scopes: ["api://tokenbroker-tests/Other.Read"])
        #expect(other.tokenSource == .identityProvider)
        try await stop(provider, daemon, broker)
    }

    /// A provider slower than the daemon's timeout: the cached token while it is valid; server_error after 2 s for
    /// an app that insists, with no retry (the provider may have redeemed the token); the refresh token kept.
    @Test func aSlowProviderTimesOut() async throws {
        let (provider, daemon, broker) = try await signedIn(providerArguments: [
            "--token-lifetime", "200", "--no-rotate",
        ])
        try await provider.control("delay", ["ms": 4000])
        let before = try await provider.tokenRequests()
        #expect(try await silent(broker, provider).tokenSource == .cache)
        let error = await expectError(.serverError) { try await forced(broker, provider) }
        #expect(error?.message.contains("did not answer in time") == true, "\(error?.message ?? "")")
        #expect(try await provider.tokenRequests() == before + 2)
        #expect(try await refreshTokenCount(broker) == 1)
        try await provider.control("reset", [:])
        #expect(try await silent(broker, provider).tokenSource == .identityProvider)
        try await stop(provider, daemon, broker)
    }

    /// The provider goes down: a token past its refresh time but still valid is handed out from the cache; one
    /// that is not valid long enough gets server_error, at once; nothing is lost.
    @Test func aDownProviderFallsBackToTheCachedToken() async throws {
        let (provider, daemon, broker) = try await signedIn(
            providerArguments: ["--token-lifetime", "3600", "--refresh-in", "1"]
        )
        try await Task.sleep(for: .milliseconds(1100))  // past refresh_on
        await provider.process.crash()
        let cached = try await silent(broker, provider)
        #expect(cached.tokenSource == .cache)
        let error = await expectError(.serverError) {
            _ = try await broker.acquireTokenSilent(
                TokenRequest(clientId: client, scopes: [scope], authority: provider.authority, forceRefresh: true)
            )
        }
        #expect(error?.message.contains("could not connect") == true, "\(error?.message ?? "")")
        #expect(try await refreshTokenCount(broker) == 1)
        await broker.close()
        #expect(try await daemon.stop() == 0)
    }

    /// Apps asking at once for other scopes, or as another app of the family, redeem one refresh token in turn.
    ///
    /// The provider rotates it and detects reuse (the token it rotated out, presented again, revokes every token of
    /// the user), so each request redeems the token the one before rotated in, and the sign-in lives on.
    @Test func requestsNeedingOneRefreshTokenRedeemItInTurn() async throws {
        let (provider, daemon, broker) = try await signedIn(daemonArguments: ["--log-level", "debug"])
        try await provider.control("hold", [:])
        let before = try await provider.tokenRequests()
        let first = Task { try await silent(broker, provider, scopes: ["api://tokenbroker-tests/First.Read"]) }
        // The first answer is held at the provider, its refresh token rotated out already: the others ask now, and
        // the first goes once both wait for their turn (were they let through, the provider would hold them too).
        try await provider.waitUntilAnswersAreHeld(1)
        async let other = silent(broker, provider, scopes: ["api://tokenbroker-tests/Other.Read"])
        async let family = broker.acquireTokenSilent(
            TokenRequest(clientId: EntraTestProvider.familyClientY, scopes: [scope], authority: provider.authority)
        )
        try await waitUntil("two requests wait for the refresh token's turn") {
            daemon.log.components(separatedBy: "waiting for its turn").count - 1 >= 2
        }
        try await provider.control("release", [:])
        let sources = try await [first.value, other, family].map(\.tokenSource)
        #expect(sources == [.identityProvider, .identityProvider, .identityProvider])
        #expect(try await provider.tokenRequests() == before + 3)
        #expect(try await forcedToken(broker, provider).tokenSource == .identityProvider)
        #expect(try await refreshTokenCount(broker) == 1)
        try await stop(provider, daemon, broker)
    }

    /// A sign-out while a refresh is at the provider stays: the refresh keeps none of what the provider answered, its
    /// caller is told to sign in, and the account does not come back.
    @Test func aSignOutDuringARefreshStays() async throws {
        let (provider, daemon, broker) = try await signedIn()
        try await provider.control("hold", [:])
        let refresh = Task { try await silent(broker, provider) }
        try await provider.waitUntilAnswersAreHeld(1)
        let removed = try await broker.removeAccount(AccountSelector(username: "ada@contoso.example"))
        #expect(removed.accountRemoved)
        try await provider.control("release", [:])
        let error = await expectError(.interactionRequired) { _ = try await refresh.value }
        #expect(
            error?.message.contains("were removed while this request refreshed") == true,
            "\(String(describing: error))"
        )
        #expect(try await broker.accounts().isEmpty)
        #expect(try await refreshTokenCount(broker) == 0)
        try await stop(provider, daemon, broker)
    }

    /// A grant revoked while a request through it waits for a refresh hands out nothing: the holder hears 401, as
    /// every request after the revocation does.
    @Test func aGrantRevokedDuringARefreshHandsOutNothing() async throws {
        let (provider, daemon, broker) = try await signedIn()
        let created = try await broker.createGrant(
            CreateGrantParams(
                clientId: client,
                authority: provider.authority,
                resources: ["api://tokenbroker-tests"],
                label: "revoked-midway"
            )
        )
        let endpoint = try #require(
            URL(string: created.grant.endpoint + "?api-version=2019-08-01&resource=api://tokenbroker-tests")
        )
        let request = HTTPRequest(
            method: .get,
            url: endpoint,
            headers: [("X-IDENTITY-HEADER", created.identityHeader.reveal())]
        )
        try await provider.control("hold", [:])
        let held = Task { try await AsyncHTTPTransport.shared.send(request, timeout: .seconds(30)) }
        try await provider.waitUntilAnswersAreHeld(1)
        _ = try await broker.revokeGrant("revoked-midway")
        try await provider.control("release", [:])
        let answer = try await held.value
        #expect(answer.status == 401)
        let text = String(decoding: answer.body, as: UTF8.self)
        #expect(text.contains("was revoked") && !text.contains("access_token"), "\(answer.status)")
        try await stop(provider, daemon, broker)
        // Nor does the audit say the grant's holder got a token (the daemon wrote its audit lines as it stopped).
        let issued = daemon.log.split(separator: "\n").filter {
            $0.contains("token issued") && $0.contains("revoked-midway")
        }
        #expect(issued.isEmpty, "\(issued.count) audit lines")
    }

    /// The user's refresh tokens were revoked: interaction_required with the provider's error.
    @Test func aRevokedTokenNeedsASignIn() async throws {
        let (provider, daemon, broker) = try await signedIn()
        try await provider.control("revoke", ["username": "ada@contoso.example"])
        let error = await expectError(.interactionRequired) { _ = try await silent(broker, provider) }
        #expect(error?.details?.error == "invalid_grant")
        try await stop(provider, daemon, broker)
    }

    /// The provider says the refresh token is dead (bad_token): the broker forgets it, and says sign in.
    @Test func aBadTokenIsForgotten() async throws {
        let (provider, daemon, broker) = try await signedIn()
        try await provider.control(
            "fail-next",
            ["status": 400, "error": "invalid_grant", "suberror": "bad_token", "grantType": "refresh_token"]
        )
        let error = await expectError(.interactionRequired) { _ = try await silent(broker, provider) }
        #expect(error?.details?.suberror == "bad_token")
        #expect(try await refreshTokenCount(broker) == 0)
        try await stop(provider, daemon, broker)
    }

    /// Expired refresh tokens (90 days of inactivity on Entra ID): interaction_required, token_expired.
    @Test func anExpiredRefreshTokenNeedsASignIn() async throws {
        let (provider, daemon, broker) = try await signedIn()
        try await provider.control("expire-refresh-tokens", ["username": "ada@contoso.example"])
        let error = await expectError(.interactionRequired) { _ = try await silent(broker, provider) }
        #expect(error?.details?.suberror == "token_expired")
        try await stop(provider, daemon, broker)
    }
}
