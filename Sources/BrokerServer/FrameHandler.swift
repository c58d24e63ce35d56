import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// The conditions that end a connection, which the framer passes on as user inbound events (its frames go on as
/// reads, each the bytes of a line without the newline: a `ByteBuffer` crosses the pipeline without the boxing and
/// the dynamic cast that an enum around it cost every request).
enum FrameCondition: Sendable {
    /// A line grew past the limit; nothing more is read from this connection.
    case frameTooLarge
    /// Nothing arrived and nothing left for the idle timeout; `partialFrame` says whether half a message was waiting.
    case idle(partialFrame: Bool)
    /// A message started arriving and did not end within the frame deadline (a peer trickling bytes).
    case frameTimedOut
    /// The peer does not read: it left more answers queued than the output budget allows, or took none of the
    /// answers waiting for it for the idle timeout.
    case peerNotReading
}

/// The limits a connection's framer enforces.
struct FrameLimits: Sendable {
    /// The largest frame accepted.
    var maximumFrameBytes: Int
    /// A connection with no bytes read and no answer bytes taken by the peer for this long is idle.
    var idleTimeout: TimeAmount
    /// The longest a frame may take from its first byte to its newline.
    var frameDeadline: TimeAmount
    /// How many answer bytes may wait unread, besides the answer being written: past it, the connection is closed.
    var outputBudget: Int
}

/// Splits the byte stream into newline-terminated frames, bounded in size and time, and keeps a peer that does not
/// read from making the broker queue answers without bound.
///
///     "{...}\n{...}\n{..."  ->  "{...}", "{...}", (waits for the rest)
///
/// Backpressure: while the channel is not writable (its write buffer is above the high watermark because the
/// peer does not read), no further frame is dispatched and no further byte is read; frames already read wait here,
/// and go on when the peer has taken enough. Unsent answers beyond ``FrameLimits/outputBudget`` (not counting the
/// one being written, which may be a large export) close the connection.
///
/// Activity, for the idle timeout, is bytes read, answers flushed to the socket and answer bytes the peer took; a peer
/// that neither sends nor reads is idle, and one that does so with answers waiting does not read (its connection
/// ends even with requests in flight, whose answers would wait for it forever). The idle clock runs only while a
/// read is out to the socket: a broker too busy to ask for bytes does not blame the peer. A frame that does not
/// complete within ``FrameLimits/frameDeadline`` of its first byte ends the connection, however slowly its bytes
/// trickle in.
///
/// Bytes past an oversized line are dropped: the reader answers `frame_too_large` and closes.
final class FrameHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let limits: FrameLimits
    private var pending: ByteBuffer?
    private var scanned = 0
    private var stopped = false
    private var lastActivity: NIODeadline = .uptimeNanoseconds(0)
    /// The socket's queue for the peer when last looked at (see ``check(context:)``); nil after an answer went out.
    private var lastQueued: UInt32?
    /// When the frame waiting in `pending` received its first byte.
    private var frameStarted: NIODeadline?
    private var timer: Scheduled<Void>?
    /// Frames are held back while the peer does not read.
    private var paused = false
    /// A `read()` held back while paused.
    private var readDeferred = false
    /// Whether a `read()` went to the socket and its bytes have not come yet.
    ///
    /// Only then is the peer the one that keeps the connection quiet. Until the connection's reader first asks for
    /// bytes (it may start late on a busy machine), the ones the peer sent wait unread in the socket, and the
    /// connection is not idle.
    private var reading = false
    /// Answer bytes handed to the socket and not yet known to be taken by the peer, and the largest single answer
    /// among the writes since nothing last waited (an over-estimate until the channel is asked: O(1) per write, and
    /// the queue stays within the budget plus one largest answer).
    private var unsent = 0
    private var largestUnsent = 0
    /// The part of `unsent` written as one piece and not yet settled (see ``settle(context:)``).
    private var unsettled = 0

    init(limits: FrameLimits) {
        self.limits = limits
    }

    func handlerAdded(context: ChannelHandlerContext) {
        lastActivity = context.eventLoop.now
        scheduleCheck(context: context, after: min(limits.idleTimeout, limits.frameDeadline))
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }

    // MARK: Reading

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !stopped else { return }
        lastActivity = context.eventLoop.now
        var incoming = unwrapInboundIn(data)
        if pending == nil, scanned == 0 {
            pending = incoming
        } else {
            pending?.writeBuffer(&incoming)
        }
        dispatchFrames(context: context)
    }

    /// Passes on the complete frames waiting, unless the peer stopped reading; checks the size of what is left.
    private func dispatchFrames(context: ChannelHandlerContext) {
        guard var buffer = pending else { return }
        pending = nil
        while !paused {
            guard let length = Self.newline(in: buffer, from: scanned) else {
                scanned = buffer.readableBytes
                break
            }
            if length > limits.maximumFrameBytes { return stop(.frameTooLarge, context: context) }
            guard let frame = buffer.readSlice(length: length) else { break }
            buffer.moveReaderIndex(forwardBy: 1)
            scanned = 0
            frameStarted = nil
            context.fireChannelRead(wrapInboundOut(frame))
            if !context.channel.isWritable { paused = true }
        }
        if buffer.readableBytes > limits.maximumFrameBytes, !paused { return stop(.frameTooLarge, context: context) }
        if buffer.readableBytes == 0 {
            scanned = 0
            frameStarted = nil
        } else {
            buffer.discardReadBytes()
            pending = buffer
            if scanned > 0, frameStarted == nil { frameStarted = context.eventLoop.now }
        }
    }

    /// Where the first newline at or after `start` is, counted from the buffer's reader index; nil when there is none.
    ///
    /// memchr, not `firstIndex(of:)` on the buffer's view: that went through the view's subscript byte by byte, 7 %
    /// of the daemon's instructions for a cached answer (callgrind).
    private static func newline(in buffer: ByteBuffer, from start: Int) -> Int? {
        buffer.withUnsafeReadableBytes { bytes in
            guard start < bytes.count, let base = bytes.baseAddress,
                let found = memchr(base + start, Int32(UInt8(ascii: "\n")), bytes.count - start)
            else { return nil }
            return UnsafeRawPointer(found) - base
        }
    }

    func read(context: ChannelHandlerContext) {
        if paused {
            readDeferred = true
        } else {
            startReading(context: context)
        }
    }

    /// Sends a read to the socket.
    ///
    /// The idle clock starts with it when none was out: until then the broker, not the peer, kept the connection
    /// quiet, and a check due in the same turn of the event loop, before the socket's bytes could come, would have
    /// blamed the peer for the time the broker took to ask.
    private func startReading(context: ChannelHandlerContext) {
        if !reading { lastActivity = context.eventLoop.now }
        reading = true
        context.read()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        reading = false
        context.fireChannelReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, paused {
            paused = false
            dispatchFrames(context: context)
            // The async channel hands reads on at read-complete; frames dispatched here need one too.
            context.fireChannelReadComplete()
            if readDeferred, !paused {
                readDeferred = false
                startReading(context: context)
            }
        }
        context.fireChannelWritabilityChanged()
    }

    private func stop(_ condition: FrameCondition, context: ChannelHandlerContext) {
        guard !stopped else { return }
        stopped = true
        pending = nil
        scanned = 0
        frameStarted = nil
        context.fireUserInboundEventTriggered(condition)
        // The async channel hands reads to its reader at read-complete; without this the event would wait in its
        // buffer for the next socket read, which a stalled peer never sends.
        context.fireChannelReadComplete()
    }

    // MARK: Writing

    /// Answers go to the socket in pieces of this size at most, each one taken a sign of progress: a peer reading a
    /// large answer slowly is reading, not stalled.
    static let progressPiece = 64 * 1024

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        var answer = unwrapOutboundIn(data)
        let size = answer.readableBytes
        // What waits besides the largest answer (an export may be large on its own) must stay within the budget;
        // past it, ask the channel what the socket took before judging.
        if unsent + size - max(largestUnsent, size) > limits.outputBudget { settle(context: context) }
        let largest = max(largestUnsent, size)
        guard unsent + size - largest <= limits.outputBudget else {
            // The peer is not reading: drop this answer and end the connection.
            promise?.fail(ChannelError.outputClosed)
            return stop(.peerNotReading, context: context)
        }
        guard size > 0 else { return context.write(data, promise: promise) }
        unsent += size
        largestUnsent = largest
        if size <= Self.progressPiece {
            // One piece, as nearly every answer: the socket takes it at the flush that follows, which counts as
            // progress (flush(context:)); it stays counted in `unsent` until the channel is asked (settle(context:)).
            unsettled += size
            return context.write(data, promise: promise)
        }
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let eventLoop = context.eventLoop
        while let piece = answer.readSlice(length: min(answer.readableBytes, Self.progressPiece)),
            piece.readableBytes > 0
        {
            let count = piece.readableBytes
            let taken = eventLoop.makePromise(of: Void.self)
            // Write promises complete on the channel's event loop.
            taken.futureResult.whenComplete { _ in loopBound.value.taken(count, at: eventLoop.now) }
            if answer.readableBytes == 0, let promise { taken.futureResult.cascade(to: promise) }
            context.write(wrapOutboundOut(piece), promise: taken)
        }
    }

    func flush(context: ChannelHandlerContext) {
        context.flush()
        // The socket nearly always takes a one-piece answer here. One it does not take stays in `unsent`, which the
        // output budget and the idle check weigh once they ask the channel: asking at every flush was 7 % of a
        // cached answer's instructions (a chain of casts in NIO's generic option lookup).
        if unsettled > 0 {
            lastActivity = context.eventLoop.now
            lastQueued = nil
        }
    }

    /// Counts `count` answer bytes as taken from the channel by the socket: progress.
    private func taken(_ count: Int, at now: NIODeadline) {
        unsent -= count
        if unsent == 0 { largestUnsent = 0 }
        lastActivity = now
        lastQueued = nil
    }

    /// Settles the one-piece answers written since the last settlement: those the socket took go from `unsent`.
    ///
    /// What the channel still holds for the socket bounds them: the rest were taken. Nothing marks progress here;
    /// their flush did, and a peer that took nothing since is caught by the idle check.
    private func settle(context: ChannelHandlerContext) {
        guard unsettled > 0 else { return }
        // A channel that cannot say (closed meanwhile) holds nothing for the peer any more.
        let buffered = (try? context.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
        let waiting = min(unsettled, max(buffered, 0))
        unsent -= unsettled - waiting
        unsettled = waiting
        if unsent == 0 { largestUnsent = 0 }
    }

    // MARK: Timers

    private func scheduleCheck(context: ChannelHandlerContext, after delay: TimeAmount) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: delay) {
            let (handler, context) = loopBound.value
            handler.check(context: context)
        }
    }

    private func check(context: ChannelHandlerContext) {
        let now = context.eventLoop.now
        if let started = frameStarted, now - started >= limits.frameDeadline {
            return stop(.frameTimedOut, context: context)
        }
        guard !stopped else { return }
        if now - lastActivity >= limits.idleTimeout { settle(context: context) }
        if now - lastActivity >= limits.idleTimeout, unsent > 0 {
            // Answers wait and none went out for the idle timeout: unless the peer took bytes from the socket's
            // queue meanwhile (a slow reader of a large answer), it does not read.
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            Self.queuedBytes(context.channel).whenComplete { result in
                let (handler, context) = loopBound.value
                let queued = try? result.get()
                guard let queued, queued != handler.lastQueued else {
                    return handler.stop(.peerNotReading, context: context)
                }
                handler.lastQueued = queued
                handler.lastActivity = context.eventLoop.now
                handler.scheduleNextCheck(context: context)
            }
            return
        }
        if !reading {
            // Nothing asked the socket for bytes since the last ones came: the broker is the one not reading.
            lastActivity = now
        } else if now - lastActivity >= limits.idleTimeout {
            lastActivity = now
            context.fireUserInboundEventTriggered(FrameCondition.idle(partialFrame: (pending?.readableBytes ?? 0) > 0))
            context.fireChannelReadComplete()
        }
        scheduleNextCheck(context: context)
    }

    private func scheduleNextCheck(context: ChannelHandlerContext) {
        guard !stopped else { return }
        let now = context.eventLoop.now
        var next = limits.idleTimeout - (now - lastActivity)
        if let started = frameStarted { next = min(next, limits.frameDeadline - (now - started)) }
        scheduleCheck(context: context, after: max(next, .milliseconds(1)))
    }

    /// The bytes the kernel holds for the peer to read, which fall as the peer reads.
    ///
    /// `SO_MEMINFO`'s write allocation; fails where the channel is no socket.
    private static func queuedBytes(_ channel: any Channel) -> EventLoopFuture<UInt32> {
        guard let provider = channel as? any SocketOptionProvider else {
            return channel.eventLoop.makeFailedFuture(ChannelError.operationUnsupported)
        }
        typealias MemoryInfo = (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32)
        let info: EventLoopFuture<MemoryInfo> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET),
            name: SocketOptionName(55)  // SO_MEMINFO (Linux 4.6), which Glibc's module does not declare
        )
        return info.map { $0.2 }  // SK_MEMINFO_WMEM_ALLOC
    }
}
