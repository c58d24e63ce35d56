public import BrokerProtocol

/// The server's socket and limits.
public struct ServerConfiguration: Sendable {
    /// Where the listening socket comes from.
    public var listener: Listener
    /// Connections open at once; one more is answered `broker_busy` and closed.
    public var maximumConnections: Int
    /// Requests in flight on one connection; one more is answered `broker_busy`.
    public var maximumRequestsPerConnection: Int
    /// A connection with nothing in flight and no bytes for this long is closed (with `timeout` if a frame was
    /// half sent).
    public var idleTimeout: Duration
    /// The largest frame accepted.
    public var maximumFrameBytes: Int
    /// The longest a frame may take from its first byte to its newline (a peer trickling bytes is cut off).
    public var frameDeadline: Duration
    /// Connections one peer process may hold open at once, so that one client cannot take every slot.
    public var maximumConnectionsPerPeer: Int
    /// Unread answer bytes a connection may queue besides the answer being written; past it, it is closed.
    public var outputBudget: Int

    /// Creates a configuration with the default limits.
    public init(
        listener: Listener,
        maximumConnections: Int = 256,
        maximumRequestsPerConnection: Int = WireProtocol.maximumRequestsInFlight,
        idleTimeout: Duration = .seconds(120),
        maximumFrameBytes: Int = 1 << 20,
        frameDeadline: Duration = .seconds(30),
        maximumConnectionsPerPeer: Int = 64,
        outputBudget: Int = 16 << 20
    ) {
        self.listener = listener
        self.maximumConnections = maximumConnections
        self.maximumRequestsPerConnection = maximumRequestsPerConnection
        self.idleTimeout = idleTimeout
        self.maximumFrameBytes = maximumFrameBytes
        self.frameDeadline = frameDeadline
        self.maximumConnectionsPerPeer = maximumConnectionsPerPeer
        self.outputBudget = outputBudget
    }
}

/// Where the listening socket comes from.
public enum Listener: Sendable, Hashable {
    /// Bind a socket at this path (directory 0700, socket 0600), replacing a stale file, refusing a live one.
    case bind(path: String)
    /// Serve a listening socket handed over by systemd (socket activation); `path` is for status only.
    case activated(fd: Int32, path: String)

    /// The socket's path.
    public var path: String {
        switch self {
        case .bind(let path), .activated(_, let path): path
        }
    }
}
