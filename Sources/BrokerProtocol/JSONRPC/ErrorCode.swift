/// What went wrong, as a caller can act on it: the `data.errorCode` of every error, and its JSON-RPC `code`.
///
/// The set is small on purpose (MSAL's `MSALError` is the model): each code says what the caller should do.
/// Identity-provider details (`error`, `suberror`) ride along in ``ErrorData`` and never replace the code.
/// New codes may be added in a minor protocol version; a caller treats an unknown code as ``internalError``.
public struct ErrorCode: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The wire name, such as `interaction_required`.
    public let name: String

    /// Creates a code from its wire name.
    public init(_ name: String) {
        self.name = name
    }

    /// The message was not valid JSON.
    ///
    /// Fix the client.
    public static let parseError = ErrorCode("parse_error")
    /// The message was JSON but not a valid JSON-RPC 2.0 request.
    ///
    /// Fix the client.
    public static let invalidRequest = ErrorCode("invalid_request")
    /// No method of that name.
    ///
    /// Check ``MethodName`` and the protocol version.
    public static let methodNotFound = ErrorCode("method_not_found")
    /// The params are missing a field, carry a wrong type or an impossible value.
    ///
    /// The message names the field.
    public static let invalidParams = ErrorCode("invalid_params")
    /// A bug or an unexpected condition inside the broker.
    ///
    /// Retry once; report it if it persists.
    public static let internalError = ErrorCode("internal_error")
    /// The broker cannot get a token without the user: sign in interactively (`acquireTokenInteractively`).
    public static let interactionRequired = ErrorCode("interaction_required")
    /// No account matches the identifier or username given (or none is signed in).
    ///
    /// Sign in, or pick another.
    public static let noAccount = ErrorCode("no_account")
    /// The user or the app canceled the interactive sign-in.
    ///
    /// Do not retry without the user asking.
    public static let userCanceled = ErrorCode("user_canceled")
    /// The identity provider failed or could not be reached.
    ///
    /// Retry later; `data.error` says what it answered.
    public static let serverError = ErrorCode("server_error")
    /// The identity provider refused this client id for this request.
    ///
    /// Fix the app registration.
    public static let unauthorizedClient = ErrorCode("unauthorized_client")
    /// The broker is at a limit (connections, requests in flight).
    ///
    /// Retry after a short pause.
    public static let brokerBusy = ErrorCode("broker_busy")
    /// A message was larger than ``Limits/maximumFrameBytes``.
    ///
    /// The connection is closed. Send less.
    public static let frameTooLarge = ErrorCode("frame_too_large")
    /// The request, or an idle or half-sent connection, ran out of time.
    ///
    /// Retry; the connection may be closed.
    public static let timeout = ErrorCode("timeout")
    /// The peer is not allowed to use this broker (another Unix user).
    ///
    /// Nothing to retry.
    public static let permissionDenied = ErrorCode("permission_denied")
    /// The client's protocol major version is not served here.
    ///
    /// Upgrade the client or the broker.
    public static let unsupportedProtocolVersion = ErrorCode("unsupported_protocol_version")
    /// An imported cache was unreadable as a whole.
    ///
    /// Nothing was imported; the message says why.
    public static let invalidCache = ErrorCode("invalid_cache")
    /// The identity provider asked us to slow down, or the same failure repeats.
    ///
    /// Wait `data.retryAfterSeconds`.
    public static let throttled = ErrorCode("throttled")
    /// The broker stopped (a shutdown, an idle exit, a restart) before the request could finish; nothing was
    /// decided about it.
    ///
    /// Retry: under systemd the next connection starts the broker again.
    public static let brokerStopping = ErrorCode("broker_stopping")
    /// The cache's key cannot be had now (the keyring locked, the TPM unreachable, the passphrase not given):
    /// nothing sealed is served; the message says what to do.
    ///
    /// Retry after the user acted (`tokenbroker unlock`, unlocking the keyring); nothing was lost.
    public static let cacheLocked = ErrorCode("cache_locked")

    /// Every code this version of the protocol defines, with its JSON-RPC number.
    public static let all: [ErrorCode] = [
        .parseError, .invalidRequest, .methodNotFound, .invalidParams, .internalError, .interactionRequired,
        .noAccount, .userCanceled, .serverError, .unauthorizedClient, .brokerBusy, .frameTooLarge, .timeout,
        .permissionDenied, .unsupportedProtocolVersion, .invalidCache, .throttled, .brokerStopping,
        .cacheLocked,
    ]

    /// The JSON-RPC `error.code` that goes with this code: the standard -327xx/-326xx numbers for the
    /// JSON-RPC errors, -32000 downwards for the broker's own.
    public var rpcCode: Int {
        switch name {
        case "parse_error": -32700
        case "invalid_request": -32600
        case "method_not_found": -32601
        case "invalid_params": -32602
        case "internal_error": -32603
        case "interaction_required": -32000
        case "no_account": -32001
        case "user_canceled": -32002
        case "server_error": -32003
        case "unauthorized_client": -32004
        case "broker_busy": -32005
        case "frame_too_large": -32006
        case "timeout": -32007
        case "permission_denied": -32008
        case "unsupported_protocol_version": -32009
        case "invalid_cache": -32010
        case "throttled": -32011
        case "broker_stopping": -32012
        case "cache_locked": -32013
        default: -32603
        }
    }

    /// The wire name.
    public var description: String {
        name
    }

    /// Decodes the wire name.
    public init(from decoder: any Decoder) throws {
        name = try decoder.singleValueContainer().decode(String.self)
    }

    /// Encodes the wire name.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(name)
    }
}
