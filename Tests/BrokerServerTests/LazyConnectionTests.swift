import BrokerTestSupport
import Glibc
import ServiceLifecycle
import Testing

/// A connection is served on its event loop until a request needs a task (``RequestHandler``): these check the
/// connection's life on both sides of that line.
@Suite struct LazyConnectionTests {
    /// A connection the event loop answered, and that its peer keeps open, has no task to see the shutdown: the server
    /// closes it itself, and stops.
    @Test(.timeLimit(.minutes(1))) func shutdownClosesConnectionsTheEventLoopAnswered() async throws {
        try await withTestServer { path, group in
            let fd = try UnixSocket.connect(path)
            defer { close(fd) }
            try await UnixSocket.send(fd, Array((statusRequest + "\n").utf8))
            let (answers, _) = await UnixSocket.readLines(fd, count: 1)
            #expect(answers.count == 1)
            await group.triggerGracefulShutdown()
            let (more, closed) = await UnixSocket.readLines(fd, count: 1)
            #expect(more.isEmpty)
            #expect(closed)
        }
    }

    /// A request the event loop cannot answer (a frame too large to decode there) starts the connection's task; the
    /// requests before and after it on the same connection are answered (the one after may come first: the event
    /// loop answers it at once, while the task decodes the large frame).
    @Test func aConnectionTakesATaskWhenARequestNeedsOne() async throws {
        try await withTestServer { path in
            let fd = try UnixSocket.connect(path)
            defer { close(fd) }
            try await UnixSocket.send(fd, Array((statusRequest + "\n").utf8))
            let (before, _) = await UnixSocket.readLines(fd, count: 1)
            #expect(try errorCode(#require(before.first)) == nil)

            let large = String(repeating: "x", count: 70 << 10)
            try await UnixSocket.send(fd, Array((large + "\n" + statusRequest + "\n").utf8))
            let (after, closed) = await UnixSocket.readLines(fd, count: 2)
            #expect(!closed)
            #expect(after.count == 2)
            let codes = try after.map { try errorCode($0) ?? "answered" }
            #expect(codes.sorted() == ["answered", "parse_error"], "\(after)")
        }
    }
}
