import BrokerProtocol
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
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/\(pid)/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
