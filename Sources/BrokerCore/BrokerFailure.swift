import BrokerCache
public import BrokerProtocol

/// Why the broker could not answer a request: an actionable ``ErrorCode``, a message for people, the
/// identity provider's details, and the underlying cause (for `debugDescription` and logs only).
public struct BrokerFailure: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// What the caller should do.
    public var code: ErrorCode
    /// What happened.
    ///
    /// Never contains a token, code or verifier.
    public var message: String
    /// The identity provider's `error`, `suberror`, the correlation id, a retry delay.
    public var details: ErrorData.Details
    /// What caused it inside the broker.
    public var underlying: (any Error)?

    /// Creates a failure.
    public init(
        _ code: ErrorCode,
        _ message: String,
        details: ErrorData.Details = .init(),
        underlying: (any Error)? = nil
    ) {
        self.code = code
        self.message = message
        self.details = details
        self.underlying = underlying
    }

    /// The wire form, stamped with the request's correlation id.
    public func errorObject(correlationId: String?) -> ErrorObject {
        var details = details
        if details.correlationId == nil { details.correlationId = correlationId }
        return ErrorObject(code, message, details: details)
    }

    /// `code: message`.
    public var description: String {
        "\(code): \(message)"
    }

    /// The description with the identity provider's details and the underlying error.
    public var debugDescription: String {
        var parts = [description]
        if let error = details.error { parts.append("error=\(error)") }
        if let suberror = details.suberror { parts.append("suberror=\(suberror)") }
        if let underlying { parts.append("underlying=\(String(reflecting: underlying))") }
        return parts.joined(separator: " ")
    }

    /// `cache_locked` for why the cache is locked (or `throttled` after wrong passphrases, or while another is tried),
    /// with what to do.
    static func locked(_ reason: KeyUnavailable?) -> BrokerFailure {
        guard let reason else { return BrokerFailure(.cacheLocked, "the cache is locked") }
        if let retryAfter = reason.retryAfter {
            let why = reason.problem == .wrongPassphrase ? "too many wrong passphrases" : "\(reason.problem)"
            return BrokerFailure(
                .throttled,
                "\(why): try again in \(retryAfter) s",
                details: .init(retryAfterSeconds: retryAfter)
            )
        }
        if case .wrongPassphrase = reason.problem {
            return BrokerFailure(.permissionDenied, "\(reason.problem); \(reason.hint)")
        }
        return BrokerFailure(.cacheLocked, "the cache is locked: \(reason.problem); \(reason.hint)")
    }

    package static func invalidParams(_ field: ParamField, _ message: String) -> BrokerFailure {
        BrokerFailure(.invalidParams, "\(field.path): \(message)", details: .init(field: field.path))
    }
}
