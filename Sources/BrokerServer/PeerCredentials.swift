import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// The peer of a Unix-socket connection, as the kernel recorded it at `connect()` (`SO_PEERCRED`).
struct PeerCredentials: Sendable, Hashable {
    var pid: Int32
    var uid: UInt32
    var gid: UInt32

    /// Reads the credentials of an accepted channel.
    ///
    /// Must run on the channel's event loop.
    static func of(_ channel: any Channel) -> EventLoopFuture<PeerCredentials> {
        guard let provider = channel as? any SocketOptionProvider else {
            return channel.eventLoop.makeFailedFuture(ChannelError.operationUnsupported)
        }
        return provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET),
            name: SocketOptionName(SO_PEERCRED)
        ).map { (credentials: UnixCredentials) in
            PeerCredentials(pid: credentials.pid, uid: credentials.uid, gid: credentials.gid)
        }
    }

    /// The peer's executable, from `/proc/<pid>/exe`; nil when it cannot be read (the process is gone, or the
    /// daemon runs in another user namespace).
    var executable: String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/\(pid)/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// Glibc's `struct ucred`, which Swift's Glibc module hides behind `_GNU_SOURCE`: three 32-bit fields, the
/// same layout the kernel writes.
private struct UnixCredentials {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}
