/// The `error` member of a JSON-RPC error response.
///
/// `message` is for people and may change between versions; programs branch on `data.errorCode`.
/// Neither ever contains a token, code or verifier.
public struct ErrorObject: Sendable, Hashable, Codable, Error {
    /// The JSON-RPC number (see ``ErrorCode/rpcCode``).
    public var code: Int
    /// A short sentence for people.
    public var message: String
    /// The broker's code and the identity provider's details.
    public var data: ErrorData?

    /// Creates an error for `errorCode`, with its JSON-RPC number.
    public init(_ errorCode: ErrorCode, _ message: String, details: ErrorData.Details = .init()) {
        self.code = errorCode.rpcCode
        self.message = message
        self.data = ErrorData(errorCode: errorCode, details: details)
    }

    /// The broker's code, falling back to the JSON-RPC number when `data` is missing.
    public var errorCode: ErrorCode {
        if let code = data?.errorCode { return code }
        return ErrorCode.all.first { $0.rpcCode == code } ?? .internalError
    }
}

/// The `data` member of a JSON-RPC error: the actionable code plus what the identity provider said.
public struct ErrorData: Sendable, Hashable, Codable {
    /// What the caller should do (see ``ErrorCode``).
    public var errorCode: ErrorCode
    /// The OAuth `error` the identity provider answered, such as `invalid_grant`.
    public var error: String?
    /// The identity provider's `suberror`, such as `bad_token` or `client_mismatch`.
    public var suberror: String?
    /// The identity provider's own `error_description`, when it gave one (never contains a secret we sent).
    public var errorDescription: String?
    /// The correlation id of the request that failed.
    public var correlationId: String?
    /// For ``ErrorCode/throttled`` and ``ErrorCode/brokerBusy``: how long to wait before retrying.
    public var retryAfterSeconds: Int?
    /// For ``ErrorCode/invalidParams``: the path of the offending field, such as `params.authParameters.clientId`.
    public var field: String?

    /// The optional members of ``ErrorData``, grouped so call sites name only what they have.
    public struct Details: Sendable, Hashable {
        /// See ``ErrorData/error``.
        public var error: String?
        /// See ``ErrorData/suberror``.
        public var suberror: String?
        /// See ``ErrorData/errorDescription``.
        public var errorDescription: String?
        /// See ``ErrorData/correlationId``.
        public var correlationId: String?
        /// See ``ErrorData/retryAfterSeconds``.
        public var retryAfterSeconds: Int?
        /// See ``ErrorData/field``.
        public var field: String?

        /// Creates details; every member is optional.
        public init(
            error: String? = nil,
            suberror: String? = nil,
            errorDescription: String? = nil,
            correlationId: String? = nil,
            retryAfterSeconds: Int? = nil,
            field: String? = nil
        ) {
            self.error = error
            self.suberror = suberror
            self.errorDescription = errorDescription
            self.correlationId = correlationId
            self.retryAfterSeconds = retryAfterSeconds
            self.field = field
        }
    }

    /// Creates the data for `errorCode` with `details`.
    public init(errorCode: ErrorCode, details: Details = .init()) {
        self.errorCode = errorCode
        self.error = details.error
        self.suberror = details.suberror
        self.errorDescription = details.errorDescription
        self.correlationId = details.correlationId
        self.retryAfterSeconds = details.retryAfterSeconds
        self.field = details.field
    }
}
