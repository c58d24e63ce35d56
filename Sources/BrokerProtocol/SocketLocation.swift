#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif
#if canImport(Glibc)
public import Glibc
#endif

/// Where the broker's socket lives: the one rule the daemon, the CLI and every client share (Protocol/ §2.1).
///
/// 1. `$TOKENBROKER_SOCKET`, when set and not empty.
/// 2. `$XDG_RUNTIME_DIR/tokenbroker/broker.sock`, when `XDG_RUNTIME_DIR` is an absolute path (a login session).
/// 3. `/run/user/<uid>/tokenbroker/broker.sock`, when `/run/user/<uid>` is a directory of the user's, closed to
///    others (a session that did not export the variable: `su`, `sudo -i`, a service).
/// 4. `/tmp/tokenbroker-<uid>/broker.sock` otherwise (a root shell in a container, ssh without pam_systemd, CI):
///    the daemon creates the directory 0700, and daemon and clients use it only while it is the user's and closed
///    to others, as tmux does with `/tmp/tmux-<uid>`.
///
/// Whichever rule applies, the socket's directory must belong to the user and be closed to everyone else (mode
/// 0700): the daemon makes it so, and clients check it before they connect (``directoryProblem(ofSocket:uid:)``).
public enum SocketLocation {
    /// The environment variable that overrides the socket path.
    public static let overrideVariable = "TOKENBROKER_SOCKET"

    /// The socket's path relative to `$XDG_RUNTIME_DIR`.
    public static let runtimeRelativePath = "tokenbroker/broker.sock"

    /// The socket's file name inside its directory.
    public static let fileName = "broker.sock"

    /// The path to use, by the four rules above.
    public static func resolve(
        environment: [String: String] = ProcessInfo.processInfo.environment,
        uid: UInt32 = getuid()
    ) -> String {
        resolve(variable: { environment[$0] }, uid: uid)
    }

    /// The path to use, by the four rules above, reading the environment through `variable`.
    public static func resolve(variable: (String) -> String?, uid: UInt32 = getuid()) -> String {
        if let path = variable(overrideVariable), !path.isEmpty {
            return path
        }
        if let runtime = variable("XDG_RUNTIME_DIR"), runtime.hasPrefix("/") {
            return runtime + "/" + runtimeRelativePath
        }
        let userRuntime = userRuntimeDirectory(uid: uid)
        if isPrivateDirectory(userRuntime, uid: uid) {
            return userRuntime + "/" + runtimeRelativePath
        }
        return temporaryDirectory(uid: uid) + "/" + fileName
    }

    /// `/run/user/<uid>`: the runtime directory `pam_systemd` makes for a logged-in user.
    public static func userRuntimeDirectory(uid: UInt32 = getuid()) -> String {
        "/run/user/\(uid)"
    }

    /// `/tmp/tokenbroker-<uid>`: the directory of the last rule.
    public static func temporaryDirectory(uid: UInt32 = getuid()) -> String {
        "/tmp/tokenbroker-\(uid)"
    }

    /// Why the directory holding `socketPath` cannot be trusted with a connection, or nil when it is the user's
    /// own and closed to others.
    ///
    /// The directory itself must not be a symbolic link; it must belong to `uid` and have no permission bits for
    /// its group or others. A socket in a directory others can write to may be anyone's.
    public static func directoryProblem(
        ofSocket socketPath: String,
        uid: UInt32 = getuid()
    ) -> SocketDirectoryProblem? {
        let directory = parent(of: socketPath)
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT { return .missing(directory) }
            return .untrusted(whyNotOpened(directory, errno: code, uid: uid))
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return .untrusted("\(directory) cannot be examined") }
        return problem(with: info, directory: directory, uid: uid).map(SocketDirectoryProblem.untrusted)
    }

    /// Why `directory` could not be opened as a directory (`errno` of that open), said as what it is: a symbolic
    /// link, another user's (which one cannot open, mode 0700), not a directory; else the system's reason.
    public static func whyNotOpened(_ directory: String, errno code: Int32, uid: UInt32 = getuid()) -> String {
        var info = stat()
        if lstat(directory, &info) == 0 {
            if (info.st_mode & S_IFMT) == S_IFLNK { return "\(directory) is a symbolic link" }
            if (info.st_mode & S_IFMT) != S_IFDIR { return "\(directory) is not a directory" }
            if info.st_uid != uid { return "\(directory) belongs to another user (uid \(info.st_uid))" }
        }
        return "\(directory) cannot be opened: \(String(cString: strerror(code)))"
    }

    /// Why a directory's `stat` makes it unfit to hold the socket, or nil.
    public static func problem(with info: stat, directory: String, uid: UInt32 = getuid()) -> String? {
        if info.st_uid != uid {
            return "\(directory) belongs to another user (uid \(info.st_uid))"
        }
        if info.st_mode & 0o077 != 0 {
            return "\(directory) is open to other users (mode \(String(info.st_mode & 0o777, radix: 8)))"
        }
        return nil
    }

    /// The directory part of a socket path (`.` for a bare file name).
    public static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    private static func isPrivateDirectory(_ path: String, uid: UInt32) -> Bool {
        var info = stat()
        guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else { return false }
        return problem(with: info, directory: path, uid: uid) == nil
    }
}

/// The credentials the kernel recorded for the other end of a Unix-socket connection at `connect()`
/// (`SO_PEERCRED`): the same layout as C's `struct ucred`, which Swift's Glibc module does not declare.
public struct PeerCredentials: Sendable, Hashable {
    /// The peer's process id (as seen from this process's pid namespace; 0 when the peer is outside it).
    public var pid: Int32
    /// The peer's user id.
    public var uid: UInt32
    /// The peer's group id.
    public var gid: UInt32

    /// Creates credentials.
    public init(pid: Int32 = 0, uid: UInt32 = 0, gid: UInt32 = 0) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }

    /// The peer of the connected Unix socket `fd`, or nil when the kernel does not say.
    public static func of(socket fd: Int32) -> PeerCredentials? {
        var credentials = PeerCredentials()
        var length = socklen_t(MemoryLayout<PeerCredentials>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else { return nil }
        return credentials
    }
}

/// Why a socket's directory is not fit for a connection.
public enum SocketDirectoryProblem: Sendable, Hashable, CustomStringConvertible {
    /// The directory does not exist: no broker has made it yet.
    case missing(String)
    /// The directory is not the user's private one (the reason says how).
    case untrusted(String)

    /// What is wrong.
    public var description: String {
        switch self {
        case .missing(let directory): "\(directory) does not exist"
        case .untrusted(let reason): reason
        }
    }
}
