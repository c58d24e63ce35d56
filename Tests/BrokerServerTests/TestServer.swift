import BrokerCache
import BrokerCore
import BrokerProtocol
import BrokerServer
import BrokerTestSupport
import Foundation
import Glibc
import Logging
import ServiceLifecycle

/// Runs a real server on a temporary socket for the duration of `body`, then shuts it down gracefully.
func withTestServer(
    maximumConnections: Int = 16,
    maximumRequestsPerConnection: Int = 8,
    idleTimeout: Duration = .seconds(30),
    documents: [JSONValue] = [CacheFixtures.msalCache()],
    _ body: (String) async throws -> Void
) async throws {
    try await withTestServer(
        maximumConnections: maximumConnections,
        maximumRequestsPerConnection: maximumRequestsPerConnection,
        idleTimeout: idleTimeout,
        documents: documents
    ) { path, _ in try await body(path) }
}

/// ``withTestServer(maximumConnections:maximumRequestsPerConnection:idleTimeout:documents:_:)`` with the service
/// group, for a body that shuts the server down itself.
func withTestServer(
    maximumConnections: Int = 16,
    maximumRequestsPerConnection: Int = 8,
    idleTimeout: Duration = .seconds(30),
    documents: [JSONValue] = [CacheFixtures.msalCache()],
    _ body: (String, ServiceGroup) async throws -> Void
) async throws {
    let directory = try TemporaryDirectory(prefix: "srv")
    var entries: [CacheEntry] = []
    for document in documents {
        entries += try MSALCacheDocument.read(Data(CacheFixtures.text(document).utf8)).entries
    }
    let logs = LogCapture()
    let broker = TokenBroker(
        cache: try await TokenCache(store: InMemoryTokenStore(entries)),
        logger: logs.logger(),
        audit: AuditLog(logger: logs.logger(label: "audit"))
    )
    let socketPath = directory.path("broker.sock")
    let server = SocketServer(
        configuration: ServerConfiguration(
            listener: .bind(path: socketPath),
            maximumConnections: maximumConnections,
            maximumRequestsPerConnection: maximumRequestsPerConnection,
            idleTimeout: idleTimeout
        ),
        broker: broker,
        details: .init(stateDirectory: directory.path("state")),
        logger: logs.logger()
    )
    let group = ServiceGroup(services: [server], logger: logs.logger())
    try await withThrowingTaskGroup { tasks in
        tasks.addTask { try await group.run() }
        try await waitUntilQuiet(socketPath)
        do {
            try await body(socketPath, group)
        } catch {
            await group.triggerGracefulShutdown()
            throw error
        }
        await group.triggerGracefulShutdown()
        try await tasks.waitForAll()
    }
}

/// One JSON line as an object.
func object(_ line: String) throws -> [String: JSONValue] {
    guard case .object(let object) = try JSONValue.parse(Array(line.utf8)) else {
        throw TestSetupError("not an object: \(line)")
    }
    return object
}

/// The `data.errorCode` of an error response line.
func errorCode(_ line: String) throws -> String? {
    try object(line)["error"]?.objectValue?["data"]?.objectValue?["errorCode"]?.stringValue
}

let statusRequest = #"{"jsonrpc":"2.0","id":1,"method":"getStatus"}"#

/// Waits until the server answers and counts no connection but the one asking, so probes made while it
/// started cannot take a connection slot from the test.
func waitUntilQuiet(_ socketPath: String) async throws {
    let deadline = ContinuousClock.now + eventTimeout
    while ContinuousClock.now < deadline {
        if let fd = try? UnixSocket.connect(socketPath) {
            defer { close(fd) }
            try await UnixSocket.send(fd, Array((statusRequest + "\n").utf8))
            if let line = await UnixSocket.readLines(fd, count: 1).lines.first,
                try object(line)["result"]?.objectValue?["connections"]?.objectValue?["open"] == .integer(1)
            {
                return
            }
        }
        try await Task.sleep(for: .milliseconds(10))
    }
    throw TestSetupError("the server did not become ready")
}

/// Asks over `fd` (an admitted connection) until the server counts `count` open connections.
func waitForOpenConnections(_ count: Int, asking fd: Int32) async throws {
    let deadline = ContinuousClock.now + eventTimeout
    while ContinuousClock.now < deadline {
        try await UnixSocket.send(fd, Array((statusRequest + "\n").utf8))
        guard let line = await UnixSocket.readLines(fd, count: 1).lines.first else {
            throw TestSetupError("no answer on an admitted connection")
        }
        let status = try object(line)
        guard status["error"] == nil else { throw TestSetupError("refused: \(line)") }
        if status["result"]?.objectValue?["connections"]?.objectValue?["open"] == .integer(Int64(count)) { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    throw TestSetupError("never saw \(count) open connections")
}

/// A connection the server admitted (retrying while earlier connections are still being counted).
func connectAdmitted(_ path: String) async throws -> Int32 {
    let deadline = ContinuousClock.now + eventTimeout
    while ContinuousClock.now < deadline {
        let fd = try UnixSocket.connect(path)
        // A refused connection may be closed before the request is sent (EPIPE): not admitted either, try again.
        if (try? await UnixSocket.send(fd, Array((statusRequest + "\n").utf8))) != nil,
            let line = await UnixSocket.readLines(fd, count: 1).lines.first, try object(line)["result"] != nil
        {
            return fd
        }
        close(fd)
        try await Task.sleep(for: .milliseconds(10))
    }
    throw TestSetupError("never admitted")
}
