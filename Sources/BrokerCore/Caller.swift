/// The process on the other end of a request, from the socket's peer credentials.
public struct Caller: Sendable, Hashable, CustomStringConvertible {
    /// The peer's process id when it connected.
    public var pid: Int32
    /// The peer's user id.
    public var uid: UInt32
    /// The peer's group id.
    public var gid: UInt32
    /// The peer's executable (`/proc/<pid>/exe`), when it could be read.
    public var executable: String?

    /// Creates a caller.
    public init(pid: Int32, uid: UInt32, gid: UInt32, executable: String?) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.executable = executable
    }

    /// `pid 123 (/usr/bin/app)`.
    public var description: String {
        "pid \(pid) (\(executable ?? "unknown executable"))"
    }
}
