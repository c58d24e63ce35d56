import BrokerOAuth
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Logging
import Testing

@Suite struct TokenEndpointTests {
    let url = testURL("https://idp.example/token")
    let quick = RetryPolicy(initialBackoff: .milliseconds(1), maximumBackoff: .milliseconds(2))

    /// An endpoint on a test clock: its retries and throttle windows pass without waiting.
    func endpoint(
        _ transport: ScriptedTransport,
        policy: RetryPolicy? = nil,
        clock: TestClock = TestClock()
    ) -> TokenEndpoint {
        TokenEndpoint(
            transport: transport,
            policy: policy ?? quick,
            productVersion: "test",
            logger: Logger(label: "test"),
            clock: clock
        )
    }

    func refreshForm(_ token: String = "rt-1") -> FormBody {
        var form = FormBody()
        form.add("grant_type", "refresh_token")
        form.add("refresh_token", secret: Secret(token))
        return form
    }

    static var success: [String: Any] {
        ["access_token": "at-1", "token_type": "Bearer", "expires_in": 3600]
    }

    @Test func parsesEntraResponses() throws {
        let body: [String: Any] = [
            "access_token": "at", "token_type": "Bearer", "expires_in": "3599", "ext_expires_in": 7199,
            "refresh_in": 1800, "refresh_token": "rt", "id_token": "a.b.c", "scope": "User.Read openid",
            "client_info": "eyJ1aWQiOiJ1IiwidXRpZCI6InQifQ", "foci": "1",
        ]
        let response = try TokenResponse(body: Array(JSONSerialization.data(withJSONObject: body)))
        #expect(response.accessToken.reveal() == "at")
        #expect(response.expiresIn == 3599)
        #expect(response.extendedExpiresIn == 7199)
        #expect(response.refreshIn == 1800)
        #expect(response.refreshToken?.reveal() == "rt")
        #expect(response.familyId == "1")
        #expect(response.scope == "User.Read openid")
        #expect(ClientInfo(encoded: response.clientInfo ?? "")?.homeAccountId == "u.t")
        let text = "\(response)"
        #expect(!text.contains("at,") && !text.contains("\"rt\"") && text.contains("family 1 refresh token"))
    }

    @Test(arguments: [
        (#"{"token_type":"Bearer"}"#, "no access_token"),
        (#"{"access_token":"x","expires_in":"soon"}"#, "expires_in"),
        (#"{"access_token":"x","expires_in":-5}"#, "expires_in"),
        ("<html>", "not a JSON object"),
        (#"{"access_token":"x","access_token":"y"}"#, "not a JSON object"),
    ])
    func refusesBrokenResponses(body: String, reason: String) {
        #expect {
            try TokenResponse(body: Array(body.utf8))
        } throws: { error in
            (error as? OAuthError)?.kind == .invalidResponse && "\(error)".contains(reason)
        }
    }

    @Test func readsOAuthErrorsWithEntraFields() {
        let body = #"""
            {"error":"invalid_grant","error_description":"AADSTS70000: bad","error_codes":[70000],
             "suberror":"bad_token","correlation_id":"c-1","claims":"{}"}
            """#
        let response = OAuthErrorResponse(body: Array(body.utf8))
        #expect(response?.error == "invalid_grant")
        #expect(response?.suberror == "bad_token")
        #expect(response?.errorCodes == [70000])
        #expect(response?.correlationId == "c-1")
        let mismatch = OAuthErrorResponse(
            body: Array(#"{"error":"invalid_grant","error_additional_info":["client_mismatch"]}"#.utf8)
        )
        #expect(mismatch?.suberror == "client_mismatch")
        #expect(OAuthErrorResponse(body: Array("Internal Server Error".utf8)) == nil)
    }

    @Test func retriesUnavailableAnswersThenSucceeds() async throws {
        let transport = ScriptedTransport([
            ScriptedTransport.json(503, ["error": "temporarily_unavailable"], headers: [("Retry-After", "0")]),
            .failure(TransportError(.connection, "refused")),
            ScriptedTransport.json(200, Self.success),
        ])
        let clock = TestClock()
        let response = try await endpoint(transport, clock: clock).redeem(refreshForm(), at: url, correlationId: "c")
        #expect(response.accessToken.reveal() == "at-1")
        #expect(transport.sent.count == 3)
        // Retry-After 0, then the backoff after the refused connection, both waited on the clock.
        #expect(clock.sleeps.count == 2 && clock.sleeps[0] == .zero && clock.sleeps[1] > .zero)
        let headers = Dictionary(transport.sent[0].headers.map { ($0.name, $0.value) }, uniquingKeysWith: { a, _ in a })
        #expect(headers["client-request-id"] == "c")
        #expect(headers["Content-Type"] == "application/x-www-form-urlencoded")
    }

    @Test func neverRetriesAfterATimeoutOrABrokenExchange() async {
        for kind in [TransportError.Kind.timeout, .interrupted] {
            let transport = ScriptedTransport([
                .failure(TransportError(kind, "slow")), ScriptedTransport.json(200, Self.success),
            ])
            await #expect {
                try await endpoint(transport).redeem(refreshForm(), at: url, correlationId: "c")
            } throws: { error in
                (error as? OAuthError)?.kind == .unavailable
            }
            // The provider may have redeemed (and rotated) the refresh token: sending it again could revoke it.
            #expect(transport.sent.count == 1)
        }
    }

    @Test func doesNotWaitOutALongRetryAfter() async {
        let transport = ScriptedTransport([
            ScriptedTransport.json(429, ["error": "too_many"], headers: [("Retry-After", "120")])
        ])
        await #expect {
            try await endpoint(transport).redeem(refreshForm(), at: url, correlationId: "c")
        } throws: { error in
            guard let error = error as? OAuthError else { return false }
            return error.kind == .throttled && error.retryAfter == .seconds(120)
        }
        #expect(transport.sent.count == 1)
    }

    @Test func readsRetryAfterAsAnHTTPDate() async {
        let clock = TestClock()
        let date = clock.now.addingTimeInterval(90)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let transport = ScriptedTransport([
            .response(HTTPResponse(status: 503, headers: [("retry-after", formatter.string(from: date))]))
        ])
        await #expect {
            try await endpoint(transport, clock: clock).redeem(refreshForm(), at: url, correlationId: "c")
        } throws: { error in
            guard let wait = (error as? OAuthError)?.retryAfter else { return false }
            return wait > .seconds(80) && wait <= .seconds(90)
        }
    }

    @Test func throttlesIdenticalFailuresButNotOthers() async {
        let transport = ScriptedTransport([
            ScriptedTransport.json(400, ["error": "invalid_grant", "suberror": "bad_token"]),
            ScriptedTransport.json(200, Self.success),
        ])
        let endpoint = endpoint(transport)
        let key = ThrottleKey([url.absoluteString, "client"], secret: Secret("rt-1"))
        for _ in 0..<3 {
            await #expect {
                try await endpoint.redeem(refreshForm(), at: url, correlationId: "c", throttleKey: key)
            } throws: { error in
                (error as? OAuthError)?.suberror == "bad_token"
            }
        }
        #expect(transport.sent.count == 1)
        // Another refresh token is another request.
        let other = ThrottleKey([url.absoluteString, "client"], secret: Secret("rt-2"))
        let response = try? await endpoint.redeem(refreshForm("rt-2"), at: url, correlationId: "c", throttleKey: other)
        #expect(response != nil)
        #expect(transport.sent.count == 2)
    }

    @Test func throttleWindowsEnd() async throws {
        var policy = quick
        policy.attempts = 1
        policy.unavailableWindow = .milliseconds(50)
        let transport = ScriptedTransport([
            ScriptedTransport.json(500, [:]), ScriptedTransport.json(200, Self.success),
        ])
        let clock = TestClock()
        let endpoint = endpoint(transport, policy: policy, clock: clock)
        let key = ThrottleKey(["k"])
        await #expect(throws: OAuthError.self) {
            try await endpoint.redeem(refreshForm(), at: url, correlationId: "c", throttleKey: key)
        }
        await #expect(throws: OAuthError.self) {
            try await endpoint.redeem(refreshForm(), at: url, correlationId: "c", throttleKey: key)
        }
        #expect(transport.sent.count == 1)
        clock.advance(by: .milliseconds(80))
        _ = try await endpoint.redeem(refreshForm(), at: url, correlationId: "c", throttleKey: key)
        #expect(transport.sent.count == 2)
    }

    @Test func classifiesInteractionErrors() {
        let cases: [(String, String?, Bool)] = [
            ("invalid_grant", nil, true), ("interaction_required", nil, true), ("consent_required", nil, true),
            ("invalid_client", nil, false), ("invalid_request", "bad_token", true), ("invalid_scope", nil, false),
        ]
        for (error, suberror, expected) in cases {
            let failure = OAuthError(.rejected, "x", response: OAuthErrorResponse(error: error, suberror: suberror))
            #expect(failure.requiresInteraction == expected, "\(error) \(suberror ?? "")")
        }
        #expect(!OAuthError(.unavailable, "down").requiresInteraction)
    }
}
