public import BrokerSettings
public import Foundation

/// The built `tokenbrokerd`, run as a subprocess on a private socket and state directory.
public final class DaemonProcess: Sendable {
    /// The socket it serves.
    public let socketPath: String
    /// Its state directory.
    public let stateDirectory: String
    /// Where its stderr goes.
    public let logURL: URL
    private let process: ChildProcess

    /// Its `XDG_CONFIG_HOME`: `tokenbroker/tokenbrokerd.conf` in it is the daemon's configuration file.
    public let configDirectory: String

    private init(
        process: ChildProcess,
        socketPath: String,
        stateDirectory: String,
        configDirectory: String,
        logURL: URL
    ) {
        self.process = process
        self.socketPath = socketPath
        self.stateDirectory = stateDirectory
        self.configDirectory = configDirectory
        self.logURL = logURL
    }

    /// The daemon's configuration file.
    public var configuration: ConfigurationFile {
        ConfigurationFile(environment: ["XDG_CONFIG_HOME": configDirectory])
    }

    /// Adds a browser profile to the daemon's configuration (it reads the file when a sign-in starts).
    public func addBrowserProfile(_ name: String, command: [String]) throws {
        try configuration.saveBrowserProfile(name, command: command)
    }

    /// Starts the daemon in `directory` (socket `<dir>/run/broker.sock`, state `<dir>/state`) and waits until
    /// it answers on the socket; with `bus`, its Broker1 front end is on (the session bus is whatever
    /// `environment` says; none by default).
    public static func start(
        in directory: TemporaryDirectory,
        arguments: [String] = [],
        environment: [String: String] = [:],
        bus: Bool = false,
        logName: String = "daemon.log"
    ) async throws -> DaemonProcess {
        let socketPath = directory.path("run/broker.sock")
        let stateDirectory = directory.path("state")
        let logURL = directory.url.appending(path: logName)
        let process = try ChildProcess.spawn(
            try Binaries.url("tokenbrokerd").path,
            ["--socket", socketPath, "--state-directory", stateDirectory] + (bus ? [] : ["--no-bus"]) + arguments,
            // The developer's own BROWSER is no browser of the test's: the daemon tries it for systemBrowser.
            environment: childEnvironment(
                ["XDG_CONFIG_HOME": directory.path("config"), "BROWSER": ""].merging(environment) { $1 }
            ),
            stdout: .file(logURL.path),
            stderr: .file(logURL.path)
        )
        let daemon = DaemonProcess(
            process: process,
            socketPath: socketPath,
            stateDirectory: stateDirectory,
            configDirectory: directory.path("config"),
            logURL: logURL
        )
        try await daemon.waitUntilListening()
        return daemon
    }

    /// The daemon's process id.
    public var pid: Int32 {
        process.pid
    }

    /// Whether it still runs.
    public var isRunning: Bool {
        process.isRunning
    }

    /// Everything it logged so far.
    public var log: String {
        (try? String(contentsOf: logURL, encoding: .utf8)) ?? ""
    }

    /// Environment that points the CLI and the client library at this daemon (and the CLI at its configuration).
    public var clientEnvironment: [String: String] {
        ["TOKENBROKER_SOCKET": socketPath, "XDG_CONFIG_HOME": configDirectory]
    }

    private func waitUntilListening(timeout: Duration = eventTimeout) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if UnixSocket.canConnect(socketPath) { return }
            guard process.isRunning else {
                throw TestSetupError(
                    "tokenbrokerd exited with \(process.exitStatus ?? -1) before listening:\n\(log)"
                )
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestSetupError("tokenbrokerd did not listen on \(socketPath) in time:\n\(log)")
    }

    /// Sends `signal` and waits for the exit status (128 + signal when it was killed by one).
    @discardableResult
    public func stop(signal: Int32 = SIGTERM, timeout: Duration = .seconds(30)) async throws -> Int32 {
        process.signal(signal)
        return try await process.waitForExit(timeout: timeout)
    }

    deinit {
        process.signal(SIGKILL)
    }
}

/// Small blocking Unix-socket client for tests that speak raw bytes.
public enum UnixSocket {
    /// Whether a connection to `path` succeeds.
    public static func canConnect(_ path: String) -> Bool {
        guard let fd = try? connect(path) else { return false }
        close(fd)
        return true
    }

    /// A connected stream socket to `path`, with a receive timeout.
    public static func connect(_ path: String, receiveTimeout: Duration = eventTimeout) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestSetupError("socket: \(errno)") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes.prefix(raw.count - 1))
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else {
            close(fd)
            throw TestSetupError("connect \(path): \(String(cString: strerror(errno)))")
        }
        var timeout = timeval(
            tv_sec: Int(receiveTimeout.components.seconds),
            tv_usec: Int(receiveTimeout.components.attoseconds / 1_000_000_000_000)
        )
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    /// Writes all of `bytes` (on a thread of its own: a large write may block until the peer reads).
    ///
    /// A peer that closed makes this throw, never raise SIGPIPE.
    public static func send(_ fd: Int32, _ bytes: [UInt8]) async throws {
        if let failure = await offload({ blockingSend(fd, bytes) }) { throw TestSetupError("send: \(failure)") }
    }

    /// Writes a few bytes on the calling thread, at once: what must reach the socket before a server's clock runs
    /// out (`send(_:_:)` first starts a thread, which a busy machine may take hundreds of milliseconds to run).
    ///
    /// Only for writes that fit the socket's buffer, which never block.
    public static func sendNow(_ fd: Int32, _ bytes: [UInt8]) throws {
        if let failure = blockingSend(fd, bytes) { throw TestSetupError("send: \(failure)") }
    }

    /// Writes all of `bytes`; why not, if it could not.
    private static func blockingSend(_ fd: Int32, _ bytes: [UInt8]) -> String? {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            guard written > 0 else { return String(cString: strerror(errno)) }
            offset += written
        }
        return nil
    }

    /// Reads until `count` newline-terminated lines arrived, or EOF / timeout; returns the lines and whether the peer
    /// closed.
    ///
    /// Blocks a thread of its own, never one of Swift concurrency's few.
    public static func readLines(_ fd: Int32, count: Int) async -> (lines: [String], closed: Bool) {
        await offload { blockingReadLines(fd, count: count) }
    }

    /// Whether the peer closed the connection: a read returns EOF, or ECONNRESET (a peer that closes with
    /// bytes of ours still unread resets the connection), within the socket's timeout.
    public static func isClosedByPeer(_ fd: Int32) async -> Bool {
        await offload {
            var byte: UInt8 = 0
            let received = read(fd, &byte, 1)
            return received == 0 || (received < 0 && errno == ECONNRESET)
        }
    }

    private static func blockingReadLines(_ fd: Int32, count: Int) -> (lines: [String], closed: Bool) {
        var buffer: [UInt8] = []
        var lines: [String] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while lines.count < count {
            let received = read(fd, &chunk, chunk.count)
            if received <= 0 { return (lines, received == 0 || errno == ECONNRESET) }
            buffer += chunk[0..<received]
            while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                lines.append(String(decoding: buffer[..<newline], as: UTF8.self))
                buffer.removeSubrange(...newline)
            }
        }
        return (lines, false)
    }

}

/// Runs blocking work on a thread of its own and waits for it without holding a cooperative thread (the pool
/// has as many threads as cores; blocking them can starve the code under test).
public func offload<Result: Sendable>(_ body: @escaping @Sendable () -> Result) async -> Result {
    await withCheckedContinuation { continuation in
        let thread = Thread { continuation.resume(returning: body()) }
        thread.start()
    }
}
