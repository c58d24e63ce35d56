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
    public var call: any MethodCall

    /// Creates a request.
    public init(id: RequestID?, isNotification: Bool = false, call: any MethodCall) {
        self.id = id
        self.isNotification = isNotification
        self.call = call
    }

    /// The params of the call when it is a call of `method`.
    public func params<Method: BrokerMethod>(of method: Method.Type) -> Method.Params? {
        (call as? Call<Method>)?.params
    }
}

/// A call of one method with its typed params, as a request carries it.
public protocol MethodCall: Sendable {
    /// The method called.
    associatedtype Method: BrokerMethod
    /// Its params.
    var params: Method.Params { get set }
}

/// The call of `Method`.
public struct Call<Method: BrokerMethod>: MethodCall {
    /// The params sent (or the method's defaults when none were).
    public var params: Method.Params

    /// Creates a call.
    public init(_ params: Method.Params) {
        self.params = params
    }
}

extension MethodCall {
    /// The method called.
    public var method: MethodName { Method.name }

    /// The correlation id the caller sent, if any.
    public var correlationId: String? { params.sentCorrelationId }

    /// Gives the call a correlation id when the caller sent none (a new UUID), and returns the one in effect.
    public mutating func ensureCorrelationId() -> String {
        if let existing = params.sentCorrelationId { return existing }
        let generated = WireProtocol.newCorrelationId()
        params.adoptCorrelationId(generated)
        return generated
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
