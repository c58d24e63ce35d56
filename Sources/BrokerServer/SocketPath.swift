import BrokerProtocol
import Foundation

/// A socket path made ready to bind: its private directory held open, and nothing live in the way.
final class PreparedSocket: Sendable {
    /// The path clients use.
    let path: String
    /// The path to bind: through the directory's descriptor (`/proc/self/fd/<n>/broker.sock`) where `/proc` is
    /// mounted, so that the socket lands in the directory that was checked even if the path changed since.
    let bindPath: String
    /// The socket's name in the directory.
    private let name: String
    /// The directory, opened without following a symbolic link; open while the socket is served.
    private let directory: Int32

    fileprivate init(path: String, name: String, directory: Int32) {
        self.path = path
        self.name = name
        self.directory = directory
        let throughDescriptor = "/proc/self/fd/\(directory)"
        bindPath = access(throughDescriptor, F_OK) == 0 ? "\(throughDescriptor)/\(name)" : path
    }

    deinit {
        close(directory)
    }

    /// A listening socket at the path, mode 0600 from the moment it exists (set on the socket before `bind`, so
    /// no umask is involved); its file's inode, for ``remove(inode:)``.
    func listen(backlog: Int32) throws -> (fd: Int32, inode: UInt64) {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ServerError("cannot create a socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(bindPath.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(fd)
            throw ServerError("the socket path \(path) is too long")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                fchmod(fd, 0o600) == 0 && bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
            }
        }
        var info = stat()
        guard bound, Glibc.listen(fd, backlog) == 0, fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw ServerError("cannot listen on \(path): \(reason)")
        }
        return (fd, UInt64(info.st_ino))
    }

    /// Removes the socket file, unless it is no longer the one this server bound (another daemon took the path
    /// since: its socket must stay).
    func remove(inode: UInt64) {
        var info = stat()
        guard fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) == 0, UInt64(info.st_ino) == inode else { return }
        unlinkat(directory, name, 0)
    }
}

/// Getting a socket path ready to bind: a private directory, and no live broker already there.
enum SocketPath {
    /// Creates the socket's directory 0700 if missing (and its missing parents), opens it without following a
    /// symbolic link and checks it is the user's (one left open to others is closed to 0700); then refuses a path
    /// where a broker answers, removes a stale socket file (nobody listening), and refuses anything else in the way.
    static func prepare(_ path: String) throws -> PreparedSocket {
        let directoryPath = SocketLocation.parent(of: path)
        let name = String(path.split(separator: "/", omittingEmptySubsequences: false).last ?? "")
        guard !name.isEmpty else { throw ServerError("\(path) names a directory, not a socket") }
        try makeDirectory(directoryPath)
        let fd = open(directoryPath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            let reason = SocketLocation.whyNotOpened(directoryPath, errno: errno)
            throw ServerError("cannot use the socket directory: \(reason); remove it, or set TOKENBROKER_SOCKET")
        }
        let prepared = PreparedSocket(path: path, name: name, directory: fd)
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw ServerError("cannot examine \(directoryPath)") }
        if info.st_uid != getuid() {
            throw ServerError(
                "the socket directory \(directoryPath) belongs to another user (uid \(info.st_uid)); remove it, or "
                    + "set TOKENBROKER_SOCKET"
            )
        }
        if info.st_mode & 0o777 != 0o700, fchmod(fd, 0o700) != 0 {
            throw ServerError("the socket directory \(directoryPath) is open to others and cannot be made private")
        }
        guard fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return prepared }
        guard (info.st_mode & S_IFMT) == S_IFSOCK else {
            throw ServerError("\(path) exists and is not a socket; move it away")
        }
        if isAnswering(prepared.bindPath) {
            throw ServerError("another tokenbrokerd is already serving \(path)")
        }
        guard unlinkat(fd, name, 0) == 0 || errno == ENOENT else {
            throw ServerError("cannot remove the stale socket \(path): \(String(cString: strerror(errno)))")
        }
        return prepared
    }

    /// `mkdir -p` with mode 0700 for every directory it creates.
    private static func makeDirectory(_ path: String) throws {
        // The mode is set on the opened directory afterwards (prepare): the process's umask may have narrowed it,
        // and a chmod by path here would follow a symbolic link put in its place meanwhile.
        guard mkdir(path, 0o700) != 0 else { return }
        switch errno {
        case EEXIST: return
        case ENOENT:
            let parent = SocketLocation.parent(of: path)
            guard parent != path else { break }
            try makeDirectory(parent)
            if mkdir(path, 0o700) == 0 { return }
            if errno == EEXIST { return }
        default: break
        }
        throw ServerError("cannot create the socket directory \(path): \(String(cString: strerror(errno)))")
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
