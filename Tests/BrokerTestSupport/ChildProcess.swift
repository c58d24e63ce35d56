import CLinuxSupport
public import Foundation
import Synchronization

/// A program the tests start: `posix_spawn`, and one thread per child blocked in `waitpid` on that child alone.
///
/// Foundation's `Process` is not used: it learns that a child ended from a socket the child inherits, and then
/// blocks its one monitoring thread in `waitpid` for that child. A child that closes the descriptors it inherited
/// (`systemd-socket-activate` does) looks ended at once, and the thread then waits until it really ends, while no
/// other child's end is seen: daemons stopped in other tests "did not exit".
public final class ChildProcess: Sendable {
    /// Where a standard stream of the child goes.
    public enum Stream: Sendable {
        /// `/dev/null`.
        case null
        /// A file, created if missing, appended to.
        case file(String)
        /// A pipe the test reads (``output``); only for stdout.
        case pipe
    }

    /// The child's process id.
    public let pid: Int32
    /// The read end of the child's stdout, for ``Stream/pipe``.
    public let output: FileHandle?
    private let state = Mutex<State>(State())

    private struct State {
        var status: Int32?
        var nextWaiter = 0
        var waiters: [Int: CheckedContinuation<Int32?, Never>] = [:]
    }

    private init(pid: Int32, output: FileHandle?) {
        self.pid = pid
        self.output = output
    }

    /// Starts `executable` with `arguments` (not counting the program name) and exactly `environment`, its signals
    /// unblocked and at their defaults.
    public static func spawn(
        _ executable: String,
        _ arguments: [String],
        environment: [String: String],
        stdin: Stream = .null,
        stdout: Stream = .null,
        stderr: Stream = .null
    ) throws -> ChildProcess {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var pipeEnds: [Int32] = [-1, -1]
        for (fd, stream) in [(Int32(0), stdin), (1, stdout), (2, stderr)] {
            switch stream {
            case .null:
                posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0)
            case .file(let path):
                let flags = fd == 0 ? O_RDONLY : O_WRONLY | O_CREAT | O_APPEND
                posix_spawn_file_actions_addopen(&actions, fd, path, flags, 0o600)
            case .pipe:
                guard fd == 1, pipe(&pipeEnds) == 0 else { throw TestSetupError("cannot make a pipe") }
                // Neither end may leak into other children the tests start meanwhile.
                for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
                posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], 1)
            }
        }
        // Nothing else of this process: a descriptor some test holds open for writing a script would otherwise
        // live on in a long-lived child (a daemon, a provider), and running that script would fail with ETXTBSY.
        guard tb_spawn_file_actions_addclosefrom(&actions, 3) == 0 else {
            throw TestSetupError("\(executable) could not be started: no closefrom in posix_spawn")
        }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var spawned = pid_t()
        let result = posix_spawn(&spawned, executable, &actions, &attributes, argv, envp)
        let pid = spawned
        if pipeEnds[1] >= 0 { close(pipeEnds[1]) }
        guard result == 0 else {
            if pipeEnds[0] >= 0 { close(pipeEnds[0]) }
            throw TestSetupError("\(executable) could not be started: \(String(cString: strerror(result)))")
        }
        let child = ChildProcess(
            pid: pid,
            output: pipeEnds[0] >= 0 ? FileHandle(fileDescriptor: pipeEnds[0], closeOnDealloc: true) : nil
        )
        Thread.detachNewThread { [weak child] in
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            let signal = status & 0x7F
            child?.exited(signal == 0 ? (status >> 8) & 0xFF : 128 + signal)
        }
        return child
    }

    private func exited(_ status: Int32) {
        let waiters = state.withLock { state in
            state.status = status
            defer { state.waiters = [:] }
            return state.waiters.values
        }
        for waiter in waiters { waiter.resume(returning: status) }
    }

    /// Whether the child has not exited yet.
    public var isRunning: Bool {
        state.withLock { $0.status == nil }
    }

    /// The exit status, or 128 + the signal that ended it; nil while it runs.
    public var exitStatus: Int32? {
        state.withLock { $0.status }
    }

    /// Sends `signal` to the child while it runs.
    public func signal(_ signal: Int32) {
        // The waiter thread reaps the child only after `exited` sets the status, so while it is nil the pid
        // cannot have been reused.
        state.withLock { state in
            if state.status == nil { kill(pid, signal) }
        }
    }

    /// Waits until the child exits; returns its status (or 128 + signal).
    ///
    /// Throws when it runs past `timeout`.
    @discardableResult
    public func waitForExit(timeout: Duration = .seconds(30)) async throws -> Int32 {
        let status = await withTaskGroup(of: Int32?.self) { group in
            group.addTask { await self.exit() }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? self.exitStatus
        }
        guard let status else { throw TestSetupError("process \(pid) did not exit within \(timeout)") }
        return status
    }

    /// The exit status once the child exits; nil when the waiting task is canceled first.
    private func exit() async -> Int32? {
        let id = state.withLock { state in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let immediate = state.withLock { state -> Int32?? in
                    if let status = state.status { return .some(status) }
                    if Task.isCancelled { return .some(nil) }
                    state.waiters[id] = continuation
                    return nil
                }
                if let immediate { continuation.resume(returning: immediate) }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume(returning: nil)
        }
    }

    /// Runs `executable` to completion; returns its status (or 128 + signal).
    public static func run(
        _ executable: String,
        _ arguments: [String],
        environment: [String: String],
        stdin: Stream = .null,
        stdout: Stream = .null,
        stderr: Stream = .null
    ) async throws -> Int32 {
        let child = try spawn(
            executable,
            arguments,
            environment: environment,
            stdin: stdin,
            stdout: stdout,
            stderr: stderr
        )
        return try await child.waitForExit(timeout: .seconds(300))
    }

    deinit {
        if isRunning { kill(pid, SIGKILL) }
    }
}
