import BrokerCore
import BrokerProtocol
import NIOCore

/// What a connection's async task sees: requests that may wait, and the conditions that end a connection.
enum ConnectionEvent: Sendable {
    /// A request that needs the identity provider, the disk, or time: run the rest of it in a task.
    case request(PendingRequest)
    /// A frame too large to decode on the event loop (an import): decode it in a task, off the loop.
    case largeFrame(ByteBuffer)
    /// A line grew past the limit.
    case frameTooLarge
    /// Nothing arrived for the idle timeout.
    case idle(partialFrame: Bool)
    /// A frame did not complete within the frame deadline.
    case frameTimedOut
    /// The peer does not read its answers (see ``FrameCondition/peerNotReading``).
    case peerNotReading
}

/// Decodes each frame and answers on the event loop whatever the in-memory cache can answer at once (a cached
/// token, the account list, the version, the status); passes everything else on to the connection's task.
///
/// The fast path does no I/O, takes only the cache's short lock, and never waits, so it is fit for an event
/// loop; it saves the task, the thread hops and the async writer that cost more than the lookup itself.
/// Responses are written as whole lines and flushed once per read.
///
/// The connection's task, and the async channel it reads, start with the first event that goes on to it. Until then
/// the handler ends the connection itself when its peer stops sending or the server stops reading: nothing of it is
/// in flight. A connection that asks one cached token and closes (a process per token: the CLI, git, kubectl) never
/// has a task: with one, it cost the daemon 324,000 instructions, against 20,000 for the same answer on a
/// connection kept open (callgrind).
final class RequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ConnectionEvent
    typealias OutboundOut = ByteBuffer

    private let dispatcher: Dispatcher
    private let caller: Caller
    private let connections: OpenConnections
    /// Whether the connection's task was started (its async channel is the next handler).
    private var started = false
    private var needsFlush = false
    /// Whether an event went on to the connection's task since the last read-complete.
    ///
    /// Only then does the async channel after this handler hold reads to hand over at read-complete, and only then
    /// is read-complete passed on: with nothing to hand over, its generic code still cost 800 instructions a cached
    /// answer (callgrind).
    private var forwarded = false
    /// The connection's last remembered answer (see ``Dispatcher/answerOnEventLoop(_:caller:last:)``).
    private var lastAnswer: LastAnswer?

    init(dispatcher: Dispatcher, caller: Caller, connections: OpenConnections) {
        self.dispatcher = dispatcher
        self.caller = caller
        self.connections = connections
    }

    func channelActive(context: ChannelHandlerContext) {
        guard connections.opened(context.channel) else { return context.close(promise: nil) }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        guard frame.readableBytes <= Dispatcher.largeFrameBytes else {
            return forward(.largeFrame(frame), context: context)
        }
        switch dispatcher.answerOnEventLoop(frame, caller: caller, last: &lastAnswer) {
        case .answered(let response):
            if let response { write(response, context: context) }
        case .later(let pending):
            forward(.request(pending), context: context)
        }
    }

    /// The framer's conditions go on to the connection's task, which ends the connection.
    ///
    /// Without a task, the end of the input (the peer's, or the server's when it stops) closes the connection here.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let condition = event as? FrameCondition else {
            if !started, case ChannelEvent.inputClosed = event {
                // The answers written go out first (the channel fires read-complete before the end of the input, so
                // they are flushed already; a close would drop any that were not).
                if needsFlush {
                    needsFlush = false
                    context.flush()
                }
                return context.close(promise: nil)
            }
            return context.fireUserInboundEventTriggered(event)
        }
        let event: ConnectionEvent =
            switch condition {
            case .frameTooLarge: .frameTooLarge
            case .idle(let partialFrame): .idle(partialFrame: partialFrame)
            case .frameTimedOut: .frameTimedOut
            case .peerNotReading: .peerNotReading
            }
        forward(event, context: context)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        if forwarded {
            forwarded = false
            context.fireChannelReadComplete()
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard started else { return context.close(promise: nil) }
        context.fireErrorCaught(error)
    }

    private func forward(_ event: ConnectionEvent, context: ChannelHandlerContext) {
        if !started {
            started = true
            do {
                // After this handler: it reads what this one forwards from now on.
                let async = try NIOAsyncChannel<ConnectionEvent, Never>(wrappingChannelSynchronously: context.channel)
                connections.start(AcceptedConnection(caller: caller, refusal: nil, channel: async))
            } catch {
                return context.close(promise: nil)
            }
        }
        forwarded = true
        context.fireChannelRead(wrapInboundOut(event))
    }

    private func write(_ response: ByteBuffer, context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(response), promise: nil)
        needsFlush = true
    }
}
