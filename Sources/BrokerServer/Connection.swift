import BrokerCore
import BrokerProtocol
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// What every connection shares.
struct ConnectionSettings: Sendable {
    let configuration: ServerConfiguration
    let dispatcher: Dispatcher
    let logger: Logger
}

/// One client connection's async side: runs each request the event loop could not answer at once in its own
/// task (so a slow sign-in never blocks other requests on the connection), and ends the connection on an
/// oversized frame, idleness, or graceful shutdown.
struct Connection: Sendable {
    let accepted: AcceptedConnection
    let settings: ConnectionSettings
    let metrics: ServerMetrics

    /// Answers with one error line and closes: for peers that may not be served.
    func refuse(_ error: ErrorObject) async {
        let channel = accepted.channel.channel
        try? await accepted.channel.executeThenClose { _, _ in
            try await channel.writeAndFlush(Dispatcher.encode(ErrorResponse(id: nil, error: error)))
        }
    }

    /// Serves the connection until the peer closes it, it idles out, it breaks a limit, or the server drains.
    ///
    /// Never throws: whatever goes wrong ends this connection only.
    func run() async {
        let caller = accepted.caller
        let channel = accepted.channel.channel
        do {
            try await accepted.channel.executeThenClose { inbound, _ in
                try await withGracefulShutdownHandler {
                    try await serve(inbound: inbound, channel: channel, caller: caller)
                } onGracefulShutdown: {
                    // Read no more requests; the ones in flight still get their answers.
                    channel.close(mode: .input, promise: nil)
                }
            }
        } catch {
            settings.logger.debug("connection ended", metadata: ["pid": "\(caller.pid)", "reason": "\(error)"])
        }
    }

    private func serve(
        inbound: NIOAsyncChannelInboundStream<ConnectionEvent>,
        channel: any Channel,
        caller: Caller
    ) async throws {
        let inFlight = RequestCount()
        let limit = settings.configuration.maximumRequestsPerConnection
        let dispatcher = settings.dispatcher
        let serial = metrics.connectionSerial.add(1, ordering: .relaxed).newValue
        let owner = FlowOwner(connection: serial) { notification in
            // A peer that went away misses its notifications; the request's own answer fails the same way.
            try? await channel.writeAndFlush(Dispatcher.encode(notification))
        }
        let busy = ErrorObject(
            .brokerBusy,
            "\(limit) requests are already in flight on this connection, the most it takes; retry when one is answered",
            details: .init(retryAfterSeconds: 1)
        )
        try await withThrowingDiscardingTaskGroup { requests in
            reading: for try await event in inbound {
                switch event {
                case .request(let pending):
                    guard inFlight.value < limit else {
                        if let response = dispatcher.reject(pending.header, with: busy) {
                            try await channel.writeAndFlush(response)
                        }
                        continue
                    }
                    start(in: &requests, counting: inFlight, answeringOn: channel, for: owner) { owner in
                        await pending.run(owner)
                    }
                case .largeFrame(let frame):
                    guard inFlight.value < limit else {
                        // Not decoded: its id is unknown, so the answer carries none.
                        metrics.recordError(method: "", error: busy, correlationId: nil)
                        try await channel.writeAndFlush(Dispatcher.encode(ErrorResponse(id: nil, error: busy)))
                        continue
                    }
                    start(in: &requests, counting: inFlight, answeringOn: channel, for: owner) { owner in
                        switch await dispatcher.decodeOffLoop(frame) {
                        case .failure(let rejection): dispatcher.response(to: rejection)
                        case .success(let request):
                            switch dispatcher.prepare(request, caller: caller, onEventLoop: false) {
                            case .answered(let response): response
                            case .later(let pending): await pending.run(owner)
                            }
                        }
                    }
                case .frameTooLarge:
                    let error = ErrorObject(
                        .frameTooLarge,
                        "a message is limited to \(settings.configuration.maximumFrameBytes) bytes; closing"
                    )
                    metrics.recordError(method: "", error: error, correlationId: nil)
                    try await channel.writeAndFlush(Dispatcher.encode(ErrorResponse(id: nil, error: error)))
                    break reading
                case .idle(let partialFrame):
                    guard inFlight.value == 0 else { continue }
                    if partialFrame {
                        let error = ErrorObject(.timeout, "half a message arrived and then nothing; closing")
                        metrics.recordError(method: "", error: error, correlationId: nil)
                        try await channel.writeAndFlush(Dispatcher.encode(ErrorResponse(id: nil, error: error)))
                    }
                    break reading
                case .frameTimedOut:
                    let seconds = settings.configuration.frameDeadline.components.seconds
                    let error = ErrorObject(.timeout, "a message took more than \(seconds) s to arrive; closing")
                    metrics.recordError(method: "", error: error, correlationId: nil)
                    try await channel.writeAndFlush(Dispatcher.encode(ErrorResponse(id: nil, error: error)))
                    break reading
                case .peerNotReading:
                    // The peer does not read: nothing it would see can be sent. Free what is queued now.
                    settings.logger.warning(
                        "connection closed: its peer does not read its answers",
                        metadata: ["pid": "\(caller.pid)"]
                    )
                    metrics.recordError(
                        method: "",
                        error: ErrorObject(
                            .brokerBusy,
                            "a client left too many answers unread; its connection was closed"
                        ),
                        correlationId: nil
                    )
                    channel.close(promise: nil)
                    break reading
                }
            }
            // Nobody is left to see a sign-in this connection started, or the broker is stopping: stop it (the
            // others finish their answers), saying which, so that an app retries a sign-in the shutdown cut short.
            dispatcher.broker.cancelFlows(
                ownedBy: serial,
                because: Task.isShuttingDownGracefully ? .brokerStopping : .byClient
            )
        }
    }
}

extension Connection {
    /// Runs `answer` in a task of `requests`, counted in flight on the connection and in the metrics until it has
    /// answered, then writes what it returns.
    ///
    /// `answer` gets `owner` with a gate of its own, opened once the answer is queued: a sign-in that the request
    /// resumes notifies only after it (``AnswerGate``).
    private func start(
        in requests: inout ThrowingDiscardingTaskGroup<any Error>,
        counting inFlight: RequestCount,
        answeringOn channel: any Channel,
        for owner: FlowOwner,
        _ answer: @escaping @Sendable (FlowOwner) async -> ByteBuffer?
    ) {
        let metrics = metrics
        inFlight.add(1)
        metrics.inFlight.add(1, ordering: .relaxed)
        requests.addTask {
            let gate = AnswerGate()
            let response = await answer(owner.answering(through: gate))
            // Answered, so no longer in flight: counted down before the write, because the peer may read the answer
            // and ask getStatus on another connection before this task resumes after the flush. The task group still
            // waits for the write before the connection closes.
            inFlight.add(-1)
            metrics.inFlight.subtract(1, ordering: .relaxed)
            guard let response else { return gate.open() }
            // Queued first, then the gate opens: writes from other tasks reach the event loop after this one.
            let written = channel.eventLoop.makePromise(of: Void.self)
            channel.writeAndFlush(response, promise: written)
            gate.open()
            try await written.futureResult.get()
        }
    }
}

/// Requests in flight on one connection.
private final class RequestCount: Sendable {
    private let count = Atomic<Int>(0)

    var value: Int {
        count.load(ordering: .relaxed)
    }

    func add(_ delta: Int) {
        count.add(delta, ordering: .relaxed)
    }
}
