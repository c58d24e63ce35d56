import BrokerProtocol
import Foundation

/// An OAuth error answer (RFC 6749 §5.2), with the fields Entra ID adds.
public struct OAuthErrorResponse: Sendable, Hashable {
    /// The error, such as `invalid_grant`, `interaction_required` or `authorization_pending`.
    public var error: String
    /// The provider's text.
    ///
    /// Bounded; it never contains what we sent.
    public var errorDescription: String?
    /// Entra ID's refinement, such as `bad_token`, `client_mismatch`, `consent_required` or `basic_action`.
    public var suberror: String?
    /// Entra ID's `AADSTS` numbers.
    public var errorCodes: [Int64]
    /// The provider's correlation id for this request.
    public var correlationId: String?
    /// A claims challenge the provider wants in the next request.
    public var claims: String?

    /// Creates a response.
    public init(
        error: String,
        errorDescription: String? = nil,
        suberror: String? = nil,
        errorCodes: [Int64] = [],
        correlationId: String? = nil,
        claims: String? = nil
    ) {
        self.error = error
        self.errorDescription = errorDescription
        self.suberror = suberror
        self.errorCodes = errorCodes
        self.correlationId = correlationId
        self.claims = claims
    }

    /// Parses an error body; nil when it is not a JSON object with a string `error`.
    ///
    /// MSAL Python also finds `client_mismatch` in `error_additional_info`, so that counts as the suberror.
    public init?(body: [UInt8]) {
        guard let object = try? JSONValue.parse(body).objectValue, let error = object["error"]?.stringValue,
            !error.isEmpty
        else { return nil }
        self.error = String(error.prefix(100))
        errorDescription = object["error_description"]?.stringValue.map { String($0.prefix(500)) }
        suberror = object["suberror"]?.stringValue.map { String($0.prefix(100)) }
        if suberror == nil, case .array(let info)? = object["error_additional_info"],
            info.contains(where: { $0.stringValue == "client_mismatch" })
        {
            suberror = "client_mismatch"
        }
        if case .array(let codes)? = object["error_codes"] {
            errorCodes = codes.compactMap(\.integerValue)
        } else {
            errorCodes = []
        }
        correlationId = object["correlation_id"]?.stringValue.map { String($0.prefix(100)) }
        claims = object["claims"]?.stringValue
    }
}

/// Why a call to an identity provider did not give tokens.
///
/// Every message is safe to show and log: no token, code, verifier or request body is ever part of one.
public struct OAuthError: Error, Sendable, CustomStringConvertible {
    /// How the broker should treat the failure.
    public enum Kind: Sendable, Hashable {
        /// The provider answered with an OAuth error (``OAuthError/response``).
        case rejected
        /// The provider could not be reached, timed out or failed (5xx), also after retries.
        case unavailable
        /// The provider asked us to slow down (429), or the same failure repeats within the throttle window.
        case throttled
        /// The provider's answer was not what the protocol promises (not JSON, no access token, bad id_token).
        case invalidResponse
        /// The sign-in took longer than its deadline (device code expired, no redirect came).
        case expired
        /// The user or the app canceled the sign-in.
        case canceled
        /// The request cannot be made as asked (an unsupported grant, a bad redirect URI, a reserved parameter).
        case invalidRequest
    }

    /// How to treat it.
    public var kind: Kind
    /// What happened, for people.
    public var message: String
    /// The provider's error answer, for ``Kind/rejected`` (and 429/5xx answers that carried one).
    public var response: OAuthErrorResponse?
    /// The HTTP status, when one came.
    public var status: Int?
    /// How long the provider asked us to wait.
    public var retryAfter: Duration?

    /// Creates an error.
    public init(
        _ kind: Kind,
        _ message: String,
        response: OAuthErrorResponse? = nil,
        status: Int? = nil,
        retryAfter: Duration? = nil
    ) {
        self.kind = kind
        self.message = message
        self.response = response
        self.status = status
        self.retryAfter = retryAfter
    }

    /// The provider's `error`, if it answered one.
    public var error: String? {
        response?.error
    }

    /// The provider's `suberror`, if it answered one.
    public var suberror: String? {
        response?.suberror
    }

    /// Whether the user must sign in again: the refresh token or the session is no longer good
    /// (msal-node's `InteractionRequiredAuthErrorCodes`).
    public var requiresInteraction: Bool {
        guard kind == .rejected, let error = response?.error else { return false }
        return Self.interactionErrors.contains(error) || Self.interactionSuberrors.contains(response?.suberror ?? "")
    }

    /// The errors that mean: only the user can fix this.
    public static let interactionErrors: Set<String> = [
        "invalid_grant", "interaction_required", "login_required", "consent_required", "account_selection_required",
    ]
    static let interactionSuberrors: Set<String> = ["bad_token", "consent_required", "basic_action", "token_expired"]

    /// The kind and message, plus the provider's error and suberror.
    public var description: String {
        var text = message
        if let response {
            text += " (error=\(response.error)"
            if let suberror = response.suberror { text += ", suberror=\(suberror)" }
            if let first = response.errorCodes.first { text += ", AADSTS\(first)" }
            text += ")"
        }
        return text
    }

    /// Classifies an HTTP answer that is not a success: 429 throttled, 5xx unavailable, an OAuth error body
    /// rejected, anything else an invalid response.
    static func from(_ response: HTTPResponse, endpoint: String, now: Date) -> OAuthError {
        let parsed = OAuthErrorResponse(body: response.body)
        let retryAfter = response.header("Retry-After").flatMap { RetryAfter.parse($0, now: now) }
        switch response.status {
        case 429:
            return OAuthError(
                .throttled,
                "the identity provider is throttling requests to its \(endpoint) endpoint",
                response: parsed,
                status: 429,
                retryAfter: retryAfter
            )
        case 500...599:
            return OAuthError(
                .unavailable,
                "the identity provider's \(endpoint) endpoint failed with HTTP \(response.status)",
                response: parsed,
                status: response.status,
                retryAfter: retryAfter
            )
        default:
            guard let parsed else {
                return OAuthError(
                    .invalidResponse,
                    "the identity provider's \(endpoint) endpoint answered HTTP \(response.status) without an OAuth "
                        + "error",
                    status: response.status
                )
            }
            let description = parsed.errorDescription.map { ": \($0)" } ?? ""
            return OAuthError(
                .rejected,
                "the identity provider refused the request (\(parsed.error))\(description)",
                response: parsed,
                status: response.status,
                retryAfter: retryAfter
            )
        }
    }
}

/// The `Retry-After` header: seconds, or an HTTP date (RFC 9110 §10.2.3).
enum RetryAfter {
    static func parse(_ value: String, now: Date) -> Duration? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int64(trimmed) { return seconds >= 0 ? .seconds(seconds) : nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: trimmed) else { return nil }
        let seconds = max(0, date.timeIntervalSince(now))
        return .milliseconds(Int64(seconds * 1000))
    }
}
