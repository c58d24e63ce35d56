import BrokerCore
import BrokerProtocol
import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Turns requests into responses: decode, call the broker, encode.
///
/// Never throws: every failure becomes the documented JSON-RPC error.
struct Dispatcher: Sendable {
    let broker: TokenBroker
    let metrics: ServerMetrics
    let status: @Sendable () -> StatusResult
    let logger: Logger
    private let decoder = RequestDecoder()

    init(broker: TokenBroker, metrics: ServerMetrics, logger: Logger, status: @escaping @Sendable () -> StatusResult) {
        self.broker = broker
        self.metrics = metrics
        self.logger = logger
        self.status = status
    }

    /// Whether a request was answered at once.
    enum ImmediateAnswer {
        /// Answered; nil for a JSON-RPC notification, which gets no response.
        case answered(ByteBuffer?)
        /// The request must run in a task (it may wait on the identity provider, the disk or the user).
        case needsTask
    }

    /// Frames larger than this are decoded off the event loop (``decodeOffLoop(_:)``): a loop serves many
    /// connections, and parsing a megabyte takes long enough to keep them all waiting.
    static let largeFrameBytes = 64 << 10

    func decode(_ frame: ByteBuffer) -> Result<IncomingRequest, RequestRejection> {
        decoder.decode(Array(frame.readableBytesView))
    }

    /// Decodes a large frame on NIO's thread pool, with a correlation id filled in.
    func decodeOffLoop(_ frame: ByteBuffer) async -> Result<IncomingRequest, RequestRejection> {
        let decoder = decoder
        let decoded = try? await NIOThreadPool.singleton.runIfActive {
            decoder.decode(Array(frame.readableBytesView))
        }
        guard var decoded else {
            return .failure(
                RequestRejection(
                    id: nil,
                    error: ErrorObject(.brokerStopping, "the broker is stopping"),
                    isNotification: false
                )
            )
        }
        if case .success(var request) = decoded {
            _ = request.call.ensureCorrelationId()
            decoded = .success(request)
        }
        return decoded
    }

    /// The error response for a message that was not a valid request (none for an invalid notification).
    func response(to rejection: RequestRejection) -> ByteBuffer? {
        metrics.recordError(method: "", error: rejection.error, correlationId: nil)
        logger.debug("refused a message", metadata: ["error": "\(rejection.error.message)"])
        return rejection.isNotification ? nil : Self.encode(ErrorResponse(id: rejection.id, error: rejection.error))
    }

    /// The response when it needs nothing but memory: version, accounts, status, and a token the cache holds.
    func answerImmediately(_ request: IncomingRequest, caller: Caller) -> ImmediateAnswer {
        let id = request.id
        do throws(BrokerFailure) {
            let response: ByteBuffer
            switch request.call {
            case .getLinuxBrokerVersion(let params):
                response = Self.encode(Response(id: id, result: try broker.version(params)))
            case .getAccounts(let params):
                response = Self.encode(Response(id: id, result: try broker.accounts(params)))
            case .getAccount(let params):
                response = Self.encode(Response(id: id, result: try broker.account(params)))
            case .getStatus:
                response = Self.encode(Response(id: id, result: status()))
            case .acquireTokenSilently(let params):
                guard let result = try broker.cachedToken(params, caller: caller) else { return .needsTask }
                response = Self.encode(Response(id: id, result: result))
            case .acquireTokenInteractively, .completeInteractiveFlow, .cancelInteractiveFlow, .removeAccount,
                .importCache, .exportCache:
                return .needsTask
            }
            metrics.succeeded.add(1, ordering: .relaxed)
            return .answered(request.isNotification ? nil : response)
        } catch {
            return .answered(failure(error, for: request))
        }
    }

    /// The response to a request that may wait; nil for a notification.
    ///
    /// `owner` receives the notifications of an interactive request, and names the connection that runs it.
    func answer(_ request: IncomingRequest, caller: Caller, owner: FlowOwner) async -> ByteBuffer? {
        let id = request.id
        do throws(BrokerFailure) {
            let response: ByteBuffer
            switch request.call {
            case .acquireTokenSilently(let params):
                response = Self.encode(
                    Response(id: id, result: try await broker.acquireTokenSilently(params, caller: caller))
                )
            case .removeAccount(let params):
                response = Self.encode(Response(id: id, result: try await broker.removeAccount(params, caller: caller)))
            case .importCache(let params):
                response = Self.encode(Response(id: id, result: try await broker.importCache(params, caller: caller)))
            case .exportCache(let params):
                response = Self.encode(Response(id: id, result: try await broker.exportCache(params, caller: caller)))
            case .acquireTokenInteractively(let params):
                let result = try await broker.acquireTokenInteractively(params, caller: caller, owner: owner)
                response = Self.encode(Response(id: id, result: result))
            case .completeInteractiveFlow(let params):
                response = Self.encode(Response(id: id, result: try await broker.completeInteractiveFlow(params)))
            case .cancelInteractiveFlow(let params):
                response = Self.encode(Response(id: id, result: await broker.cancelInteractiveFlow(params)))
            case .getLinuxBrokerVersion, .getAccounts, .getAccount, .getStatus:
                guard case .answered(let response) = answerImmediately(request, caller: caller) else { return nil }
                return response
            }
            metrics.succeeded.add(1, ordering: .relaxed)
            return request.isNotification ? nil : response
        } catch {
            return failure(error, for: request)
        }
    }

    /// An error response for a request the server will not run now (busy).
    func reject(_ request: IncomingRequest, with error: ErrorObject) -> ByteBuffer? {
        metrics.recordError(
            method: request.call.method.rawValue,
            error: error,
            correlationId: request.call.correlationId
        )
        return request.isNotification ? nil : Self.encode(ErrorResponse(id: request.id, error: error))
    }

    private func failure(_ error: BrokerFailure, for request: IncomingRequest) -> ByteBuffer? {
        let correlationId = request.call.correlationId
        let object = error.errorObject(correlationId: correlationId)
        metrics.recordError(method: request.call.method.rawValue, error: object, correlationId: correlationId)
        logger.debug(
            "request failed",
            metadata: [
                "method": "\(request.call.method.rawValue)",
                "error": "\(error)",
                "correlation_id": "\(correlationId ?? "")",
            ]
        )
        return request.isNotification ? nil : Self.encode(ErrorResponse(id: request.id, error: object))
    }

    /// A notification as one line of JSON.
    static func encode(_ notification: ServerNotification) -> ByteBuffer {
        switch notification {
        case .webAuthDidStartLoad(let params): encode(NotificationMessage(method: .webAuthDidStartLoad, params: params))
        case .webAuthDidFinishLoad(let params):
            encode(NotificationMessage(method: .webAuthDidFinishLoad, params: params))
        case .webAuthDidFail(let params): encode(NotificationMessage(method: .webAuthDidFail, params: params))
        case .webAuthDidComplete(let params): encode(NotificationMessage(method: .webAuthDidComplete, params: params))
        case .deviceCodePrompt(let params): encode(NotificationMessage(method: .deviceCodePrompt, params: params))
        case .unknown: ByteBuffer()
        }
    }

    /// One line of JSON, through the wire encoder.
    ///
    /// Encoding the protocol's own types does not fail; if it ever did, the client still gets an answer.
    static func encode(_ value: some Encodable) -> ByteBuffer {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(1024)
        do {
            try WireEncoder().encode(value, into: &bytes)
            bytes.append(UInt8(ascii: "\n"))
            return ByteBuffer(bytes: bytes)
        } catch {
            return ByteBuffer(string: Self.encodingFailure)
        }
    }

    private static let encodingFailure =
        #"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"the response could not be encoded"}}"# + "\n"
}
