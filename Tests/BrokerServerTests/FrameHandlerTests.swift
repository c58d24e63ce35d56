import NIOCore
import NIOEmbedded
import Testing

@testable import BrokerServer

/// The framer on an `EmbeddedChannel`: bytes in one at a time, time advanced by hand, writability switched by hand.
@Suite struct FrameHandlerTests {
    static let limits = FrameLimits(
        maximumFrameBytes: 64,
        idleTimeout: .seconds(10),
        frameDeadline: .seconds(30),
        outputBudget: 100
    )

    /// Records the `read()` calls that reach the head of the pipeline, and the events the framer passes on.
    final class Probe: ChannelDuplexHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundIn = ByteBuffer
        var events: [String] = []
        var reads = 0

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            events.append(String(buffer: unwrapInboundIn(data)))
        }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            switch event as? FrameCondition {
            case .frameTooLarge: events.append("frameTooLarge")
            case .idle(let partial): events.append(partial ? "idle(partial)" : "idle")
            case .frameTimedOut: events.append("frameTimedOut")
            case .peerNotReading: events.append("peerNotReading")
            case nil: context.fireUserInboundEventTriggered(event)
            }
        }
    }

    /// Counts the `read()` calls the framer lets through to the socket.
    final class ReadCounter: ChannelOutboundHandler {
        typealias OutboundIn = ByteBuffer
        var reads = 0

        func read(context: ChannelHandlerContext) {
            reads += 1
            context.read()
        }
    }

    func channel() throws -> (EmbeddedChannel, Probe, ReadCounter) {
        let probe = Probe()
        let counter = ReadCounter()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandlers(counter, FrameHandler(limits: Self.limits), probe)
        return (channel, probe, counter)
    }

    func feed(_ channel: EmbeddedChannel, _ text: String, byteByByte: Bool = false) throws {
        if byteByByte {
            for byte in text.utf8 { try channel.writeInbound(ByteBuffer(bytes: [byte])) }
        } else {
            try channel.writeInbound(ByteBuffer(string: text))
        }
    }

    @Test func splitsFramesByteByByte() throws {
        let (channel, probe, _) = try channel()
        try feed(channel, "{\"a\":1}\n\n{\"b\"", byteByByte: true)
        #expect(probe.events == ["{\"a\":1}", ""])
        try feed(channel, ":2}\n", byteByByte: true)
        #expect(probe.events == ["{\"a\":1}", "", "{\"b\":2}"])
    }

    @Test func refusesAnOversizedLineOnceEvenBeforeItsNewline() throws {
        let (channel, probe, _) = try channel()
        try feed(channel, String(repeating: "x", count: 65), byteByByte: true)
        #expect(probe.events == ["frameTooLarge"])
        try feed(channel, "\n{}\n")
        #expect(probe.events == ["frameTooLarge"])
    }

    /// While the peer does not read (the channel is unwritable), frames already read wait and no more bytes are
    /// read; when it reads again, they go on.
    @Test func stopsReadingWhileThePeerDoesNotRead() throws {
        let (channel, probe, counter) = try channel()
        channel.isWritable = false
        try feed(channel, "one\ntwo\nthree\n")
        #expect(probe.events == ["one"])
        channel.read()
        #expect(counter.reads == 0)
        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        #expect(probe.events == ["one", "two", "three"])
        #expect(counter.reads == 1)
    }

    /// Unread answers beyond the budget (besides the largest) end the connection; one large answer alone does not.
    @Test func closesAConnectionWhoseAnswersPileUpUnread() throws {
        let (channel, probe, _) = try channel()
        channel.write(ByteBuffer(repeating: 0, count: 500), promise: nil)  // an export: alone, allowed
        channel.write(ByteBuffer(repeating: 0, count: 60), promise: nil)
        #expect(probe.events.isEmpty)
        let refused = channel.eventLoop.makePromise(of: Void.self)
        channel.write(ByteBuffer(repeating: 0, count: 60), promise: refused)
        #expect(probe.events == ["peerNotReading"])
        #expect(throws: (any Error).self) { try refused.futureResult.wait() }
    }

    /// Answers the peer takes free the budget again.
    @Test func answersThePeerTakesDoNotCount() throws {
        let (channel, probe, _) = try channel()
        for _ in 0..<20 {
            try channel.writeAndFlush(ByteBuffer(repeating: 0, count: 60)).wait()
            _ = try channel.readOutbound(as: ByteBuffer.self)
        }
        #expect(probe.events.isEmpty)
    }

    /// A frame trickled one byte per nine seconds never lets the connection idle out, but the frame deadline ends
    /// it.
    @Test func aTrickledFrameRunsIntoTheDeadline() throws {
        let (channel, probe, _) = try channel()
        for _ in 0..<3 {
            try feed(channel, "x")
            channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        }
        #expect(probe.events.isEmpty)  // 27 s in: never 10 s without a byte
        try feed(channel, "x")
        channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(probe.events == ["frameTimedOut"])  // at 30 s
        try feed(channel, "x\n")
        #expect(probe.events == ["frameTimedOut"])
    }

    /// Answers waiting unread are not activity: a peer that neither sends nor reads them, for the idle timeout, does
    /// not read, and its connection ends even with requests in flight (the audit's client was kept forever).
    @Test func unreadAnswersDoNotKeepAConnectionAlive() throws {
        let (channel, probe, _) = try channel()
        channel.isWritable = false
        channel.write(ByteBuffer(repeating: 0, count: 10), promise: nil)
        channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(probe.events.isEmpty)
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(probe.events == ["peerNotReading"])
    }

    /// Answers the peer takes are activity, however long it then stays quiet: that is idleness, not a stall.
    @Test func takenAnswersThenSilenceIsIdleness() throws {
        let (channel, probe, _) = try channel()
        try channel.writeAndFlush(ByteBuffer(repeating: 0, count: 10)).wait()
        channel.read()  // the connection's reader waits for the next request
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        #expect(probe.events == ["idle"])
    }

    /// An answer that took long to work out (a sign-in) restarts the idle clock when it goes out: the connection
    /// idles out a full timeout after it, not at the next check after the request.
    @Test func aLateAnswerRestartsTheIdleClock() throws {
        let (channel, probe, _) = try channel()
        try feed(channel, "{}\n")
        channel.read()
        channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        try channel.writeAndFlush(ByteBuffer(repeating: 0, count: 10)).wait()
        channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(probe.events == ["{}"])
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(probe.events == ["{}", "idle"])
    }

    /// Answers the peer leaves in the channel count against the budget once it is weighed, however many it took
    /// before them.
    @Test func answersLeftUnreadAfterTakenOnesCountAgainstTheBudget() throws {
        let (channel, probe, _) = try channel()
        for _ in 0..<5 {
            try channel.writeAndFlush(ByteBuffer(repeating: 0, count: 60)).wait()
            _ = try channel.readOutbound(as: ByteBuffer.self)
        }
        channel.write(ByteBuffer(repeating: 0, count: 60), promise: nil)
        channel.write(ByteBuffer(repeating: 0, count: 60), promise: nil)
        #expect(probe.events.isEmpty)
        channel.write(ByteBuffer(repeating: 0, count: 60), promise: nil)
        #expect(probe.events == ["peerNotReading"])
    }

    /// A half frame left alone is reported as such at the idle timeout.
    @Test func aHalfFrameLeftAloneIdlesOutAsPartial() throws {
        let (channel, probe, _) = try channel()
        try feed(channel, "{\"half")
        channel.read()
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        #expect(probe.events == ["idle(partial)"])
    }

    /// A reader that starts late, just before the idle check falls due, gets a full idle timeout from its read: the
    /// check in the same turn of the event loop, before the socket's bytes can come, does not blame the peer for the
    /// time the broker took to ask. (It had closed a connection quietly with half a frame unread, on a busy machine:
    /// `FramingTests.closesAConnectionThatStallsMidFrame`.)
    @Test func theIdleClockStartsWithTheFirstRead() throws {
        let (channel, probe, _) = try channel()
        channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        channel.read()
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(probe.events.isEmpty)
        channel.embeddedEventLoop.advanceTime(by: .seconds(8))
        try feed(channel, "{\"half")
        channel.read()
        channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(probe.events.isEmpty)
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(probe.events == ["idle(partial)"])
    }

    /// Until the connection's reader asks for bytes (on a busy machine it may start late), the peer's bytes wait
    /// unread in the socket: the connection is not idle, however long that takes, and the idle timeout runs from
    /// the first read. (Taking it for idle had closed connections with a request unread.)
    @Test func aConnectionNotYetReadFromIsNotIdle() throws {
        let (channel, probe, _) = try channel()
        channel.embeddedEventLoop.advanceTime(by: .seconds(60))
        #expect(probe.events.isEmpty)
        channel.read()
        channel.embeddedEventLoop.advanceTime(by: .seconds(5))
        try feed(channel, "{}\n")
        #expect(probe.events == ["{}"])
        channel.read()
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        #expect(probe.events == ["{}", "idle"])
    }
}
