import CLinuxSupport
import Glibc
import Testing

@testable import BrokerSystemd

/// What the daemon does to itself at start, checked in the test process (each effect is one a daemon started by
/// hand, outside the unit's settings, relies on; Tests/security checks them on the built daemon).
@Suite(.serialized) struct ProcessHardeningTests {
    /// Everything applied: private files, no core dump, not dumpable, descriptors raised, none inherited.
    @Test func appliesEveryMeasure() throws {
        let before = umask(0o022)
        defer { umask(before) }
        var pipeEnds: [Int32] = [0, 0]
        try #require(pipe(&pipeEnds) == 0)  // a descriptor without close-on-exec, as one inherited would be
        defer { for fd in pipeEnds { close(fd) } }
        #expect(fcntl(pipeEnds[0], F_GETFD) & FD_CLOEXEC == 0)

        #expect(ProcessHardening.apply().isEmpty)

        let now = umask(0o077)
        #expect(now == 0o077)
        var core = rlimit()
        #expect(getrlimit(Int32(RLIMIT_CORE.rawValue), &core) == 0 && core.rlim_cur == 0 && core.rlim_max == 0)
        #expect(tb_is_dumpable() == 0)
        // The soft limit at least what the daemon wants (or all the hard limit allows); one already higher is kept.
        var descriptors = rlimit()
        #expect(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &descriptors) == 0)
        #expect(descriptors.rlim_cur >= min(ProcessHardening.wantedDescriptors, descriptors.rlim_max))
        for fd in pipeEnds { #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0) }
        // The standard descriptors stay as they are: a browser the daemon starts keeps its stdin, stdout, stderr.
        #expect(fcntl(2, F_GETFD) & FD_CLOEXEC == 0)
    }
}
