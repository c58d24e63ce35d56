import BrokerProtocol
import CLinuxSupport
import NIOCore

#if canImport(Glibc)
import Glibc
#endif

extension PeerCredentials {
    /// Reads the credentials of an accepted channel.
    ///
    /// Must run on the channel's event loop.
    static func of(_ channel: any Channel) -> EventLoopFuture<PeerCredentials> {
        guard let provider = channel as? any SocketOptionProvider else {
            return channel.eventLoop.makeFailedFuture(ChannelError.operationUnsupported)
        }
        return provider.unsafeGetSocketOption(level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
    }

    /// The peer's executable, from `/proc/<pid>/exe`; nil when it cannot be read (the process is gone, or the
    /// daemon runs in another user namespace).
    var executable: String? {
        // On the stack, and not cleared first: a whole page zeroed on the heap was most of what reading it cost.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 4096) { buffer in
            guard let start = buffer.baseAddress else { return nil }
            let count = readlink("/proc/\(pid)/exe", start, buffer.count - 1)
            guard count > 0 else { return nil }
            return String(decoding: UnsafeBufferPointer(rebasing: buffer[..<count]), as: UTF8.self)
        }
    }
}

/// The process on the other end, through its pidfd (`SO_PEERPIDFD`, Linux 6.5): what the audit names.
///
/// A pid alone can be reused once its process exits, so the executable read from `/proc/<pid>/exe` is kept only if
/// the pidfd says the process it names is still alive after the read. A peer outside the daemon's pid namespace
/// has no pid here (0): it is named by its pidfs inode instead, which no other process gets while the system runs.
struct PeerProcess {
    /// The pid in the daemon's pid namespace; 0 when the peer is outside it.
    var pid: Int32
    /// `/proc/<pid>/exe`, when it could be read and still belonged to the peer afterwards.
    var executable: String?
    /// The pidfd's inode on pidfs (Linux 6.9): a process id that is never reused, in any namespace.
    var processID: UInt64?

    /// Identifies the peer of `channel`, whose credentials are `credentials`.
    ///
    /// Falls back to the credentials' pid where the kernel has no `SO_PEERPIDFD`. Must run on the channel's event
    /// loop: it reads the socket option there and then, without a future.
    static func of(_ channel: any Channel, credentials: PeerCredentials) -> PeerProcess {
        let peerPidfd = ChannelOptions.Types.SocketOption(
            level: .socket,
            name: NIOBSDSocket.Option(rawValue: 77)  // SO_PEERPIDFD, which Glibc's module does not declare
        )
        guard let options = channel.syncOptions, let pidfd = try? options.getOption(peerPidfd) else {
            return fallback(credentials)
        }
        return identify(pidfd: Int32(truncatingIfNeeded: pidfd), credentials: credentials)
    }

    private static func fallback(_ credentials: PeerCredentials) -> PeerProcess {
        PeerProcess(pid: credentials.pid, executable: credentials.executable, processID: nil)
    }

    private static func identify(pidfd: Int32, credentials: PeerCredentials) -> PeerProcess {
        defer { close(pidfd) }
        // The credentials' pid is the pidfd's, as this namespace sees it (0 outside it).
        let pid = credentials.pid
        var executable = pid > 0 ? credentials.executable : nil
        if executable != nil, tb_pidfd_is_alive(pidfd) != 1 { executable = nil }
        let processID = tb_pidfd_process_id(pidfd)
        return PeerProcess(pid: pid, executable: executable, processID: processID > 0 ? UInt64(processID) : nil)
    }
}
