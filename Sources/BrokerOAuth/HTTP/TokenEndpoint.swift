public import BrokerTime
public import Foundation
public import Logging

/// How hard to try a token endpoint: retries with backoff, the longest `Retry-After` waited out in line, the
/// time one exchange may take, and how long identical failures are answered without asking the provider again.
public struct RetryPolicy: Sendable {
    /// Tries per call, the first included.
    public var attempts: Int
    /// The pause before the first retry; it doubles for each one after, up to ``maximumBackoff``.
    public var initialBackoff: Duration
    /// The longest pause between tries.
    public var maximumBackoff: Duration
    /// A `Retry-After` longer than this is not waited out: the call fails at once, with the delay in the error.
    public var longestWait: Duration
    /// The time one HTTP exchange may take.
    public var requestTimeout: Duration
    /// How long a request that failed because the user must sign in again is answered from memory (MSAL's
    /// "UI required" throttle).
    public var interactionRequiredWindow: Duration
    /// How long a request that found the provider down is answered from memory.
    public var unavailableWindow: Duration
    /// How long a 429 without `Retry-After` is honored.
    public var throttledWindow: Duration
    /// The longest `Retry-After` honored.
    public var maximumWindow: Duration

    /// The defaults: 3 tries from 0.5 s, waits up to 10 s in line, 30 s per exchange; identical failures
    /// remembered 120 s (sign in again), 5 s (provider down), 30 s (429), and at most an hour.
    public init(
        attempts: Int = 3,
        initialBackoff: Duration = .milliseconds(500),
        maximumBackoff: Duration = .seconds(4),
        longestWait: Duration = .seconds(10),
        requestTimeout: Duration = .seconds(30),
        interactionRequiredWindow: Duration = .seconds(120),
        unavailableWindow: Duration = .seconds(5),
        throttledWindow: Duration = .seconds(30),
        maximumWindow: Duration = .seconds(3600)
    ) {
        self.attempts = max(1, attempts)
        self.initialBackoff = initialBackoff
        self.maximumBackoff = maximumBackoff
        self.longestWait = longestWait
        self.requestTimeout = requestTimeout
        self.interactionRequiredWindow = interactionRequiredWindow
        self.unavailableWindow = unavailableWindow
        self.throttledWindow = throttledWindow
        self.maximumWindow = maximumWindow
    }

    /// The pause before try `attempt + 1`, with up to a quarter of jitter.
    func backoff(after attempt: Int) -> Duration {
        let doubled = initialBackoff * (1 << min(attempt - 1, 10))
        let base = min(doubled, maximumBackoff)
        return base + base * Double.random(in: 0...0.25)
    }

    /// How long identical requests are answered with `error` without asking the provider, or nil.
    func window(for error: OAuthError) -> Duration? {
        switch error.kind {
        case .throttled: min(error.retryAfter ?? throttledWindow, maximumWindow)
        case .unavailable: min(error.retryAfter ?? unavailableWindow, maximumWindow)
        case .rejected where error.requiresInteraction: interactionRequiredWindow
        default: nil
        }
    }
}

/// A token or device authorization endpoint: form POSTs with the client's identification headers, retries on
/// 429, 5xx and refused connections (never after a timeout or a broken exchange, where the provider may already
/// have redeemed a refresh token it rotates), and a throttle that answers repeated identical failures from memory.
public final class TokenEndpoint: Sendable {
    private let transport: any HTTPTransport
    /// The retry and throttle settings.
    public let policy: RetryPolicy
    private let throttle: Throttle
    private let clock: any BrokerClock
    private let productVersion: String
    private let logger: Logger

    /// Creates an endpoint client.
    public init(
        transport: any HTTPTransport,
        policy: RetryPolicy = RetryPolicy(),
        productVersion: String,
        logger: Logger,
        clock: any BrokerClock = .system
    ) {
        self.transport = transport
        self.policy = policy
        self.clock = clock
        self.throttle = Throttle(clock: clock)
        self.productVersion = productVersion
        self.logger = logger
    }

    /// Redeems a grant at a token endpoint.
    ///
    /// `throttleKey` identifies the request for the throttle (nil: never throttled, as for codes, which are single
    /// use anyway).
    public func redeem(
        _ form: FormBody,
        at url: URL,
        correlationId: String,
        headers: [(name: String, value: String)] = [],
        throttleKey: ThrottleKey? = nil
    ) async throws(OAuthError) -> TokenResponse {
        let body = try await post(
            form,
            to: url,
            endpoint: "token",
            correlationId: correlationId,
            headers: headers,
            throttleKey: throttleKey
        )
        return try TokenResponse(body: body)
    }

    /// POSTs `form` and returns the body of the 200 answer.
    public func post(
        _ form: FormBody,
        to url: URL,
        endpoint: String,
        correlationId: String,
        headers: [(name: String, value: String)] = [],
        throttleKey: ThrottleKey? = nil,
        retries: Bool = true
    ) async throws(OAuthError) -> [UInt8] {
        if let throttleKey { try throttle.check(throttleKey) }
        do {
            return try await exchange(
                form,
                to: url,
                endpoint: endpoint,
                correlationId: correlationId,
                headers: headers,
                retries: retries
            )
        } catch {
            if let throttleKey, let window = policy.window(for: error) {
                throttle.record(error, for: throttleKey, window)
            }
            throw error
        }
    }

    private func exchange(
        _ form: FormBody,
        to url: URL,
        endpoint: String,
        correlationId: String,
        headers: [(name: String, value: String)],
        retries: Bool
    ) async throws(OAuthError) -> [UInt8] {
        let request = HTTPRequest.form(
            url,
            form,
            headers: [
                ("client-request-id", correlationId), ("return-client-request-id", "true"),
                ("x-client-SKU", "tokenbroker.linux"), ("x-client-Ver", productVersion), ("x-client-OS", "linux"),
            ] + headers
        )
        // The correlation id goes with each line, not into the logger's metadata: that is built only when a line is
        // logged, while setting it on the logger cost every exchange 8,000 instructions (callgrind), logged or not.
        let grant = form.value(of: "grant_type") ?? endpoint
        var attempt = 1
        while true {
            let started = clock.elapsed
            let failure: OAuthError
            do {
                let response = try await transport.send(request, timeout: policy.requestTimeout)
                logger.debug(
                    "identity provider answered",
                    metadata: [
                        "endpoint": "\(url.absoluteString)", "grant": "\(grant)", "status": "\(response.status)",
                        "attempt": "\(attempt)", "ms": "\((clock.elapsed - started).milliseconds)",
                        "correlation_id": "\(correlationId)",
                    ]
                )
                if response.status == 200 { return response.body }
                failure = OAuthError.from(response, endpoint: endpoint, now: clock.now)
            } catch {
                logger.debug(
                    "identity provider unreachable",
                    metadata: [
                        "endpoint": "\(url.absoluteString)", "grant": "\(grant)", "reason": "\(error)",
                        "correlation_id": "\(correlationId)",
                    ]
                )
                switch error.kind {
                case .canceled: throw OAuthError(.canceled, "the request to the identity provider was canceled")
                case .responseTooLarge: throw OAuthError(.invalidResponse, error.reason)
                case .connection, .interrupted, .timeout:
                    failure = OAuthError(.unavailable, "the identity provider's \(endpoint) endpoint: \(error.reason)")
                }
                guard error.kind == .connection else { throw failure }
            }
            guard retries, failure.kind == .throttled || failure.kind == .unavailable, attempt < policy.attempts else {
                throw failure
            }
            let pause = failure.retryAfter ?? policy.backoff(after: attempt)
            guard pause <= policy.longestWait else { throw failure }
            logger.debug(
                "retrying",
                metadata: [
                    "endpoint": "\(url.absoluteString)", "after": "\(pause)", "correlation_id": "\(correlationId)",
                ]
            )
            do {
                try await clock.sleep(for: pause)
            } catch {
                throw OAuthError(.canceled, "the request to the identity provider was canceled")
            }
            attempt += 1
        }
    }
}

extension Duration {
    /// Whole milliseconds.
    var milliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}
