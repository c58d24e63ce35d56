import BrokerCore
import BrokerProtocol
import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Turns requests into responses: decode, find the method's handler in the table, answer, encode.
///
/// Never throws: every failure becomes the documented JSON-RPC error.
struct Dispatcher: Sendable {
    let broker: TokenBroker
    let handlers: MethodHandlers
    let metrics: ServerMetrics
    let logger: Logger
    private let decoder = RequestDecoder()
    private let silentRequests = SilentRequestMemo()

    init(
        broker: TokenBroker,
        additionalHandlers: MethodHandlers = MethodHandlers(),
        metrics: ServerMetrics,
        logger: Logger,
        status: @escaping @Sendable () -> StatusResult
    ) {
        self.broker = broker
        var handlers = broker.handlers(status: status)
        handlers.add(additionalHandlers)
        self.handlers = handlers
        self.metrics = metrics
        self.logger = logger
    }

    /// What the request needs: nothing more (answered, or a notification that gets no answer), or a task.
    enum Prepared {
        /// Answered; nil for a JSON-RPC notification, which gets no response.
        case answered(ByteBuffer?)
        /// The rest runs in a task (it may wait on the identity provider, the disk or the user).
        case later(PendingRequest)
    }

    /// Frames larger than this are decoded off the event loop (``decodeOffLoop(_:)``): a loop serves many
    /// connections, and parsing a megabyte takes long enough to keep them all waiting.
    static let largeFrameBytes = 64 << 10

    /// Answers a frame on the event loop: a remembered cached-token answer when the frame is a plain silent
    /// request that has one (see ``SilentRequestMemo`` and ``SilentRequestReader``), else whatever ``prepare(_:caller:onEventLoop:)`` does
    /// with the decoded request, or the rejection of one that does not decode.
    ///
    /// `last` is the connection's own: the remembered request it answered last, and that answer, which the same
    /// request takes again while it holds.
    func answerOnEventLoop(_ frame: ByteBuffer, caller: Caller, last: inout LastAnswer?) -> Prepared {
        // Read in place: a remembered request needs neither a copy of its line nor of its parameters.
        if let (id, request) = frame.withUnsafeReadableBytes({ silentRequests.remembered($0) }) {
            var held = last?.request === request ? last?.held : nil
            let correlationId = request.params.correlationId
            let answer = rememberedAnswer(
                id: id,
                key: request.key,
                correlationId: correlationId,
                caller: caller,
                held: &held
            )
            last = held.map { LastAnswer(request: request, held: $0) }
            if let answer { return answer }
            let call = Call<Methods.AcquireTokenSilently>(request.params)
            return prepare(IncomingRequest(id: id, call: call), caller: caller, onEventLoop: true)
        }
        let bytes = Array(frame.readableBytesView)
        if let (id, params, key) = silentRequests.readAndRemember(bytes) {
            var held: HeldAnswer?
            if let answer = rememberedAnswer(
                id: id,
                key: key,
                correlationId: params.correlationId,
                caller: caller,
                held: &held
            ) {
                return answer
            }
            let call = Call<Methods.AcquireTokenSilently>(params)
            return prepare(IncomingRequest(id: id, call: call), caller: caller, onEventLoop: true)
        }
        switch decoder.decode(bytes) {
        case .failure(let rejection): return .answered(response(to: rejection))
        case .success(let request): return prepare(request, caller: caller, onEventLoop: true)
        }
    }

    /// The remembered answer of a plain silent request (see
    /// ``TokenBroker/rememberedAnswer(for:correlationId:id:caller:held:)``).
    private func rememberedAnswer(
        id: RequestID,
        key: HashedAuthParameters,
        correlationId: String?,
        caller: Caller,
        held: inout HeldAnswer?
    ) -> Prepared? {
        guard
            let line = broker.rememberedAnswer(
                for: key,
                correlationId: correlationId,
                id: id,
                caller: caller,
                held: &held
            )
        else { return nil }
        metrics.succeeded.add(1, ordering: .relaxed)
        // Written straight into the buffer the socket sends from: no array in between.
        let room = line.maximumByteCount
        var response = ByteBufferAllocator().buffer(capacity: room)
        response.writeWithUnsafeMutableBytes(minimumWritableBytes: room) { line.write(into: $0) }
        return .answered(response)
    }

    /// Decodes a large frame on NIO's thread pool.
    func decodeOffLoop(_ frame: ByteBuffer) async -> Result<IncomingRequest, RequestRejection> {
        let decoder = decoder
        let decoded = try? await NIOThreadPool.singleton.runIfActive {
            decoder.decode(Array(frame.readableBytesView))
        }
        return decoded
            ?? .failure(
                RequestRejection(
                    id: nil,
                    error: ErrorObject(.brokerStopping, "the broker is stopping"),
                    isNotification: false
                )
            )
    }

    /// The error response for a message that was not a valid request (none for an invalid notification).
    func response(to rejection: RequestRejection) -> ByteBuffer? {
        metrics.recordError(method: "", error: rejection.error, correlationId: nil)
        logger.debug("refused a message", metadata: ["error": "\(rejection.error.message)"])
        return rejection.isNotification ? nil : Self.encode(ErrorResponse(id: rejection.id, error: rejection.error))
    }

    /// Gives the request a correlation id (the client's, or a new one: DESIGN §3), then answers it from memory
    /// when its method may be answered so and the handler can; otherwise hands the rest to a task.
    ///
    /// `onEventLoop` false (a request decoded in a task) always answers in the task.
    func prepare(_ request: IncomingRequest, caller: Caller, onEventLoop: Bool) -> Prepared {
        var call = request.call
        _ = call.ensureCorrelationId()
        return prepare(
            call,
            header: RequestHeader(request, correlationId: call.correlationId),
            caller: caller,
            onEventLoop
        )
    }

    private func prepare<Call: MethodCall>(
        _ call: Call,
        header: RequestHeader,
        caller: Caller,
        _ onEventLoop: Bool
    ) -> Prepared {
        guard let handler = handlers.handler(for: Call.Method.self) else {
            let error = ErrorObject(.methodNotFound, "this broker does not serve \(header.method.rawValue)")
            metrics.recordError(method: header.method.rawValue, error: error, correlationId: header.correlationId)
            return .answered(header.isNotification ? nil : Self.encode(ErrorResponse(id: header.id, error: error)))
        }
        let params = call.params
        guard onEventLoop, Call.Method.answersFromMemory else {
            return .later(
                PendingRequest(header: header) { owner in
                    do throws(BrokerFailure) {
                        let result = try await handler.answer(params, caller).value(owner: owner)
                        return self.success(result, header)
                    } catch {
                        return self.failure(error, header)
                    }
                }
            )
        }
        do throws(BrokerFailure) {
            switch try handler.answer(params, caller) {
            case .now(let result):
                return .answered(success(result, header))
            case .later(let work):
                return .later(
                    PendingRequest(header: header) { owner in
                        do throws(BrokerFailure) {
                            return self.success(try await work(owner), header)
                        } catch {
                            return self.failure(error, header)
                        }
                    }
                )
            }
        } catch {
            return .answered(failure(error, header))
        }
    }

    /// An error response for a request the server will not run now (busy).
    func reject(_ header: RequestHeader, with error: ErrorObject) -> ByteBuffer? {
        metrics.recordError(method: header.method.rawValue, error: error, correlationId: header.correlationId)
        return header.isNotification ? nil : Self.encode(ErrorResponse(id: header.id, error: error))
    }

    private func success<Result: Encodable & Sendable>(_ result: Result, _ header: RequestHeader) -> ByteBuffer? {
        metrics.succeeded.add(1, ordering: .relaxed)
        return header.isNotification ? nil : Self.encode(Response(id: header.id, result: result))
    }

    private func failure(_ error: BrokerFailure, _ header: RequestHeader) -> ByteBuffer? {
        let object = error.errorObject(correlationId: header.correlationId)
        metrics.recordError(method: header.method.rawValue, error: object, correlationId: header.correlationId)
        logger.debug(
            "request failed",
            metadata: [
                "method": "\(header.method.rawValue)",
                "error": "\(error)",
                "correlation_id": "\(header.correlationId ?? "")",
            ]
        )
        return header.isNotification ? nil : Self.encode(ErrorResponse(id: header.id, error: object))
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

/// A connection's last remembered answer: the memo's request it answered, and the answer.
struct LastAnswer {
    let request: SilentRequestMemo.Request
    let held: HeldAnswer
}

/// What the server keeps of a request once its params went to the handler: how to answer it.
struct RequestHeader: Sendable {
    let id: RequestID?
    let isNotification: Bool
    let method: MethodName
    let correlationId: String?

    init(_ request: IncomingRequest, correlationId: String?) {
        id = request.id
        isNotification = request.isNotification
        method = request.call.method
        self.correlationId = correlationId
    }
}

/// A request whose answer needs a task: the rest of its work, continuing from what the event loop found.
struct PendingRequest: Sendable {
    let header: RequestHeader
    /// Runs the rest; returns the response line (nil for a notification).
    let run: @Sendable (FlowOwner) async -> ByteBuffer?
}
