import BrokerProtocol
import BrokerTime
import Logging
import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What the server does when it runs out of descriptors (`EMFILE`, `ENFILE`): a connection waiting to be accepted
/// would otherwise wait in the backlog, unanswered, until some descriptor is freed.
///
/// The server holds one descriptor in reserve. When an accept fails for want of descriptors, this handler (first in
/// the listening channel's pipeline) gives the reserve up, accepts every waiting connection itself, answers each
/// one `broker_busy` and closes it, then takes the reserve back: clients learn at once that the broker is
/// overloaded, and retry. The failure goes no further, so NIO does not pause accepting.
final class DescriptorReserve: ChannelInboundHandler, Sendable {
    typealias InboundIn = any Channel

    private let listeningSocket: Int32
    private let reserve = Mutex<Int32>(-1)
    private let answer: [UInt8]
    private let logger: Logger
    private let refused: @Sendable (Int) -> Void
    private let lastWarning = Mutex<Duration?>(nil)
    private let clock: any BrokerClock

    /// A reserve for `listeningSocket`; `refused` counts the connections answered busy.
    init(
        listeningSocket: Int32,
        logger: Logger,
        clock: any BrokerClock,
        refused: @escaping @Sendable (Int) -> Void
    ) {
        self.clock = clock
        self.listeningSocket = listeningSocket
        self.logger = logger
        self.refused = refused
        var line = Dispatcher.encode(
            ErrorResponse(
                id: nil,
                error: ErrorObject(
                    .brokerBusy,
                    "the broker is out of file descriptors; retry shortly",
                    details: .init(retryAfterSeconds: 1)
                )
            )
        )
        answer = line.readBytes(length: line.readableBytes) ?? []
        reserve.withLock { $0 = Self.open() }
    }

    deinit {
        reserve.withLock { if $0 >= 0 { close($0) } }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let error = error as? IOError, error.errnoCode == EMFILE || error.errnoCode == ENFILE else {
            return context.fireErrorCaught(error)
        }
        let answered = answerWaitingConnections()
        warn(answered: answered)
        if answered == 0 {
            // Nothing could be accepted even with the reserve given up: let NIO pause accepting for a moment.
            context.fireErrorCaught(error)
        }
    }

    /// Accepts and answers every connection waiting; returns how many.
    private func answerWaitingConnections() -> Int {
        reserve.withLock { reserve in
            if reserve >= 0 {
                close(reserve)
                reserve = -1
            }
            var answered = 0
            while true {
                // The listening socket is non-blocking (NIO's): accept ends with EAGAIN when none is left. The
                // connection is closed before this returns (and a browser started meanwhile gets no descriptor
                // above 2 in any case).
                let connection = accept(listeningSocket, nil, nil)
                if connection < 0, errno == EINTR { continue }
                guard connection >= 0 else { break }
                _ = fcntl(connection, F_SETFL, O_NONBLOCK)
                _ = answer.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                close(connection)
                answered += 1
            }
            reserve = Self.open()
            if answered > 0 { refused(answered) }
            return answered
        }
    }

    /// At most one warning every ten seconds: a flood must not flood the journal too.
    private func warn(answered: Int) {
        let now = clock.elapsed
        let due = lastWarning.withLock { last -> Bool in
            guard last.map({ now - $0 >= .seconds(10) }) ?? true else { return false }
            last = now
            return true
        }
        guard due else { return }
        logger.warning(
            "out of file descriptors: connections answered broker_busy",
            metadata: ["answered": "\(answered)", "reserve": "\(reserve.withLock { $0 >= 0 } ? "held" : "lost")"]
        )
    }

    private static func open() -> Int32 {
        Glibc.open("/dev/null", O_RDONLY | O_CLOEXEC)
    }
}
