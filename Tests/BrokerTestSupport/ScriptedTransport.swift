public import BrokerOAuth
import BrokerProtocol
public import Foundation
import Synchronization

/// A transport that answers from a script and records what was sent: a stand-in for the network in unit tests of
/// this module only (the integration tests use real identity providers).
public final class ScriptedTransport: HTTPTransport {
    /// One answer: a response, or a transport failure.
    public enum Answer: Sendable {
        case response(HTTPResponse)
        case failure(TransportError)
    }

    private let state = Mutex<(answers: [Answer], sent: [HTTPRequest])>(([], []))
    private let handler: (@Sendable (HTTPRequest) -> Answer)?
    private let answerHold: Mutex<(suffix: String?, condition: @Sendable () -> Bool)?> = Mutex(nil)

    /// Answers from `answers`, in order; once they run out, every request fails as refused.
    public init(_ answers: [Answer] = []) {
        handler = nil
        state.withLock { $0.answers = answers }
    }

    /// Answers every request with `handler`.
    public init(handler: @escaping @Sendable (HTTPRequest) -> Answer) {
        self.handler = handler
    }

    /// Makes every later answer (to a URL ending in `suffix`, when given) wait until `condition` holds, and fail as a
    /// connection error when it does not within ``eventTimeout``: a test holds the first request until the callers
    /// it expects have joined it.
    public func holdAnswers(endingIn suffix: String? = nil, until condition: @escaping @Sendable () -> Bool) {
        answerHold.withLock { $0 = (suffix, condition) }
    }

    /// Records the request and answers it.
    public func send(_ request: HTTPRequest, timeout: Duration) async throws(TransportError) -> HTTPResponse {
        if let (suffix, condition) = answerHold.withLock({ $0 }), suffix.map(request.url.path.hasSuffix) ?? true {
            do {
                try await waitUntil("the held request may be answered", condition)
            } catch {
                throw TransportError(.connection, "\(error)")
            }
        }
        let scripted = state.withLock { state -> Answer? in
            state.sent.append(request)
            return handler == nil && !state.answers.isEmpty ? state.answers.removeFirst() : nil
        }
        let answer = handler.map { $0(request) } ?? scripted
        switch answer {
        case .response(let response)?: return response
        case .failure(let error)?: throw error
        case nil: throw TransportError(.connection, "the script has no more answers")
        }
    }

    /// Every request sent so far.
    public var sent: [HTTPRequest] {
        state.withLock { $0.sent }
    }

    /// A JSON answer.
    public static func json(
        _ status: Int,
        _ object: [String: Any],
        headers: [(name: String, value: String)] = []
    ) -> Answer {
        guard let body = try? JSONSerialization.data(withJSONObject: object) else {
            preconditionFailure("not JSON: \(object)")
        }
        return .response(HTTPResponse(status: status, headers: headers, body: Array(body)))
    }
}

extension HTTPRequest {
    /// The form fields of the body.
    public var formFields: [String: String] {
        let text = String(decoding: body ?? [], as: UTF8.self)
        return Dictionary(
            (FormBody.parse(text) ?? []).map { ($0.name, $0.value) },
            uniquingKeysWith: { first, _ in first }
        )
    }
}

extension ScriptedTransport {
    /// A provider that knows nothing: it refuses every grant with `invalid_grant`, as a provider does for tokens
    /// it never issued.
    public static func refusingProvider() -> ScriptedTransport {
        provider { _ in json(400, ["error": "invalid_grant", "error_description": "unknown refresh token"]) }
    }

    /// A provider whose discovery documents are served for any authority (Entra ID's paths included) and whose
    /// token and device endpoints answer with `tokens`.
    public static func provider(tokens: @escaping @Sendable (HTTPRequest) -> Answer) -> ScriptedTransport {
        ScriptedTransport { request in
            guard request.method == .get else { return tokens(request) }
            var base = request.url.absoluteString
            for suffix in ["/v2.0/.well-known/openid-configuration", "/.well-known/openid-configuration"]
            where base.hasSuffix(suffix) {
                base = String(base.dropLast(suffix.count))
                break
            }
            let issuer = base.contains("login.") ? "https://login.microsoftonline.com/{tenantid}/v2.0" : base
            return json(
                200,
                [
                    "issuer": issuer, "authorization_endpoint": base + "/oauth2/v2.0/authorize",
                    "token_endpoint": base + "/oauth2/v2.0/token",
                    "device_authorization_endpoint": base + "/oauth2/v2.0/devicecode",
                ]
            )
        }
    }

    /// How many requests went to a URL ending in `suffix`.
    public func count(endingIn suffix: String) -> Int {
        sent.filter { $0.url.path.hasSuffix(suffix) }.count
    }
}

extension ProviderMetadata {
    /// The metadata of a provider at `https://idp.example` that no test reaches over the network (the scripted
    /// transport answers for it).
    public static func test(
        issuer: String = "https://idp.example",
        jwks: Bool = true,
        authorizationEndpoint: URL = testURL("https://idp.example/authorize")
    ) -> ProviderMetadata {
        ProviderMetadata(
            issuer: issuer,
            authorizationEndpoint: authorizationEndpoint,
            tokenEndpoint: testURL("https://idp.example/token"),
            deviceAuthorizationEndpoint: testURL("https://idp.example/devicecode"),
            jwksURI: jwks ? testURL("https://idp.example/jwks") : nil
        )
    }
}

/// A URL literal of a test.
public func testURL(_ text: String) -> URL {
    guard let url = URL(string: text) else { preconditionFailure("not a URL: \(text)") }
    return url
}
