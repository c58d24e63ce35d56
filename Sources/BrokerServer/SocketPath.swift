import Foundation

/// Getting a socket path ready to bind: a private directory, and no live broker already there.
enum SocketPath {
    /// Creates the socket's directory 0700 if missing; refuses a path where a broker answers; removes a
    /// stale socket file (nobody listening) and refuses anything else in the way.
    static func prepare(_ path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        var info = stat()
        if lstat(directory, &info) != 0 {
            do {
                // Missing parents are created too (a TOKENBROKER_SOCKET under a new directory); all private.
                try FileManager.default.createDirectory(
                    atPath: directory,
                    withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o700]
                )
            } catch {
                throw ServerError("cannot create the socket directory \(directory): \(error)")
            }
        } else {
            guard (info.st_mode & S_IFMT) == S_IFDIR else { throw ServerError("\(directory) is not a directory") }
            guard info.st_uid == getuid() else { throw ServerError("\(directory) belongs to another user") }
        }
        guard lstat(path, &info) == 0 else { return }
        guard (info.st_mode & S_IFMT) == S_IFSOCK else {
            throw ServerError("\(path) exists and is not a socket; move it away")
        }
        if isAnswering(path) {
            throw ServerError("another tokenbrokerd is already serving \(path)")
        }
        guard unlink(path) == 0 || errno == ENOENT else {
            throw ServerError("cannot remove the stale socket \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// Whether something accepts connections on the socket at `path`.
    static func isAnswering(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        return result == 0
    }
}

/// Why the server could not start.
public struct ServerError: Error, Sendable, CustomStringConvertible {
    /// What went wrong and what to do.
    public let message: String

    init(_ message: String) {
        self.message = message
    }

    /// The message.
    public var description: String {
        message
    }
}
