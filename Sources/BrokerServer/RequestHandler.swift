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
final class RequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ConnectionEvent
    typealias OutboundOut = ByteBuffer

    private let dispatcher: Dispatcher
    private let caller: Caller
    private var needsFlush = false
    /// Whether an event went on to the connection's task since the last read-complete.
    ///
    /// Only then does the async channel after this handler hold reads to hand over at read-complete, and only then
    /// is read-complete passed on: with nothing to hand over, its generic code still cost 800 instructions a cached
    /// answer (callgrind).
    private var forwarded = false
    /// The connection's last remembered answer (see ``Dispatcher/answerOnEventLoop(_:caller:last:)``).
    private var lastAnswer: LastAnswer?

    init(dispatcher: Dispatcher, caller: Caller) {
        self.dispatcher = dispatcher
        self.caller = caller
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
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let condition = event as? FrameCondition else { return context.fireUserInboundEventTriggered(event) }
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

    private func forward(_ event: ConnectionEvent, context: ChannelHandlerContext) {
        forwarded = true
        context.fireChannelRead(wrapInboundOut(event))
    }

    private func write(_ response: ByteBuffer, context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(response), promise: nil)
        needsFlush = true
    }
}
