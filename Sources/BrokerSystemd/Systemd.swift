import CSystemd
import Glibc

/// The daemon's side of systemd, over libsystemd: socket activation, readiness and status, the watchdog.
///
/// Every call is harmless without systemd: no listen fds, notifications go nowhere, no watchdog.
public enum Systemd {
    /// `SD_LISTEN_FDS_START`: the first fd systemd passes (a macro, so not imported).
    static let listenFDsStart: CInt = 3

    /// The sockets systemd passed (`LISTEN_FDS`, for this pid), with their `FileDescriptorName=`.
    ///
    /// The variables are removed, so children (a browser) do not inherit them.
    public static func listenFDs() -> [(fd: CInt, name: String)] {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(1, &names)
        guard count > 0 else { return [] }
        defer {
            if let names {
                for index in 0..<Int(count) { free(names[index]) }
                free(names)
            }
        }
        return (0..<count).map { index in
            (listenFDsStart + index, names?[Int(index)].map { String(cString: $0) } ?? "unknown")
        }
    }

    /// The socket to serve among those systemd passed: the one named `broker`, else the only one.
    ///
    /// Nil when none was passed. Throws when several were passed and none is named `broker`: the daemon does not
    /// guess.
    public static func brokerSocket(
        among passed: [(fd: CInt, name: String)]
    ) throws(AmbiguousSockets) -> (fd: CInt, name: String)? {
        guard !passed.isEmpty else { return nil }
        if let named = passed.first(where: { $0.name == "broker" }) { return named }
        guard passed.count == 1 else { throw AmbiguousSockets(count: passed.count) }
        return passed[0]
    }

    /// Several sockets passed and none named `broker`.
    public struct AmbiguousSockets: Error, CustomStringConvertible {
        /// How many were passed.
        public let count: Int

        public var description: String {
            "systemd passed \(count) sockets and none is named \"broker\" (FileDescriptorName=broker)"
        }
    }

    /// Whether `fd` is a listening `AF_UNIX` stream socket.
    public static func isListeningUnixStream(_ fd: CInt) -> Bool {
        sd_is_socket_unix(fd, CInt(SOCK_STREAM.rawValue), 1, nil, 0) > 0
    }

    /// The path a Unix socket is bound to, or nil.
    public static func socketPath(of fd: CInt) -> String? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let result = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard result == 0, address.sun_family == sa_family_t(AF_UNIX) else { return nil }
        return withUnsafeBytes(of: address.sun_path) { bytes in
            let path = bytes.prefix { $0 != 0 }
            return path.isEmpty ? nil : String(decoding: path, as: UTF8.self)
        }
    }

    /// Sends a notification (`READY=1`, `STATUS=…`, `WATCHDOG=1`, `RELOADING=1`, `STOPPING=1`) to the service
    /// manager; newline-separated assignments go together.
    ///
    /// Returns whether it was sent (false without `NOTIFY_SOCKET`). A status text has its newlines flattened.
    @discardableResult
    public static func notify(_ assignments: [String: String]) -> Bool {
        let ordered = ["RELOADING", "READY", "STOPPING", "WATCHDOG", "MONOTONIC_USEC", "STATUS"]
        let keys =
            ordered.filter { assignments[$0] != nil } + assignments.keys.filter { !ordered.contains($0) }.sorted()
        let text = keys.map { key in
            "\(key)=\(assignments[key, default: ""].replacing("\n", with: " "))"
        }.joined(separator: "\n")
        return sd_notify(0, text) > 0
    }

    /// `STATUS=…` alone.
    @discardableResult
    public static func status(_ text: String) -> Bool {
        notify(["STATUS": text])
    }

    /// The monotonic clock in microseconds, for `MONOTONIC_USEC=` beside `RELOADING=1`.
    public static var monotonicMicroseconds: UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000 + UInt64(time.tv_nsec) / 1000
    }

    /// The watchdog interval `WatchdogSec=` asks of this process (honouring `WATCHDOG_PID`), or nil.
    public static func watchdogInterval() -> Duration? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        return .microseconds(Int64(microseconds))
    }

    /// Whether stderr is connected to the journal: `JOURNAL_STREAM=<dev>:<inode>` names fd 2.
    ///
    /// (`sd_journal_sendv` reports success even with no journald, so this is the way to know.)
    public static func stderrIsJournal() -> Bool {
        guard let raw = getenv("JOURNAL_STREAM") else { return false }
        let parts = String(cString: raw).split(separator: ":")
        guard parts.count == 2, let device = UInt(parts[0]), let inode = UInt(parts[1]) else { return false }
        var status = stat()
        return fstat(STDERR_FILENO, &status) == 0 && UInt(status.st_dev) == device && UInt(status.st_ino) == inode
    }

    /// Writes one structured journal entry of `FIELD=value` assignments (values may hold newlines).
    @discardableResult
    public static func journalSend(_ fields: [String]) -> Bool {
        let buffers = fields.map { field -> UnsafeMutableRawBufferPointer in
            let bytes = Array(field.utf8)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(bytes.count, 1), alignment: 1)
            buffer.copyBytes(from: bytes)
            return UnsafeMutableRawBufferPointer(rebasing: buffer[0..<bytes.count])
        }
        defer { for buffer in buffers { buffer.deallocate() } }
        var vectors = buffers.map { iovec(iov_base: $0.baseAddress, iov_len: $0.count) }
        return vectors.withUnsafeMutableBufferPointer { sd_journal_sendv($0.baseAddress, CInt($0.count)) } >= 0
    }
}
