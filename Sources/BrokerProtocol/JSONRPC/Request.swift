#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A JSON-RPC 2.0 request as a client sends it.
public struct Request<Params: Encodable & Sendable>: Encodable, Sendable {
    /// Always `2.0`.
    public let jsonrpc = "2.0"
    /// Echoed in the response.
    public var id: RequestID
    /// The method to call.
    public var method: MethodName
    /// The method's params object.
    public var params: Params

    /// Creates a request.
    public init(id: RequestID, method: MethodName, params: Params) {
        self.id = id
        self.method = method
        self.params = params
    }

    private enum CodingKeys: String, CodingKey {
        case jsonrpc, id, method, params
    }
}

/// A decoded request as the broker receives it: the id, and the call with typed params.
public struct IncomingRequest: Sendable {
    /// The request's id; nil only for notifications (a null id is refused as `invalid_request`).
    public var id: RequestID?
    /// Whether the request had no `id` member: a JSON-RPC notification, run but never answered.
    public var isNotification: Bool
    /// The call and its params.
    public var call: Call

    /// Creates a request.
    public init(id: RequestID?, isNotification: Bool = false, call: Call) {
        self.id = id
        self.isNotification = isNotification
        self.call = call
    }

    /// Every method with its typed params.
    public enum Call: Sendable {
        case getLinuxBrokerVersion(GetVersionParams)
        case getAccounts(GetAccountsParams)
        case getAccount(GetAccountParams)
        case acquireTokenSilently(AcquireTokenSilentlyParams)
        case acquireTokenInteractively(AcquireTokenInteractivelyParams)
        case completeInteractiveFlow(CompleteInteractiveFlowParams)
        case cancelInteractiveFlow(CancelInteractiveFlowParams)
        case removeAccount(RemoveAccountParams)
        case importCache(ImportCacheParams)
        case exportCache(ExportCacheParams)
        case getStatus(GetStatusParams)

        /// The method called.
        public var method: MethodName {
            switch self {
            case .getLinuxBrokerVersion: .getLinuxBrokerVersion
            case .getAccounts: .getAccounts
            case .getAccount: .getAccount
            case .acquireTokenSilently: .acquireTokenSilently
            case .acquireTokenInteractively: .acquireTokenInteractively
            case .completeInteractiveFlow: .completeInteractiveFlow
            case .cancelInteractiveFlow: .cancelInteractiveFlow
            case .removeAccount: .removeAccount
            case .importCache: .importCache
            case .exportCache: .exportCache
            case .getStatus: .getStatus
            }
        }

        /// Gives the call a correlation id when the caller sent none (a new UUID), and returns the one in effect.
        public mutating func ensureCorrelationId() -> String {
            if let existing = correlationId { return existing }
            let generated = UUID().uuidString
            switch self {
            case .getLinuxBrokerVersion(var params):
                params.correlationId = generated
                self = .getLinuxBrokerVersion(params)
            case .getAccounts(var params):
                params.correlationId = generated
                self = .getAccounts(params)
            case .getAccount(var params):
                params.correlationId = generated
                self = .getAccount(params)
            case .acquireTokenSilently(var params):
                params.correlationId = generated
                self = .acquireTokenSilently(params)
            case .acquireTokenInteractively(var params):
                params.correlationId = generated
                self = .acquireTokenInteractively(params)
            case .completeInteractiveFlow, .cancelInteractiveFlow:
                // These name the flow by its correlation id, which is required: they always have one.
                break
            case .removeAccount(var params):
                params.correlationId = generated
                self = .removeAccount(params)
            case .importCache(var params):
                params.correlationId = generated
                self = .importCache(params)
            case .exportCache(var params):
                params.correlationId = generated
                self = .exportCache(params)
            case .getStatus(var params):
                params.correlationId = generated
                self = .getStatus(params)
            }
            return generated
        }

        /// The correlation id the caller sent, if any.
        public var correlationId: String? {
            switch self {
            case .getLinuxBrokerVersion(let params): params.correlationId
            case .getAccounts(let params): params.correlationId
            case .getAccount(let params): params.correlationId
            case .acquireTokenSilently(let params): params.correlationId
            case .acquireTokenInteractively(let params): params.correlationId
            case .completeInteractiveFlow(let params): params.correlationId
            case .cancelInteractiveFlow(let params): params.correlationId
            case .removeAccount(let params): params.correlationId
            case .importCache(let params): params.correlationId
            case .exportCache(let params): params.correlationId
            case .getStatus(let params): params.correlationId
            }
        }
    }
}

/// Why a message could not be taken as a request, with the id to answer to (when one could be read).
public struct RequestRejection: Error, Sendable {
    /// The id to put in the error response; nil answers with `"id": null`.
    public var id: RequestID?
    /// The error to send.
    public var error: ErrorObject
    /// Whether the message was a JSON-RPC notification (no `id`), which gets no answer even when invalid.
    public var isNotification: Bool

    /// Creates a rejection.
    public init(id: RequestID?, error: ErrorObject, isNotification: Bool) {
        self.id = id
        self.error = error
        self.isNotification = isNotification
    }
}
