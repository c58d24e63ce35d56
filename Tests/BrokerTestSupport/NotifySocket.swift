import Foundation
import Synchronization

/// The service manager's end of `NOTIFY_SOCKET`: an `AF_UNIX` datagram socket made by the test, drained
/// continuously (libsystemd's `sd_notify` blocks once ten datagrams wait unread).
///
/// The draining runs on a thread of its own: a blocking `recv` must never hold one of Swift concurrency's
/// few cooperative threads (two on a two-CPU machine), or every other test stalls.
public final class NotifySocket: Sendable {
    /// The socket's path, for `NOTIFY_SOCKET`.
    public let path: String
    private let received = Messages()

    /// Binds the socket in `directory` and starts draining it.
    public init(in directory: TemporaryDirectory) throws {
        let path = directory.path("notify.sock")
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestSetupError("socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8).prefix($0.count - 1)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else {
            close(fd)
            throw TestSetupError("bind \(path): \(String(cString: strerror(errno)))")
        }
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        self.path = path
        let reader = Thread { [received] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !received.isStopped {
                let count = recv(fd, &buffer, buffer.count, 0)
                if count > 0 {
                    let message = String(decoding: buffer[0..<count], as: UTF8.self)
                    received.append(message)
                }
            }
            close(fd)
        }
        reader.start()
    }

    /// Every datagram so far, in order.
    public var messages: [String] {
        received.all
    }

    /// Waits until a datagram satisfies `predicate`; returns all messages then, or throws after `timeout`.
    @discardableResult
    public func wait(
        timeout: Duration = eventTimeout,
        for what: String,
        until predicate: ([String]) -> Bool
    ) async throws -> [String] {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let messages = self.messages
            if predicate(messages) { return messages }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestSetupError("no \(what) on the notify socket; got \(messages)")
    }

    deinit {
        // The reader notices within its 100 ms receive timeout, and closes the socket itself.
        received.stop()
    }
}

private final class Messages: Sendable {
    private let list = Mutex<[String]>([])
    private let stopped = Atomic<Bool>(false)

    var isStopped: Bool {
        stopped.load(ordering: .acquiring)
    }

    func stop() {
        stopped.store(true, ordering: .releasing)
    }

    func append(_ message: String) {
        list.withLock { $0.append(message) }
    }

    var all: [String] {
        list.withLock { $0 }
    }
}
