import NIOCore
import NIOHTTP1
import Synchronization

/// The time the v2.0 token endpoint's answers took at the server's edge: from the request's head read off the
/// connection to the response's end handed to the connection, before the write.
///
/// Beside the endpoint's own working time, it holds what the provider spends around it: the hop from the event loop
/// to the connection's task and back, the request log line, and encoding the response. A benchmark subtracts it to
/// find the broker's share of a refresh; the loopback in between stays on the broker's side.
///
/// The clock stops before the write, not when it completed: the write wakes the broker, which may take the CPU
/// before the provider reads the clock again, and the broker's work on the answer then counted as the provider's
/// (with the broker's event loop on a 0.1 ms scheduler slice, its share of a refresh fell by 170 µs that way while
/// the round trip fell by 30). The write's system call is the broker's share, as the refresh floor's is.
final class ServedTime: Sendable {
    private let total = Mutex(Duration.zero)

    /// The time so far.
    var microseconds: Int {
        Int(total.withLock { $0 } / .microseconds(1))
    }

    fileprivate func add(_ duration: Duration) {
        total.withLock { $0 += duration }
    }

    /// The handler that times one connection's token requests; it goes after the HTTP codec.
    func handler() -> some ChannelDuplexHandler {
        TimingHandler(served: self)
    }
}

/// Times token requests on one connection: requests reach it one at a time (the pipelining handler before it holds
/// the next until a response ended).
private final class TimingHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private let served: ServedTime
    private var started: ContinuousClock.Instant?

    init(served: ServedTime) {
        self.served = served
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data) {
            let path = head.uri.prefix { $0 != "?" }
            started = head.method == .POST && path.hasSuffix("/oauth2/v2.0/token") ? .now : nil
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .end = unwrapOutboundIn(data), let started else {
            context.write(data, promise: promise)
            return
        }
        self.started = nil
        served.add(.now - started)
        context.write(data, promise: promise)
    }
}
