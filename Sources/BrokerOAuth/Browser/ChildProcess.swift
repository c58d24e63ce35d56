import BrokerTime
import CLinuxSupport
import Foundation
import Glibc

/// Starts a program for the user, the way a session would: signals unblocked and at their defaults, its own
/// process group, stdin, stdout and stderr on /dev/null, and no other descriptor of the daemon's.
///
/// Foundation's `Process` hands the child the spawning thread's signal mask and ignored signals. Threads of a
/// Swift server process can have every signal blocked (seen: a child started from a test ran with all of them
/// blocked and ignored SIGTERM), and a browser started that way could not be stopped with SIGTERM or Ctrl-C.
/// `posix_spawn` with `POSIX_SPAWN_SETSIGMASK` and `POSIX_SPAWN_SETSIGDEF` resets both.
enum ChildProcess {
    /// Starts `executable` with `arguments` (the first is the program's name) and `environment`; returns its pid.
    ///
    /// A busy executable (`ETXTBSY`) is tried again after a short wait on `clock`.
    static func spawn(
        _ executable: String,
        arguments: [String],
        environment: [String: String],
        clock: any BrokerClock
    ) async throws(BrowserError) -> pid_t {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var all = sigset_t()
        sigfillset(&all)
        sigdelset(&all, SIGKILL)
        sigdelset(&all, SIGSTOP)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(
            &attributes,
            Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP)
        )

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        // Nothing else of ours: not the listening socket (a browser holding it kept a restarted daemon from
        // binding), not a caller's connection, not the redirect listener, not the cache.
        guard tb_spawn_file_actions_addclosefrom(&actions, 3) == 0 else {
            throw BrowserError("\(arguments.first ?? executable) could not be started: no closefrom in posix_spawn")
        }

        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid = pid_t()
        var result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        // A script just written may still be open for writing in a child another thread is starting (its
        // descriptor inherited for an instant): the kernel answers ETXTBSY. It passes; try again briefly.
        var tries = 1
        while result == ETXTBSY && tries < 5 {
            try? await clock.sleep(for: .milliseconds(20))  // never usleep: this may be an event-loop thread
            result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
            tries += 1
        }
        guard result == 0 else {
            throw BrowserError(
                "\(arguments.first ?? executable) could not be started: \(String(cString: strerror(result)))"
            )
        }
        return pid
    }

    /// Waits for `pid` on a thread of its own (a browser may run for hours) and reports its exit status, or 128 +
    /// the signal that ended it.
    static func onExit(of pid: pid_t, _ report: @escaping @Sendable (Int32) -> Void) {
        Thread.detachNewThread {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            let signal = status & 0x7F
            report(signal == 0 ? (status >> 8) & 0xFF : 128 + signal)
        }
    }
}
