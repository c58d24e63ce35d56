import CLinuxSupport
import Glibc
import Testing

@testable import BrokerSystemd

/// What the daemon does to itself at start, each measure one a daemon started by hand, outside the unit, relies on.
///
/// Checked in a child process of the tests: the measures are for a whole process, and applied in the test process
/// itself they would change every test running beside it.
struct ProcessHardeningTests {
    /// The checks, in the order of the bits of the child's exit status that say which failed.
    static let checks = [
        "a pipe is close-on-exec before", "apply() reported a problem", "the umask is not 077",
        "RLIMIT_CORE is not 0", "the process is dumpable", "RLIMIT_NOFILE is below what the daemon wants",
        "an inherited descriptor is not close-on-exec", "stderr is close-on-exec",
    ]

    /// Everything applied: private files, no core dump, not dumpable, descriptors raised, none inherited.
    @Test func appliesEveryMeasure() async throws {
        // The child's exit status is a bit for each check that failed: 0 when all held.
        await #expect(processExitsWith: .success, "failed checks, by bit: \(Self.checks)") {
            exit(ProcessHardeningTests.failedChecks())
        }
    }

    /// Applies the measures to this process; a bit set for each of ``checks`` that failed.
    private static func failedChecks() -> Int32 {
        var failed: Int32 = 0
        var index: Int32 = 0
        func check(_ holds: Bool) {
            if !holds { failed |= 1 << index }
            index += 1
        }
        umask(0o022)  // a login shell's
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else { return 0xFF }  // a descriptor without close-on-exec, as one inherited
        check(fcntl(pipeEnds[0], F_GETFD) & FD_CLOEXEC == 0)

        check(ProcessHardening.apply().isEmpty)

        check(umask(0o077) == 0o077)
        var core = rlimit()
        check(getrlimit(Int32(RLIMIT_CORE.rawValue), &core) == 0 && core.rlim_cur == 0 && core.rlim_max == 0)
        check(tb_is_dumpable() == 0)
        // The soft limit at least what the daemon wants (or all the hard limit allows); one already higher is kept.
        var descriptors = rlimit()
        check(
            getrlimit(Int32(RLIMIT_NOFILE.rawValue), &descriptors) == 0
                && descriptors.rlim_cur >= min(ProcessHardening.wantedDescriptors, descriptors.rlim_max)
        )
        check(pipeEnds.allSatisfy { fcntl($0, F_GETFD) & FD_CLOEXEC != 0 })
        // The standard descriptors stay as they are: a browser the daemon starts keeps its stdin, stdout, stderr.
        check(fcntl(2, F_GETFD) & FD_CLOEXEC == 0)
        return failed
    }
}
