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
    /// An id of the peer process that is never reused (its pidfd's pidfs inode), where the kernel has one.
    public var processID: UInt64?
    /// The door the request came through.
    public var via: FrontEnd
    /// The label of the managed-identity grant the request came with, for a caller of the endpoint.
    public var grant: String?
    /// The peer's network address, for a caller of the endpoint.
    public var address: String?

    /// The broker's doors.
    public enum FrontEnd: String, Sendable, Hashable {
        /// The Unix socket and its JSON-RPC protocol.
        case socket
        /// Microsoft's Broker1 interface on the session bus.
        case bus
        /// The managed-identity HTTP endpoint, with a grant's secret.
        case endpoint
    }

    /// Creates a caller.
    public init(
        pid: Int32,
        uid: UInt32,
        gid: UInt32,
        executable: String?,
        processID: UInt64? = nil,
        via: FrontEnd = .socket,
        grant: String? = nil,
        address: String? = nil
    ) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.executable = executable
        self.processID = processID
        self.via = via
        self.grant = grant
        self.address = address
    }

    /// The pid for a log line: `123`, or `outside` for a peer outside the daemon's pid namespace (which has no
    /// pid there).
    public var pidText: String {
        pid > 0 ? "\(pid)" : "outside"
    }

    /// `pid 123 (/usr/bin/app)`, ` over the bus` for a Broker1 caller, ` through grant <label>` for one of the
    /// endpoint.
    public var description: String {
        let door =
            switch via {
            case .socket: ""
            case .bus: " over the bus"
            case .endpoint: " through grant \(grant ?? "unknown")"
            }
        return "pid \(pidText) (\(executable ?? "unknown executable"))" + door
    }
}
