import NIOHTTP1

/// A queued fault for the token endpoint: answer the next matching requests with an error, or just slowly.
struct Fault: Sendable {
    /// How many more requests this fault applies to.
    var remaining: Int

    /// The HTTP status; a 2xx status means "answer normally" (with `delay`).
    let status: Int

    /// The OAuth `error`.
    let error: String

    /// The `suberror`, if any.
    let suberror: String?

    /// The `error_description`; a default naming the fault when nil.
    let errorDescription: String?

    /// The `error_codes` entry; chosen from `error` when nil.
    let errorCode: Int?

    /// The `Retry-After` header value in seconds, if any.
    let retryAfter: Int?

    /// Only requests with this `grant_type` are affected; nil means all.
    let grantType: String?

    /// How long the affected answer waits.
    let delay: Duration

    /// Whether the request is answered normally (only delayed).
    var passesThrough: Bool { (200..<300).contains(status) }

    /// Whether this fault applies to a request with `grantType`.
    func matches(grantType requested: String?) -> Bool {
        grantType == nil || grantType == requested
    }

    /// The error this fault answers with.
    var entraError: EntraError {
        let code = errorCode ?? Self.defaultCode(for: error)
        var failure = EntraError(
            error: error,
            description: errorDescription ?? "AADSTS\(code): Injected fault: \(error) (HTTP \(status)).",
            codes: [code],
            suberror: suberror,
            status: HTTPResponseStatus(statusCode: status)
        )
        failure.retryAfter = retryAfter
        failure.appendsTrace = errorDescription == nil
        return failure
    }

    private static func defaultCode(for error: String) -> Int {
        switch error {
        case "invalid_grant": 70000
        case "interaction_required": 50076
        case "invalid_client", "unauthorized_client": 700_016
        case "invalid_request": 900_144
        case "invalid_scope": 70011
        case "consent_required": 65001
        default: 90033
        }
    }
}
