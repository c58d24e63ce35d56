import CLinuxSupport
public import Foundation

/// What the daemon does to itself before it opens anything: files it creates are private, no core dump holds its
/// tokens, no other process of the user attaches to it, and no descriptor it inherited leaks into a browser.
///
/// Under systemd the unit does most of this too (`UMask=`, `LimitCORE=`, `LimitNOFILE=`); a daemon started by
/// hand gets the same from here.
public enum ProcessHardening {
    /// How many descriptors the daemon asks for, at most: enough for every connection, sign-in and provider call it
    /// allows at once, with room to spare.
    public static let wantedDescriptors: rlim_t = 8192

    /// Applies everything; returns what could not be done, for the log (none of it stops the daemon).
    public static func apply() -> [String] {
        var problems: [String] = []
        // Files the daemon creates (the database and its journal files, the socket) are for the user alone.
        umask(0o077)

        // No core dump: it would hold every token in memory and the cache key.
        var none = rlimit(rlim_cur: 0, rlim_max: 0)
        if setrlimit(Int32(RLIMIT_CORE.rawValue), &none) != 0 {
            problems.append("cannot turn core dumps off (RLIMIT_CORE): \(String(cString: strerror(errno)))")
        }
        // Not dumpable: no core even where a core_pattern pipe ignores RLIMIT_CORE, and no ptrace or
        // /proc/<pid>/mem for the user's other processes.
        if tb_set_nondumpable() != 0 {
            problems.append("cannot make the process non-dumpable: \(String(cString: strerror(errno)))")
        }

        // Descriptors: the soft limit up to what the hard limit allows (often 1024 of 524288).
        var descriptors = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &descriptors) == 0, descriptors.rlim_cur < wantedDescriptors {
            descriptors.rlim_cur = min(wantedDescriptors, descriptors.rlim_max)
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &descriptors) != 0 {
                problems.append("cannot raise the descriptor limit: \(String(cString: strerror(errno)))")
            }
        }

        // Whatever the daemon inherited above stdin, stdout and stderr closes when it starts a program.
        problems += closeOnExec()
        return problems
    }

    /// Sets close-on-exec on every open descriptor above 2.
    static func closeOnExec() -> [String] {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else {
            return ["cannot list /proc/self/fd to mark inherited descriptors close-on-exec"]
        }
        var problems: [String] = []
        for fd in entries.compactMap(Int32.init) where fd > 2 {
            let flags = fcntl(fd, F_GETFD)
            // The directory's own descriptor is already gone when listed: EBADF is fine.
            guard flags >= 0 else { continue }
            if flags & FD_CLOEXEC == 0, fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0 {
                problems.append("cannot mark descriptor \(fd) close-on-exec: \(String(cString: strerror(errno)))")
            }
        }
        return problems
    }
}
