import NIOCore

/// What the framer passes on: frames, and the two conditions that end a connection.
enum FrameEvent: Sendable {
    /// One message: the bytes of a line, without the newline.
    case frame(ByteBuffer)
    /// A line grew past the limit; nothing more is read from this connection.
    case frameTooLarge
    /// Nothing arrived for the idle timeout; `partialFrame` says whether half a message was waiting.
    case idle(partialFrame: Bool)
}

/// Splits the byte stream into newline-terminated frames, bounded in size, and reports idleness.
///
///     "{...}\n{...}\n{..."  ->  .frame("{...}"), .frame("{...}"), (waits for the rest)
///
/// Bytes past an oversized line are dropped: the reader answers `frame_too_large` and closes.
final class FrameHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = FrameEvent

    private let maximumFrameBytes: Int
    private let idleTimeout: TimeAmount
    private var pending: ByteBuffer?
    private var scanned = 0
    private var overflowed = false
    private var lastActivity: NIODeadline = .now()
    private var idleCheck: Scheduled<Void>?

    init(maximumFrameBytes: Int, idleTimeout: TimeAmount) {
        self.maximumFrameBytes = maximumFrameBytes
        self.idleTimeout = idleTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        lastActivity = .now()
        scheduleIdleCheck(context: context, after: idleTimeout)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        idleCheck?.cancel()
        idleCheck = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !overflowed else { return }
        lastActivity = .now()
        var incoming = unwrapInboundIn(data)
        if pending == nil, scanned == 0 {
            pending = incoming
        } else {
            pending?.writeBuffer(&incoming)
        }
        guard var buffer = pending else { return }
        while true {
            let view = buffer.readableBytesView
            guard let newline = view[(view.startIndex + scanned)...].firstIndex(of: UInt8(ascii: "\n")) else {
                scanned = buffer.readableBytes
                break
            }
            let length = newline - view.startIndex
            if length > maximumFrameBytes { return overflow(context: context) }
            if let frame = buffer.readSlice(length: length) {
                buffer.moveReaderIndex(forwardBy: 1)
                scanned = 0
                context.fireChannelRead(wrapInboundOut(.frame(frame)))
            }
        }
        if buffer.readableBytes > maximumFrameBytes { return overflow(context: context) }
        if buffer.readableBytes == 0 {
            pending = nil
            scanned = 0
        } else {
            buffer.discardReadBytes()
            pending = buffer
        }
    }

    private func overflow(context: ChannelHandlerContext) {
        overflowed = true
        pending = nil
        scanned = 0
        context.fireChannelRead(wrapInboundOut(.frameTooLarge))
    }

    private func scheduleIdleCheck(context: ChannelHandlerContext, after delay: TimeAmount) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        idleCheck = context.eventLoop.scheduleTask(in: delay) {
            let (handler, context) = loopBound.value
            handler.checkIdle(context: context)
        }
    }

    private func checkIdle(context: ChannelHandlerContext) {
        // A peer still receiving a large answer is busy, not idle: data waiting to go out counts as activity.
        if !context.channel.isWritable { lastActivity = .now() }
        let idleFor = NIODeadline.now() - lastActivity
        if idleFor >= idleTimeout, !overflowed {
            lastActivity = .now()
            context.fireChannelRead(wrapInboundOut(.idle(partialFrame: (pending?.readableBytes ?? 0) > 0)))
            // The async channel hands reads to its reader at read-complete; without this the event would wait
            // in its buffer for the next socket read, which an idle peer never sends.
            context.fireChannelReadComplete()
            scheduleIdleCheck(context: context, after: idleTimeout)
        } else {
            scheduleIdleCheck(context: context, after: idleTimeout - idleFor)
        }
    }
}
