/// Params of `getStatus` (none are required).
public struct GetStatusParams: Sendable, Hashable, Codable {
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    /// Creates the params.
    public init(correlationId: String? = nil) {
        self.correlationId = correlationId
    }
}

/// Result of `getStatus`: what `tokenbroker status` shows.
public struct StatusResult: Sendable, Hashable, Codable {
    /// The broker's release version.
    public var version: String
    /// The protocol version.
    public var protocolVersion: String
    /// The daemon's process id.
    public var pid: Int32
    /// When the daemon started (ms since the Unix epoch).
    public var startedAt: Int64
    /// Seconds since start.
    public var uptimeSeconds: Int64
    /// The socket the daemon serves.
    public var socketPath: String
    /// How the socket came: `systemd` (socket activation) or `bound` (the daemon bound it itself).
    public var activation: String
    /// The state directory (database and key).
    public var stateDirectory: String
    /// What the cache holds.
    public var cache: EntryCounts
    /// Connections: open now, accepted and refused since start.
    public var connections: ConnectionCounts
    /// Requests: answered, failed and in flight.
    public var requests: RequestCounts
    /// The last errors answered (newest last), without secrets.
    public var recentErrors: [RecentError]
    /// What went wrong with the cache's storage (protocol 1.1; absent from older brokers).
    public var store: StoreHealth?
    /// The Broker1 front end on the session bus (absent from older brokers).
    public var bus: BusStatus?
    /// Where the cache key is kept, and whether the cache is locked (protocol 1.3; absent from older brokers).
    public var keyStore: KeyStoreStatus?

    /// Creates the result.
    public init(
        version: String,
        protocolVersion: String,
        pid: Int32,
        startedAt: Int64,
        uptimeSeconds: Int64,
        socketPath: String,
        activation: String,
        stateDirectory: String,
        cache: EntryCounts,
        connections: ConnectionCounts,
        requests: RequestCounts,
        recentErrors: [RecentError],
        store: StoreHealth? = nil,
        bus: BusStatus? = nil,
        keyStore: KeyStoreStatus? = nil
    ) {
        self.version = version
        self.protocolVersion = protocolVersion
        self.pid = pid
        self.startedAt = startedAt
        self.uptimeSeconds = uptimeSeconds
        self.socketPath = socketPath
        self.activation = activation
        self.stateDirectory = stateDirectory
        self.cache = cache
        self.connections = connections
        self.requests = requests
        self.recentErrors = recentErrors
        self.store = store
        self.bus = bus
        self.keyStore = keyStore
    }

    /// Whether the broker answers Microsoft's Broker1 interface on the user's session bus.
    public struct BusStatus: Sendable, Hashable, Codable {
        /// Where the front end stands.
        public enum State: String, Sendable, Hashable, Codable {
            /// Turned off (`tokenbrokerd --no-bus`).
            case off
            /// Joining the bus.
            case starting
            /// It owns the name and answers.
            case owner
            /// Another program owns the name (Microsoft's broker, himmelblau's): tokenbroker leaves it alone.
            case taken
            /// No session bus could be reached, or it was lost.
            case unavailable
        }

        /// Where the front end stands.
        public var state: State
        /// The well-known name (`com.microsoft.identity.broker1`).
        public var name: String
        /// For people: who owns the name instead, or why there is no bus.
        public var message: String?
        /// Broker1 calls answered since the start.
        public var calls: Int

        /// Creates the status.
        public init(state: State, name: String, message: String? = nil, calls: Int = 0) {
            self.state = state
            self.name = name
            self.message = message
            self.calls = calls
        }
    }

    /// What went wrong with the cache's storage: all zero and false on a healthy broker.
    public struct StoreHealth: Sendable, Hashable, Codable {
        /// Entries on disk that could not be opened at start (left in place, untouched).
        public var damagedEntries: Int
        /// Writes that failed since start (a full disk, a read-only file system); none of such a write was kept.
        public var failedWrites: Int
        /// The last failed write's reason.
        public var lastWriteError: String?
        /// When the last write failed (ms since the Unix epoch).
        public var lastWriteErrorAt: Int64?
        /// The database was missing beside an existing key at start: the cache started empty.
        public var databaseWasMissing: Bool

        /// Creates the counts.
        public init(
            damagedEntries: Int,
            failedWrites: Int,
            lastWriteError: String? = nil,
            lastWriteErrorAt: Int64? = nil,
            databaseWasMissing: Bool
        ) {
            self.damagedEntries = damagedEntries
            self.failedWrites = failedWrites
            self.lastWriteError = lastWriteError
            self.lastWriteErrorAt = lastWriteErrorAt
            self.databaseWasMissing = databaseWasMissing
        }

        /// Whether anything is wrong.
        public var isHealthy: Bool {
            damagedEntries == 0 && failedWrites == 0 && !databaseWasMissing
        }
    }

    /// Connection counters.
    public struct ConnectionCounts: Sendable, Hashable, Codable {
        /// Open now.
        public var open: Int
        /// Accepted since start.
        public var accepted: Int
        /// Refused since start (another uid, or over the limit).
        public var refused: Int

        /// Creates the counters.
        public init(open: Int, accepted: Int, refused: Int) {
            self.open = open
            self.accepted = accepted
            self.refused = refused
        }
    }

    /// Request counters.
    public struct RequestCounts: Sendable, Hashable, Codable {
        /// Answered with a result since start.
        public var succeeded: Int
        /// Answered with an error since start.
        public var failed: Int
        /// Running now.
        public var inFlight: Int

        /// Creates the counters.
        public init(succeeded: Int, failed: Int, inFlight: Int) {
            self.succeeded = succeeded
            self.failed = failed
            self.inFlight = inFlight
        }
    }

    /// One recent error.
    public struct RecentError: Sendable, Hashable, Codable {
        /// When (ms since the Unix epoch).
        public var at: Int64
        /// The method that failed, or empty for a framing error.
        public var method: String
        /// The error's code.
        public var errorCode: ErrorCode
        /// The error's message.
        public var message: String
        /// The request's correlation id, if it had one.
        public var correlationId: String?

        /// Creates the entry.
        public init(at: Int64, method: String, errorCode: ErrorCode, message: String, correlationId: String?) {
            self.at = at
            self.method = method
            self.errorCode = errorCode
            self.message = message
            self.correlationId = correlationId
        }
    }
}
