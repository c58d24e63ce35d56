public import BrokerCore
public import BrokerProtocol
import BrokerTime
import Foundation
public import Logging
import NIOCore
public import NIOPosix
public import ServiceLifecycle
import Synchronization

/// The broker's Unix-socket server, run as a service: binds (or adopts) the socket, accepts connections,
/// and serves each in its own task until graceful shutdown drains them.
///
/// Shape of SwiftNIO's `NIOTCPEchoServer`: an async bind, a discarding task group, one child task per
/// connection, and each connection catches its own errors, so one bad client never takes the server down.
public final class SocketServer: Service {
    private let configuration: ServerConfiguration
    private let broker: TokenBroker
    private let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    private let metrics: ServerMetrics
    private let onListening: @Sendable (SocketServer) -> Void
    private let details: StatusDetails
    private let additionalHandlers: MethodHandlers
    private let unclaimed = UnclaimedConnections()

    /// What `getStatus` reports about the daemon beyond the server's own counters.
    public struct StatusDetails: Sendable {
        /// The state directory.
        public var stateDirectory: String
        /// The Broker1 front end's status, when the daemon has one.
        public var bus: @Sendable () -> StatusResult.BusStatus?

        /// Creates the details.
        public init(stateDirectory: String, bus: @escaping @Sendable () -> StatusResult.BusStatus? = { nil }) {
            self.stateDirectory = stateDirectory
            self.bus = bus
        }
    }

    /// Creates a server; `onListening` runs once the socket accepts connections (the moment to tell systemd).
    ///
    /// `additionalHandlers` serve methods of other parts of the daemon (the managed-identity endpoint's grants).
    public init(
        configuration: ServerConfiguration,
        broker: TokenBroker,
        additionalHandlers: MethodHandlers = MethodHandlers(),
        details: StatusDetails,
        logger: Logger,
        group: MultiThreadedEventLoopGroup = .singleton,
        onListening: @escaping @Sendable (SocketServer) -> Void = { _ in }
    ) {
        self.configuration = configuration
        self.broker = broker
        self.metrics = ServerMetrics(clock: broker.clock)
        self.details = details
        self.additionalHandlers = additionalHandlers
        self.logger = logger
        self.group = group
        self.onListening = onListening
    }

    /// Serves until graceful shutdown, then stops accepting, lets in-flight requests finish, and returns.
    ///
    /// Throws when the socket cannot be bound (another broker is live on it, or the path is unusable).
    public func run() async throws {
        let dispatcher = Dispatcher(
            broker: broker,
            additionalHandlers: additionalHandlers,
            metrics: metrics,
            logger: logger
        ) { [self] in status() }
        let connections = ConnectionSettings(configuration: configuration, dispatcher: dispatcher, logger: logger)
        let listener = try await bind(dispatcher: dispatcher)
        logger.info("listening", metadata: ["socket": "\(configuration.listener.path)"])
        onListening(self)
        try await withGracefulShutdownHandler {
            try await listener.executeThenClose { inbound in
                // A discarding group: finished connections must not pile up as child results.
                try await withThrowingDiscardingTaskGroup { tasks in
                    for try await accepted in inbound {
                        tasks.addTask {
                            await self.serve(accepted, settings: connections)
                        }
                    }
                }
            }
        } onGracefulShutdown: {
            self.logger.info("shutting down: no new connections, finishing requests in flight")
            listener.channel.close(promise: nil)
        }
        // Connections accepted while the listener closed may never have reached the loop above (apple/swift-nio
        // #2813): answer and close them here rather than leave them open. One whose initializer finished after the
        // listener closed was never registered with its event loop: a write to it would wait forever, so it is
        // only closed (its peer sees the end of the stream, as if the broker had stopped a moment earlier).
        for leftover in unclaimed.takeAll() {
            let channel = leftover.channel.channel
            if channel.isActive {
                await Connection(accepted: leftover, settings: connections, metrics: metrics)
                    .refuse(ErrorObject(.brokerStopping, "the broker is stopping; retry on a new connection"))
            } else {
                try? await channel.close()
            }
            metrics.openConnections.subtract(1, ordering: .relaxed)
            metrics.closed(peer: leftover.caller.pid)
        }
        logger.info("stopped")
    }

    private func serve(_ accepted: AcceptedConnection, settings: ConnectionSettings) async {
        guard unclaimed.claim(accepted) else { return }
        metrics.touch()
        defer {
            metrics.openConnections.subtract(1, ordering: .relaxed)
            metrics.closed(peer: accepted.caller.pid)
            metrics.touch()
        }
        let connection = Connection(accepted: accepted, settings: settings, metrics: metrics)
        if let refusal = accepted.refusal {
            await connection.refuse(refusal)
        } else {
            await connection.run()
        }
    }

    /// Decides, before anything is read, whether a peer is served: same uid as the daemon, and a free slot.
    private func admit(_ peer: PeerCredentials) -> ErrorObject? {
        metrics.acceptedConnections.add(1, ordering: .relaxed)
        let open = metrics.openConnections.add(1, ordering: .relaxed).newValue
        let ofThisPeer = metrics.opened(peer: peer.pid)
        guard peer.uid == getuid() else {
            metrics.refusedConnections.add(1, ordering: .relaxed)
            logger.warning(
                "connection refused: peer runs as another user",
                metadata: ["peer_uid": "\(peer.uid)", "peer_pid": "\(peer.pid)"]
            )
            return ErrorObject(.permissionDenied, "this broker serves only its own user")
        }
        guard open <= configuration.maximumConnections else {
            metrics.refusedConnections.add(1, ordering: .relaxed)
            logger.warning("connection refused: too many connections", metadata: ["peer_pid": "\(peer.pid)"])
            return ErrorObject(
                .brokerBusy,
                "the broker serves at most \(configuration.maximumConnections) connections at once; retry shortly",
                details: .init(retryAfterSeconds: 1)
            )
        }
        guard ofThisPeer <= configuration.maximumConnectionsPerPeer else {
            metrics.refusedConnections.add(1, ordering: .relaxed)
            logger.warning(
                "connection refused: one process holds too many connections",
                metadata: ["peer_pid": "\(peer.pid)", "connections": "\(ofThisPeer - 1)"]
            )
            return ErrorObject(
                .brokerBusy,
                "one process may hold at most \(configuration.maximumConnectionsPerPeer) connections; close some",
                details: .init(retryAfterSeconds: 1)
            )
        }
        return nil
    }

    /// How long no connection has been open; nil while one is.
    public var idleFor: Duration? {
        guard metrics.openConnections.load(ordering: .relaxed) == 0 else { return nil }
        return metrics.sinceLastActivity
    }

    /// One line for people (systemd's `STATUS=`): where it serves, connections, requests, accounts.
    public var statusLine: String {
        let status = status()
        let how = status.activation == "systemd" ? "socket-activated" : "bound by the daemon"
        return "Serving \(status.socketPath) (\(how)): \(status.connections.open) connections open, "
            + "\(status.requests.succeeded) requests answered, \(status.requests.failed) failed; "
            + "\(status.cache.accounts) accounts, \(status.cache.refreshTokens) refresh tokens"
    }

    /// What `getStatus` answers now.
    public func status() -> StatusResult {
        let started = metrics.startedAt
        let activation =
            switch configuration.listener {
            case .bind: "bound"
            case .activated: "systemd"
            }
        return StatusResult(
            version: TokenBroker.version,
            protocolVersion: WireProtocol.version,
            pid: getpid(),
            startedAt: Int64(started.timeIntervalSince1970 * 1000),
            uptimeSeconds: Int64(metrics.clock.now.timeIntervalSince(started)),
            socketPath: configuration.listener.path,
            activation: activation,
            stateDirectory: details.stateDirectory,
            cache: broker.cacheCounts,
            connections: .init(
                open: metrics.openConnections.load(ordering: .relaxed),
                accepted: metrics.acceptedConnections.load(ordering: .relaxed),
                refused: metrics.refusedConnections.load(ordering: .relaxed)
            ),
            requests: .init(
                succeeded: metrics.succeeded.load(ordering: .relaxed),
                failed: metrics.failed.load(ordering: .relaxed),
                inFlight: metrics.inFlight.load(ordering: .relaxed)
            ),
            recentErrors: metrics.recentErrors,
            store: broker.storeHealth,
            bus: details.bus(),
            keyStore: broker.keyStatus
        )
    }

    // MARK: Binding

    private func bind(dispatcher: Dispatcher) async throws -> NIOAsyncChannel<AcceptedConnection, Never> {
        let limits = FrameLimits(
            maximumFrameBytes: configuration.maximumFrameBytes,
            idleTimeout: TimeAmount(configuration.idleTimeout),
            frameDeadline: TimeAmount(configuration.frameDeadline),
            outputBudget: configuration.outputBudget
        )
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            // A client may send its request and shut down its write side (socat, nc -N); it still gets the answer.
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            // Above 256 KiB of unsent answers the channel turns unwritable and the framer stops reading requests
            // (FrameHandler): a peer that does not read cannot make the broker queue answers without bound.
            .childChannelOption(.writeBufferWaterMark, value: .init(low: 64 << 10, high: 256 << 10))
        // Runs on the connection's event loop as it is accepted: peer check first, then the pipeline.
        let initializer: @Sendable (any Channel) -> EventLoopFuture<AcceptedConnection> = { [self] channel in
            PeerCredentials.of(channel).flatMap { peer in
                // A refused peer is named by its credentials alone: nothing more is read about it.
                guard let refusal = self.admit(peer) else {
                    return PeerProcess.of(channel, credentials: peer).map { (peer, nil, $0) }
                }
                let process = PeerProcess(pid: peer.pid, executable: nil, processID: nil)
                return channel.eventLoop.makeSucceededFuture((peer, refusal, process))
            }.flatMapThrowing { (peer: PeerCredentials, refusal: ErrorObject?, process: PeerProcess) in
                let caller = Caller(
                    pid: process.pid,
                    uid: peer.uid,
                    gid: peer.gid,
                    executable: process.executable,
                    processID: process.processID
                )
                if refusal == nil {
                    try channel.pipeline.syncOperations.addHandlers(
                        FrameHandler(limits: limits),
                        RequestHandler(dispatcher: dispatcher, caller: caller)
                    )
                } else {
                    // A refused peer gets one error line; whatever it sends is never read as a request.
                    try channel.pipeline.syncOperations.addHandler(DiscardInbound())
                }
                let async = try NIOAsyncChannel<ConnectionEvent, Never>(wrappingChannelSynchronously: channel)
                let accepted = AcceptedConnection(caller: caller, refusal: refusal, channel: async)
                self.unclaimed.insert(accepted)
                return accepted
            }
        }
        switch configuration.listener {
        case .activated(let fd, _):
            return try await withReserve(bootstrap, listening: fd).bind(
                fd,
                cleanupExistingSocketFile: false,
                childChannelInitializer: initializer
            )
        case .bind(let path):
            let prepared = try SocketPath.prepare(path)
            let (fd, inode) = try prepared.listen(backlog: 256)
            let channel: NIOAsyncChannel<AcceptedConnection, Never>
            do {
                channel = try await withReserve(bootstrap, listening: fd).bind(
                    fd,
                    cleanupExistingSocketFile: false,
                    childChannelInitializer: initializer
                )
            } catch {
                prepared.remove(inode: inode)
                throw error
            }
            channel.channel.closeFuture.whenComplete { _ in prepared.remove(inode: inode) }
            return channel
        }
    }
}

extension SocketServer {
    /// `bootstrap` with a ``DescriptorReserve`` first in the listening channel's pipeline.
    private func withReserve(_ bootstrap: ServerBootstrap, listening fd: Int32) -> ServerBootstrap {
        let metrics = metrics
        let logger = logger
        let clock = broker.clock
        return bootstrap.serverChannelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                let reserve = DescriptorReserve(listeningSocket: fd, logger: logger, clock: clock) { count in
                    metrics.acceptedConnections.add(count, ordering: .relaxed)
                    metrics.refusedConnections.add(count, ordering: .relaxed)
                }
                try channel.pipeline.syncOperations.addHandler(reserve)
            }
        }
    }
}

/// An accepted connection: its peer, whether it is refused, and its channel.
struct AcceptedConnection: Sendable {
    let caller: Caller
    let refusal: ErrorObject?
    let channel: NIOAsyncChannel<ConnectionEvent, Never>

    var id: ObjectIdentifier {
        ObjectIdentifier(channel.channel)
    }
}

/// Accepted connections no task has taken yet.
///
/// Holding them keeps their async writers alive until someone closes them: the connection's task, or the server when it
/// stops.
final class UnclaimedConnections: Sendable {
    private let connections = Mutex<[ObjectIdentifier: AcceptedConnection]>([:])

    func insert(_ connection: AcceptedConnection) {
        connections.withLock { $0[connection.id] = connection }
    }

    /// Takes a connection for serving; false when the server already took it to close it.
    func claim(_ connection: AcceptedConnection) -> Bool {
        connections.withLock { $0.removeValue(forKey: connection.id) != nil }
    }

    func takeAll() -> [AcceptedConnection] {
        connections.withLock { connections in
            defer { connections.removeAll() }
            return Array(connections.values)
        }
    }
}

/// Drops every byte a refused peer sends, so nothing it writes reaches the connection's reader.
final class DiscardInbound: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
}

extension TimeAmount {
    /// The same span, in nanoseconds.
    init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
