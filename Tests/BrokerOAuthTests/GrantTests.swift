import BrokerOAuth
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Logging
import Testing

@Suite struct GrantTests {
    let metadata = ProviderMetadata.test()

    func request(_ extra: [String: String] = [:]) -> AuthorizationRequest {
        AuthorizationRequest(
            clientId: "client-x",
            redirectURI: "http://127.0.0.1:5555/",
            scopes: ["User.Read", "openid", "profile", "offline_access"],
            prompt: "select_account",
            loginHint: "ada@contoso.com",
            domainHint: "contoso.com",
            extraParameters: extra,
            requestsClientInfo: true
        )
    }

    func query(_ url: URL) -> [String: String] {
        let items = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems ?? []
        return Dictionary(items.map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { a, _ in a })
    }

    @Test func buildsAnAuthorizationURLWithPKCEStateAndNonce() throws {
        let grant = try AuthorizationCodeGrant(request(["msafed": "0"]), metadata: metadata)
        let fields = query(grant.authorizationURL)
        #expect(grant.authorizationURL.absoluteString.hasPrefix("https://idp.example/authorize?"))
        #expect(fields["client_id"] == "client-x")
        #expect(fields["response_type"] == "code")
        #expect(fields["redirect_uri"] == "http://127.0.0.1:5555/")
        #expect(fields["scope"] == "User.Read openid profile offline_access")
        #expect(fields["state"] == grant.state)
        #expect(fields["nonce"] == grant.nonce)
        #expect(fields["code_challenge_method"] == "S256")
        #expect(fields["code_challenge"]?.count == 43)
        #expect(fields["client_info"] == "1")
        #expect(fields["prompt"] == "select_account")
        #expect(fields["login_hint"] == "ada@contoso.com")
        #expect(fields["domain_hint"] == "contoso.com")
        #expect(fields["msafed"] == "0")
        #expect(fields["code_verifier"] == nil)
        let other = try AuthorizationCodeGrant(request(), metadata: metadata)
        #expect(other.state != grant.state && other.nonce != grant.nonce)
    }

    @Test func refusesExtraParametersThatReplaceTheBrokers() {
        for name in ["state", "redirect_uri", "Code_Challenge", "client_id"] {
            #expect(throws: OAuthError.self) { try AuthorizationCodeGrant(request([name: "x"]), metadata: metadata) }
        }
    }

    @Test func readsTheCodeOnlyFromThisGrantsRedirect() throws {
        let grant = try AuthorizationCodeGrant(request(), metadata: metadata)
        let code = try grant.code(from: "http://127.0.0.1:5555/?code=the-code&state=\(grant.state)")
        #expect(code.reveal() == "the-code")

        let refused = [
            "http://127.0.0.1:5555/?code=the-code&state=someone-else",
            "http://127.0.0.1:5555/?code=the-code",
            "http://127.0.0.1:5556/?code=the-code&state=\(grant.state)",
            "http://127.0.0.1:5555/elsewhere?code=the-code&state=\(grant.state)",
            "https://127.0.0.1:5555/?code=the-code&state=\(grant.state)",
        ]
        for redirect in refused {
            #expect(
                performing: { _ = try grant.code(from: redirect) },
                throws: { error in
                    guard case .notOurs(let rejection)? = error as? RedirectOutcomeError else { return false }
                    return !rejection.reason.contains("the-code")
                }
            )
        }
    }

    @Test func turnsRedirectErrorsIntoFailures() throws {
        let grant = try AuthorizationCodeGrant(request(), metadata: metadata)
        let denied = "http://127.0.0.1:5555/?error=access_denied&error_description=no+thanks&state=\(grant.state)"
        #expect(
            performing: { _ = try grant.code(from: denied) },
            throws: { error in
                guard case .failed(let failure)? = error as? RedirectOutcomeError else { return false }
                return failure.kind == .canceled && failure.response?.errorDescription == "no thanks"
            }
        )
        let required = "http://127.0.0.1:5555/?error=interaction_required&state=\(grant.state)"
        #expect(
            performing: { _ = try grant.code(from: required) },
            throws: { error in
                guard case .failed(let failure)? = error as? RedirectOutcomeError else { return false }
                return failure.kind == .rejected && failure.requiresInteraction
            }
        )
    }

    @Test func redeemsTheCodeWithTheVerifier() async throws {
        let transport = ScriptedTransport([
            ScriptedTransport.json(200, ["access_token": "at", "expires_in": 60])
        ])
        let endpoint = TokenEndpoint(transport: transport, productVersion: "t", logger: Logger(label: "t"))
        let grant = try AuthorizationCodeGrant(request(), metadata: metadata)
        _ = try await grant.redeem(Secret("the-code"), via: endpoint, correlationId: "c")
        let fields = transport.sent[0].formFields
        #expect(fields["grant_type"] == "authorization_code")
        #expect(fields["code"] == "the-code")
        #expect(fields["redirect_uri"] == "http://127.0.0.1:5555/")
        let verifier = try #require(fields["code_verifier"])
        #expect(PKCE(verifier: Secret(verifier)).challenge == query(grant.authorizationURL)["code_challenge"])
    }

    @Test func refreshSendsTheTokenScopesAndRoutingHint() async throws {
        let transport = ScriptedTransport([ScriptedTransport.json(200, ["access_token": "at"])])
        let endpoint = TokenEndpoint(transport: transport, productVersion: "t", logger: Logger(label: "t"))
        let grant = RefreshTokenGrant(
            clientId: "client-y",
            refreshToken: Secret("frt"),
            scopes: ["Files.Read", "openid"],
            requestsClientInfo: true,
            anchorMailbox: "Oid:u@t"
        )
        let response = try await grant.redeem(at: metadata.tokenEndpoint, via: endpoint, correlationId: "c")
        #expect(response.expiresIn == TokenResponse.defaultLifetime)
        let sent = transport.sent[0]
        #expect(sent.formFields["refresh_token"] == "frt")
        #expect(sent.formFields["client_id"] == "client-y")
        #expect(sent.formFields["client_info"] == "1")
        #expect(sent.headers.contains { $0.name == "X-AnchorMailbox" && $0.value == "Oid:u@t" })
    }

    @Test func devicePollingWaitsSlowsDownAndFinishes() async throws {
        let transport = ScriptedTransport([
            ScriptedTransport.json(
                200,
                [
                    "device_code": "dc", "user_code": "ABCD-EFGH", "verification_uri": "https://idp.example/device",
                    "expires_in": 600, "interval": 2, "message": "Go to https://idp.example/device",
                ]
            ),
            ScriptedTransport.json(400, ["error": "authorization_pending"]),
            ScriptedTransport.json(400, ["error": "slow_down"]),
            ScriptedTransport.json(503, [:], headers: [("Retry-After", "0")]),
            ScriptedTransport.json(400, ["error": "authorization_pending"]),
            ScriptedTransport.json(200, ["access_token": "at", "expires_in": 60]),
        ])
        var policy = RetryPolicy()
        policy.attempts = 1
        let endpoint = TokenEndpoint(
            transport: transport,
            policy: policy,
            productVersion: "t",
            logger: Logger(label: "t")
        )
        let grant = DeviceCodeGrant(clientId: "cli", scopes: ["openid"])
        let authorization = try await grant.start(metadata: metadata, via: endpoint, correlationId: "c")
        #expect(authorization.userCode == "ABCD-EFGH")
        #expect(authorization.prompt == "Go to https://idp.example/device")
        #expect(!"\(authorization)".contains("dc,"))
        let clock = TestClock()
        let response = try await grant.poll(
            authorization,
            metadata: metadata,
            via: endpoint,
            correlationId: "c",
            clock: clock
        )
        #expect(response.accessToken.reveal() == "at")
        #expect(clock.sleeps == [.seconds(2), .seconds(2), .seconds(7), .seconds(7), .seconds(7)])
        #expect(transport.sent.dropFirst().allSatisfy { $0.formFields["device_code"] == "dc" })
        #expect(transport.sent.last?.formFields["grant_type"] == DeviceCodeGrant.grantType)
    }

    @Test(arguments: [
        ("expired_token", OAuthError.Kind.expired), ("access_denied", .canceled),
        ("authorization_declined", .canceled), ("invalid_client", .rejected),
    ])
    func devicePollingEnds(on error: String, as kind: OAuthError.Kind) async {
        let transport = ScriptedTransport([ScriptedTransport.json(400, ["error": error])])
        await #expect {
            try await poll(transport, expiresIn: 60, interval: 1)
        } throws: { failure in
            (failure as? OAuthError)?.kind == kind
        }
    }

    @Test func devicePollingStopsWhenTheCodeExpires() async {
        let answers = (0..<10).map { _ in ScriptedTransport.json(400, ["error": "authorization_pending"]) }
        let transport = ScriptedTransport(answers)
        await #expect {
            try await poll(transport, expiresIn: 12, interval: 5)
        } throws: { failure in
            (failure as? OAuthError)?.kind == .expired
        }
        #expect(transport.sent.count == 2)
    }

    /// Polls a device code that expires in `expiresIn` seconds, every `interval`, against `transport`.
    private func poll(_ transport: ScriptedTransport, expiresIn: Int64, interval: Int64) async throws -> TokenResponse {
        let endpoint = TokenEndpoint(transport: transport, productVersion: "t", logger: Logger(label: "t"))
        let authorization = DeviceAuthorization(
            deviceCode: Secret("dc"),
            userCode: "U",
            verificationURI: "https://idp.example/device",
            expiresIn: expiresIn,
            interval: interval
        )
        return try await DeviceCodeGrant(clientId: "c", scopes: []).poll(
            authorization,
            metadata: metadata,
            via: endpoint,
            correlationId: "c",
            clock: TestClock()
        )
    }

    @Test func deviceCodeNeedsAnEndpoint() async {
        let endpoint = TokenEndpoint(transport: ScriptedTransport(), productVersion: "t", logger: Logger(label: "t"))
        var metadata = metadata
        metadata.deviceAuthorizationEndpoint = nil
        await #expect {
            try await DeviceCodeGrant(clientId: "c", scopes: []).start(
                metadata: metadata,
                via: endpoint,
                correlationId: "c"
            )
        } throws: { failure in
            (failure as? OAuthError)?.kind == .invalidRequest
        }
    }
}

/// The authorization URLs in `Protocol/examples/` are the ones the broker sends: the same parameters, in the same
/// order, with the same values (but for `state`, `nonce` and the PKCE challenge, fresh in every grant).
struct ExampleAuthorizationURLTests {
    static let examples = URL(filePath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appending(path: "Protocol/examples")

    /// Every `webAuth/didStartLoad` URL of the examples.
    static var urls: [String] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: examples.path)) ?? []
        return files.filter { $0.hasSuffix(".json") }.sorted().flatMap { file -> [String] in
            guard let data = try? Data(contentsOf: examples.appending(path: file)),
                let transcript = try? JSONValue.parse(Array(data)).objectValue,
                case .array(let messages)? = transcript["messages"]
            else { return [] }
            return messages.compactMap { entry in
                let message = entry.objectValue?["message"]?.objectValue
                guard message?["method"]?.stringValue == "webAuth/didStartLoad" else { return nil }
                return message?["params"]?.objectValue?["url"]?.stringValue
            }
        }
    }

    @Test func theExamplesShowAuthorizationURLs() {
        #expect(Self.urls.count >= 3)
    }

    @Test(arguments: urls)
    func exampleURLIsWhatTheGrantBuilds(_ example: String) throws {
        let components = try #require(URLComponents(string: example))
        let items = components.queryItems ?? []
        let value = { (name: String) in items.first { $0.name == name }?.value }
        let reserved = AuthorizationRequest.reservedParameters.union(["client-request-id"])
        var extra: [String: String] = [:]
        for item in items where !reserved.contains(item.name) { extra[item.name] = item.value ?? "" }
        var endpoint = components
        endpoint.query = nil
        let metadata = ProviderMetadata.test(authorizationEndpoint: try #require(endpoint.url))
        let grant = try AuthorizationCodeGrant(
            AuthorizationRequest(
                clientId: try #require(value("client_id")),
                redirectURI: try #require(value("redirect_uri")),
                scopes: (value("scope") ?? "").split(separator: " ").map(String.init),
                prompt: value("prompt"),
                loginHint: value("login_hint"),
                domainHint: value("domain_hint"),
                claims: value("claims"),
                extraParameters: extra,
                requestsClientInfo: value("client_info") == "1"
            ),
            metadata: metadata
        )
        let built = try #require(URLComponents(url: grant.authorizationURL, resolvingAgainstBaseURL: false))
        #expect(built.queryItems?.map(\.name) == items.map(\.name), "\(example)")
        let fresh: Set<String> = ["state", "nonce", "code_challenge"]
        for (mine, theirs) in zip(built.queryItems ?? [], items) where !fresh.contains(mine.name) {
            #expect(mine.value == theirs.value, "\(mine.name) in \(example)")
        }
    }
}
