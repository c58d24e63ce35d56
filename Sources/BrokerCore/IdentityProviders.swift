import BrokerOAuth
import BrokerProtocol
import BrokerTime
import Logging

/// The broker's link to identity providers: discovery and signing keys, the token endpoint client with its
/// retries and throttle, and the id_token checks, with failures already in the broker's terms.
struct IdentityProviders: Sendable {
    let directory: ProviderDirectory
    let endpoint: TokenEndpoint

    init(transport: any HTTPTransport, policy: RetryPolicy, logger: Logger, clock: any BrokerClock) {
        directory = ProviderDirectory(transport: transport, timeout: policy.requestTimeout, clock: clock)
        endpoint = TokenEndpoint(
            transport: transport,
            policy: policy,
            productVersion: TokenBroker.version,
            logger: logger,
            clock: clock
        )
    }

    /// The authority's discovery document.
    func metadata(for authority: Authority, correlationId: String) async throws(BrokerFailure) -> ProviderMetadata {
        do {
            return try await directory.metadata(for: authority)
        } catch {
            throw BrokerFailure(oauth: error, correlationId: correlationId)
        }
    }

    /// Checks the id_token of a response, when it has one; returns its claims.
    ///
    /// `knownSubject` is a refresh's account (see ``IDTokenValidator/validate(_:nonce:now:keys:knownSubject:)``).
    func validatedClaims(
        of response: TokenResponse,
        metadata: ProviderMetadata,
        clientId: String,
        nonce: String?,
        now: Int64,
        knownSubject: String? = nil
    ) async throws(IDTokenError) -> [String: JSONValue]? {
        guard let idToken = response.idToken else { return nil }
        let keys = directory.signingKeys(for: metadata)
        let validator = IDTokenValidator(metadata: metadata, clientId: clientId)
        return try await validator.validate(idToken, nonce: nonce, now: now, keys: keys, knownSubject: knownSubject)
            .claims
    }
}

extension BrokerFailure {
    /// The broker's failure for an identity provider's: what the caller should do, with the provider's `error`,
    /// `suberror` and description attached.
    init(oauth error: OAuthError, correlationId: String?) {
        let response = error.response
        let details = ErrorData.Details(
            error: response?.error,
            suberror: response?.suberror,
            errorDescription: response?.errorDescription,
            correlationId: correlationId,
            retryAfterSeconds: error.retryAfter.map { max(1, $0.roundedUpSeconds) }
        )
        let code: ErrorCode
        switch error.kind {
        case .rejected:
            switch response?.error {
            case _ where error.requiresInteraction: code = .interactionRequired
            case "invalid_client"?, "unauthorized_client"?: code = .unauthorizedClient
            case "invalid_scope"?, "invalid_request"?, "unsupported_response_type"?: code = .invalidParams
            case "access_denied"?: code = .userCanceled
            default: code = .serverError
            }
        case .unavailable, .invalidResponse: code = .serverError
        case .throttled: code = .throttled
        case .expired: code = .timeout
        case .canceled: code = .userCanceled
        case .invalidRequest: code = .invalidParams
        }
        self.init(code, error.message, details: details, underlying: error)
    }
}
