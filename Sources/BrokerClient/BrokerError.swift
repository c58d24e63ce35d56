public import BrokerProtocol

/// The one error the client library throws.
///
/// Switch on ``code``: each says what the app should do.
///
/// `description` is short and never contains a secret; `debugDescription` adds the broker's and the identity
/// provider's details (`error`, `suberror`, correlation id).
public struct BrokerError: Error, Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    /// What the app should do about an error.
    ///
    /// New codes may be added; treat unknown ones like ``internal``.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String, Sendable, Hashable {
            case interactionRequired = "interaction_required"
            case noAccount = "no_account"
            case userCanceled = "user_canceled"
            case serverError = "server_error"
            case unauthorizedClient = "unauthorized_client"
            case brokerBusy = "broker_busy"
            case throttled = "throttled"
            case invalidRequest = "invalid_request"
            case permissionDenied = "permission_denied"
            case unsupportedProtocolVersion = "unsupported_protocol_version"
            case invalidCache = "invalid_cache"
            case timeout = "timeout"
            case brokerUnavailable = "broker_unavailable"
            case connectionLost = "connection_lost"
            case brokerStopping = "broker_stopping"
            case cacheLocked = "cache_locked"
            case `internal` = "internal"
        }

        private let value: Value

        private init(_ value: Value) {
            self.value = value
        }

        /// Sign the user in interactively (`acquireToken`), then retry.
        public static let interactionRequired = Code(.interactionRequired)
        /// No account matches; sign in, or pick another account.
        public static let noAccount = Code(.noAccount)
        /// The user canceled the sign-in; do not retry unless the user asks.
        public static let userCanceled = Code(.userCanceled)
        /// The identity provider failed or could not be reached; retry later.
        public static let serverError = Code(.serverError)
        /// The identity provider refused this client id; fix the app registration.
        public static let unauthorizedClient = Code(.unauthorizedClient)
        /// The broker is at a limit; retry after a short pause.
        public static let brokerBusy = Code(.brokerBusy)
        /// Asked to slow down; wait ``BrokerError/retryAfterSeconds`` before retrying.
        public static let throttled = Code(.throttled)
        /// The request was malformed (a bug in the app or this library); the message names the field.
        public static let invalidRequest = Code(.invalidRequest)
        /// This process may not use the broker (another user's broker).
        public static let permissionDenied = Code(.permissionDenied)
        /// The broker speaks another major protocol version; upgrade one of the two.
        public static let unsupportedProtocolVersion = Code(.unsupportedProtocolVersion)
        /// An imported cache could not be read; nothing was imported.
        public static let invalidCache = Code(.invalidCache)
        /// The request ran out of time.
        public static let timeout = Code(.timeout)
        /// No broker answers on the socket: start it (`systemctl --user start tokenbrokerd.socket`).
        public static let brokerUnavailable = Code(.brokerUnavailable)
        /// The connection to the broker broke mid-request; reconnect and retry.
        public static let connectionLost = Code(.connectionLost)
        /// The broker stopped before the request finished (a shutdown or restart); retry, on a new connection.
        public static let brokerStopping = Code(.brokerStopping)
        /// The broker's cache is locked: its keyring locked, its TPM unreachable, its passphrase not given.
        ///
        /// The message says what the user can do (`tokenbroker unlock`). Retry after that; nothing was lost.
        public static let cacheLocked = Code(.cacheLocked)
        /// Something unexpected, in the broker or this library; retry once, then report it.
        public static let `internal` = Code(.internal)

        /// The code for a wire ``ErrorCode``.
        init(wire code: ErrorCode) {
            switch code {
            case .interactionRequired: self = .interactionRequired
            case .noAccount: self = .noAccount
            case .userCanceled: self = .userCanceled
            case .serverError: self = .serverError
            case .unauthorizedClient: self = .unauthorizedClient
            case .brokerBusy: self = .brokerBusy
            case .throttled: self = .throttled
            case .invalidParams, .invalidRequest, .parseError, .methodNotFound, .frameTooLarge: self = .invalidRequest
            case .permissionDenied: self = .permissionDenied
            case .unsupportedProtocolVersion: self = .unsupportedProtocolVersion
            case .invalidCache: self = .invalidCache
            case .timeout: self = .timeout
            case .brokerStopping: self = .brokerStopping
            case .cacheLocked: self = .cacheLocked
            default: self = .internal
            }
        }

        /// The code's name, such as `interaction_required`.
        public var description: String {
            value.rawValue
        }
    }

    /// What the app should do.
    public let code: Code
    /// What happened, for people.
    ///
    /// Never contains a secret.
    public let message: String
    /// The broker's error data: its code, the identity provider's `error` and `suberror`, the correlation id.
    public let details: ErrorData?

    /// Creates an error.
    public init(_ code: Code, _ message: String, details: ErrorData? = nil) {
        self.code = code
        self.message = message
        self.details = details
    }

    /// The error for a broker's error response.
    init(_ error: ErrorObject) {
        self.init(Code(wire: error.errorCode), error.message, details: error.data)
    }

    /// For ``Code/throttled`` and ``Code/brokerBusy``: how long to wait, when the broker said.
    public var retryAfterSeconds: Int? {
        details?.retryAfterSeconds
    }

    /// `code: message`.
    public var description: String {
        "\(code): \(message)"
    }

    /// The description plus the identity provider's details and the correlation id.
    public var debugDescription: String {
        var parts = [description]
        if let details {
            parts.append("errorCode=\(details.errorCode)")
            if let error = details.error { parts.append("error=\(error)") }
            if let suberror = details.suberror { parts.append("suberror=\(suberror)") }
            if let correlationId = details.correlationId { parts.append("correlationId=\(correlationId)") }
        }
        return parts.joined(separator: " ")
    }
}
