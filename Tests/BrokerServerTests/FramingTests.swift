import BrokerProtocol
import BrokerServer
import BrokerTestSupport
import Foundation
import Glibc
import Testing

@Suite(.timeLimit(.minutes(1)))
struct FramingTests {
    /// Several requests in one write are all answered, each with its own id.
    @Test func answersPipelinedRequests() async throws {
        try await withTestServer { path in
            let fd = try UnixSocket.connect(path)
            defer { close(fd) }
            let requests = (1...3).map { #"{"jsonrpc":"2.0","id":\#($0),"method":"getLinuxBrokerVersion"}"# }
            try await UnixSocket.send(fd, Array((requests.joined(separator: "\n") + "\n").utf8))
            let (lines, _) = await UnixSocket.readLines(fd, count: 3)
            #expect(try Set(lines.map { try object($0)["id"] }) == [.integer(1), .integer(2), .integer(3)])
        }
    }

    /// An error for a request the broker ran carries a correlation id, the broker's own when none was sent.
    @Test func errorsCarryACorrelationId() async throws {
        try await withTestServer { path in
            let fd = try UnixSocket.connect(path)
            defer { close(fd) }
            let text = #"{"jsonrpc":"2.0","id":5,"method":"getAccount","params":{"username":"nobody@contoso.com"}}"#
            try await UnixSocket.send(fd, Array((text + "\n").utf8))
            let line = try #require(await UnixSocket.readLines(fd, count: 1).lines.first)
            #expect(try object(line)["id"] == .integer(5))
            #expect(try errorCode(line) == "no_account")
            let correlationId = try object(line)["error"]?.objectValue?["data"]?.objectValue?["correlationId"]?
                .stringValue
            #expect(correlationId.flatMap(UUID.init(uuidString:)) != nil)
        }
    }

    /// A request that arrives one byte at a time is answered once its newline arrives.
    @Test func reassemblesAFrameSentByteByByte() async throws {
        try await withTestServer { path in
            let fd = try UnixSocket.connect(path)
            defer { close(fd) }
            for byte in Array((statusRequest + "\n").utf8) {
                try await UnixSocket.send(fd, [byte])
            }
            let (lines, _) = await UnixSocket.readLines(fd, count: 1)
            #expect(try object(try #require(lines.first))["result"] != nil)
        }
    }

    /// A frame over 1 MiB is refused with frame_too_large and that connection is closed; others go on.
    @Test func refusesOversizedFramesAndClosesOnlyThatConnection() async throws {
        try await withTestServer { path in
            let bystander = try UnixSocket.connect(path)
            defer { close(bystander) }
            let fd = try UnixSocket.connect(path)
            defer { close(fd) }
            try? await UnixSocket.send(fd, [UInt8](repeating: UInt8(ascii: "a"), count: 2 << 20))
            let (lines, _) = await UnixSocket.readLines(fd, count: 1)
            #expect(try errorCode(try #require(lines.first)) == "frame_too_large")
            #expect(await UnixSocket.isClosedByPeer(fd))
            try await UnixSocket.send(bystander, Array((statusRequest + "\n").utf8))
            #expect(await UnixSocket.readLines(bystander, count: 1).lines.count == 1)
        }
    }

    /// Half a frame and then silence ends in a timeout error and a closed connection.
    ///
    /// The half frame goes out on this thread right after the connection is made: sent from a thread of its own, it
    /// once reached the socket after the idle timeout had passed on a busy machine, and the connection was closed
    /// quietly as one that sent nothing.
    @Test func closesAConnectionThatStallsMidFrame() async throws {
        try await withTestServer(idleTimeout: .seconds(1)) { path in
            let fd = try UnixSocket.connect(path)
            defer { close(fd) }
            try UnixSocket.sendNow(fd, Array(#"{"jsonrpc":"2.0","id":1,"meth"#.utf8))
            let (lines, closed) = await UnixSocket.readLines(fd, count: 2)
            #expect(lines.count == 1)
            #expect(try errorCode(try #require(lines.first)) == "timeout")
            #expect(closed)
        }
    }

    /// An idle connection with nothing pending is closed without a word.
    @Test func closesIdleConnectionsQuietly() async throws {
        try await withTestServer(idleTimeout: .milliseconds(200)) { path in
            let fd = try UnixSocket.connect(path)
            defer { close(fd) }
            let (lines, closed) = await UnixSocket.readLines(fd, count: 1)
            #expect(lines.isEmpty)
            #expect(closed)
        }
    }

    /// A client that shuts down its write side after sending still gets its answer (socat, nc -N).
    @Test func answersHalfClosedClients() async throws {
        try await withTestServer { path in
            let fd = try UnixSocket.connect(path)
            defer { close(fd) }
            try await UnixSocket.send(fd, Array((statusRequest + "\n").utf8))
            shutdown(fd, Int32(SHUT_WR))
            let (lines, closed) = await UnixSocket.readLines(fd, count: 2)
            #expect(lines.count == 1)
            #expect(closed)
        }
    }

    /// JSON-RPC notifications (no id) are executed but never answered; garbage between requests is answered
    /// with parse_error and the connection goes on.
    @Test func skipsNotificationsAndSurvivesGarbage() async throws {
        try await withTestServer { path in
            let fd = try UnixSocket.connect(path)
            defer { close(fd) }
            let text =
                [
                    #"{"jsonrpc":"2.0","method":"getStatus"}"#, "\u{01}\u{02}garbage",
                    #"{"jsonrpc":"2.0","id":"after","method":"getStatus"}"#,
                ].joined(separator: "\n") + "\n"
            try await UnixSocket.send(fd, Array(text.utf8))
            let (lines, _) = await UnixSocket.readLines(fd, count: 2)
            #expect(try errorCode(lines[0]) == "parse_error")
            #expect(try object(lines[0])["id"] == .null)
            #expect(try object(lines[1])["id"] == .string("after"))
        }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct LimitTests {
    /// Requests beyond the per-connection limit are answered broker_busy, with their own id.
    @Test func refusesRequestsBeyondTheInFlightLimit() async throws {
        try await withTestServer(maximumRequestsPerConnection: 0) { path in
            let fd = try UnixSocket.connect(path)
            defer { close(fd) }
            try await UnixSocket.send(
                fd,
                Array((#"{"jsonrpc":"2.0","id":9,"method":"exportCache"}"# + "\n" + statusRequest + "\n").utf8)
            )
            let (lines, _) = await UnixSocket.readLines(fd, count: 2)
            let busy = try #require(lines.first { $0.contains(#""id":9"#) })
            #expect(try errorCode(busy) == "broker_busy")
            #expect(lines.contains { $0.contains(#""result""#) })
        }
    }

    /// A connection beyond the limit is answered broker_busy and closed; a slot freed is usable again.
    @Test func refusesConnectionsBeyondTheLimit() async throws {
        try await withTestServer(maximumConnections: 2) { path in
            let first = try await connectAdmitted(path)
            defer { close(first) }
            // Counts settle asynchronously (a closed probe is counted until the server sees its EOF): wait,
            // through a connection that is itself admitted, until only it is open.
            try await waitForOpenConnections(1, asking: first)
            let second = try UnixSocket.connect(path)
            defer { close(second) }
            try await waitForOpenConnections(2, asking: second)
            let third = try UnixSocket.connect(path)
            let (lines, closed) = await UnixSocket.readLines(third, count: 2)
            close(third)
            #expect(try errorCode(try #require(lines.first)) == "broker_busy")
            #expect(closed)
            try await waitForOpenConnections(2, asking: second)
            let fourth = try UnixSocket.connect(path)
            defer { close(fourth) }
            let (busy, _) = await UnixSocket.readLines(fourth, count: 1)
            #expect(try errorCode(try #require(busy.first)) == "broker_busy")
        }
    }

    /// A thousand connections opened and dropped leave the server serving, with nothing left open.
    @Test func survivesAThousandDroppedConnections() async throws {
        try await withTestServer(maximumConnections: 64) { path in
            for index in 0..<1000 {
                let fd = try UnixSocket.connect(path)
                if index % 3 == 0 { try? await UnixSocket.send(fd, Array(#"{"jsonrpc":"2.0","id":1,"#.utf8)) }
                close(fd)
            }
            // The server takes them in its own time: ask until it has accepted them all and closed them all. Until
            // it has closed enough of them, a new connection may be one too many and refused as busy: ask again on
            // a new one then.
            var connections: [String: JSONValue]?
            let deadline = ContinuousClock.now + .seconds(20)
            repeat {
                let fd = try UnixSocket.connect(path)
                defer { close(fd) }
                try? await UnixSocket.send(fd, Array((statusRequest + "\n").utf8))
                if let line = await UnixSocket.readLines(fd, count: 1).lines.first,
                    let status = try object(line)["result"]?.objectValue
                {
                    connections = status["connections"]?.objectValue
                    if connections?["open"] == .integer(1), (connections?["accepted"]?.integerValue ?? 0) >= 1001 {
                        break
                    }
                }
                try await Task.sleep(for: .milliseconds(50))
            } while ContinuousClock.now < deadline
            #expect(connections?["open"] == .integer(1))
            #expect((connections?["accepted"]?.integerValue ?? 0) >= 1001)
        }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct SocketPathTests {
    /// A second server on the same path refuses to start; the first keeps serving.
    @Test func refusesToStartOverALiveBroker() async throws {
        try await withTestServer { path in
            let directory = try TemporaryDirectory()
            let second = try await secondServer(path: path, directory: directory)
            await #expect(throws: (any Error).self) { try await second.run() }
            #expect(UnixSocket.canConnect(path))
        }
    }

    /// A socket file nobody listens on (left by a crash) is replaced.
    @Test func replacesAStaleSocketFile() async throws {
        let directory = try TemporaryDirectory()
        let path = directory.path("stale.sock")
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        #expect(bound == 0)
        close(fd)
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(!UnixSocket.canConnect(path))
        let server = try await secondServer(path: path, directory: directory)
        try await withThrowingTaskGroup { tasks in
            tasks.addTask { try await server.run() }
            let deadline = ContinuousClock.now + eventTimeout
            while !UnixSocket.canConnect(path), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(UnixSocket.canConnect(path))
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            #expect(attributes[.posixPermissions] as? Int == 0o600)
            tasks.cancelAll()
        }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct RefusedPeerTests {
    /// A refused connection that keeps sending is answered once and closed; its bytes are never processed
    /// (they once reached the reader raw and crashed the server).
    @Test func refusedPeersCannotFeedTheServer() async throws {
        try await withTestServer(maximumConnections: 1) { path in
            let admitted = try await connectAdmitted(path)
            defer { close(admitted) }
            try await waitForOpenConnections(1, asking: admitted)
            for _ in 0..<20 {
                let fd = try UnixSocket.connect(path)
                try? await UnixSocket.send(fd, Array((statusRequest + "\n" + statusRequest).utf8))
                close(fd)
            }
            try await waitForOpenConnections(1, asking: admitted)
        }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct SocketDirectoryTests {
    /// A socket path under directories that do not exist yet gets them, each private.
    @Test func createsMissingParentsPrivately() async throws {
        let directory = try TemporaryDirectory()
        let path = directory.path("a/b/broker.sock")
        let server = try await secondServer(path: path, directory: directory)
        try await withThrowingTaskGroup { tasks in
            tasks.addTask { try await server.run() }
            let deadline = ContinuousClock.now + eventTimeout
            while !UnixSocket.canConnect(path), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(UnixSocket.canConnect(path))
            for component in ["a", "a/b"] {
                let mode =
                    try FileManager.default.attributesOfItem(atPath: directory.path(component))[.posixPermissions]
                    as? Int
                #expect(mode == 0o700, "\(component)")
            }
            tasks.cancelAll()
        }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct SlowReaderTests {
    /// A client that reads large answers slowly, longer than the idle timeout, still gets every one whole: the bytes
    /// it takes from the socket are activity, and an answer counts as in flight until it reached the socket.
    @Test func slowReadersGetEveryLargeAnswer() async throws {
        let people = (0..<120).map { index in
            CacheFixtures.Person(
                oid: String(format: "00000000-0000-4000-8000-%012d", index),
                username: "s\(index)@contoso.com",
                name: "S"
            )
        }
        try await withTestServer(idleTimeout: .seconds(2), documents: [CacheFixtures.msalCache(people: people)]) {
            path in
            let fd = try UnixSocket.connect(path, receiveTimeout: .seconds(10))
            defer { close(fd) }
            // Answered in tasks (exportCache) and on the event loop (getAccounts, whose writes nothing awaits).
            let requests =
                (1...4).map {
                    #"{"jsonrpc":"2.0","id":\#($0),"method":"\#($0.isMultiple(of: 2) ? "getAccounts" : "exportCache")"}"#
                }
                .joined(separator: "\n") + "\n"
            try await UnixSocket.send(fd, Array(requests.utf8))
            let received = await offload { () -> [UInt8] in
                var bytes: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 8192)
                while bytes.filter({ $0 == UInt8(ascii: "\n") }).count < 4 {
                    // About 0.4 MB/s: the answers (about 1 MB) take longer than the idle timeout to read, while no
                    // pause between reads comes near it, however loaded the machine (a stalled reader is only
                    // closed after two idle timeouts without taking a byte).
                    usleep(20_000)
                    let count = read(fd, &chunk, chunk.count)
                    if count <= 0 { break }
                    bytes += chunk[0..<count]
                }
                return bytes
            }
            let lines = received.split(separator: UInt8(ascii: "\n"))
            #expect(lines.count == 4)
            for line in lines {
                let result = try JSONValue.parse(Array(line)).objectValue?["result"]?.objectValue
                let accounts: Int? =
                    if case .array(let listed)? = result?["accounts"] { listed.count } else {
                        result?["counts"]?.objectValue?["accounts"]?.integerValue.map(Int.init)
                    }
                #expect(accounts == 120)
            }
        }
    }

    /// Small answers the socket could not take at once (the client read none while sending) count as waiting only
    /// until the client reads them: afterwards its quiet connection ends as idle, not as a peer that does not read.
    ///
    /// The idle timeout leaves a busy machine time to start the threads that send and read (each is a new thread).
    @Test func smallAnswersReadLateAreNotLeftWaiting() async throws {
        try await withTestServer(idleTimeout: .seconds(3)) { path in
            let fd = try UnixSocket.connect(path, receiveTimeout: .seconds(10))
            defer { close(fd) }
            // 1,500 answers of about 500 bytes: more than the socket's buffer holds (about 200 KB), so the rest
            // waits in the channel and is settled when it goes out.
            let count = 1_500
            let requests = (1...count).map { #"{"jsonrpc":"2.0","id":\#($0),"method":"getAccounts"}"# + "\n" }
            try await UnixSocket.send(fd, Array(requests.joined().utf8))
            let answered = await UnixSocket.readLines(fd, count: count)
            #expect(answered.lines.count == count)
            #expect(answered.lines.allSatisfy { $0.contains(#""accounts""#) })
            #expect(await UnixSocket.isClosedByPeer(fd), "the quiet connection was not closed")
            let status = try UnixSocket.connect(path)
            defer { close(status) }
            try await UnixSocket.send(status, Array((#"{"jsonrpc":"2.0","id":1,"method":"getStatus"}"# + "\n").utf8))
            let line = try #require(await UnixSocket.readLines(status, count: 1).lines.first)
            #expect(line.contains(#""result""#))
            #expect(!line.contains("answers unread"), "a client that read every answer was taken for one that does not")
        }
    }
}
