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
/// and serves them until graceful shutdown drains them.
///
/// A connection is served on its event loop (``RequestHandler``) until something needs more: a request that waits on
/// the identity provider or the disk, a large frame, a condition that ends the connection. Only then does it get an
/// async side and a child task of a discarding group, in the shape of SwiftNIO's `NIOTCPEchoServer`, which catches
/// its own errors, so one bad client never takes the server down. A process per token (`tokenbroker token`, git,
/// kubectl) asks one cached token and closes: the task and the async channel were most of what such a connection
/// cost the daemon (BENCHMARKS.md).
public final class SocketServer: Service {
    private let configuration: ServerConfiguration
    private let broker: TokenBroker
    private let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    private let metrics: ServerMetrics
    private let onListening: @Sendable (SocketServer) -> Void
    private let details: StatusDetails
    private let additionalHandlers: MethodHandlers
    private let connections = OpenConnections()
    /// The daemon's own uid, read once: it never changes it, and a peer is admitted only as the same user.
    private static let ownUID = getuid()

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
        let settings = ConnectionSettings(configuration: configuration, dispatcher: dispatcher, logger: logger)
        let listener = try await bind(dispatcher: dispatcher)
        listener.closeFuture.whenComplete { [connections] _ in connections.listenerClosed() }
        logger.info("listening", metadata: ["socket": "\(configuration.listener.path)"])
        onListening(self)
        await withGracefulShutdownHandler {
            // A discarding group: finished connections must not pile up as child results. The connections that need
            // a task arrive until the listener and every connection have closed.
            await withDiscardingTaskGroup { tasks in
                for await accepted in connections.started {
                    tasks.addTask {
                        await self.serve(accepted, settings: settings)
                    }
                }
            }
        } onGracefulShutdown: { [connections, logger] in
            logger.info("shutting down: no new connections, finishing requests in flight")
            listener.close(promise: nil)
            // Read no more requests: a connection without a task closes at once (nothing of it is in flight); one
            // with a task finishes its requests first.
            connections.closeInputs()
        }
        // Cancelled rather than shut down: the listener and the connections without a task close here.
        try? await listener.close()
        connections.closeInputs()
        // Connections that asked for a task as the server stopped (cancelled, or apple/swift-nio #2813, a connection
        // accepted while the listener closed): answer and close them here rather than leave them open. One whose
        // initializer finished after the listener closed was never registered with its event loop: a write to it
        // would wait forever, so it is only closed (its peer sees the end of the stream, as if the broker had
        // stopped a moment earlier).
        for leftover in connections.takeUnclaimed() {
            let channel = leftover.channel.channel
            if channel.isActive {
                await Connection(accepted: leftover, settings: settings, metrics: metrics)
                    .refuse(ErrorObject(.brokerStopping, "the broker is stopping; retry on a new connection"))
            } else {
                try? await channel.close()
            }
            metrics.closed(peer: leftover.caller.pid)
        }
        logger.info("stopped")
    }

    private func serve(_ accepted: AcceptedConnection, settings: ConnectionSettings) async {
        guard connections.claim(accepted) else { return }
        // A connection with a task counts as closed once the task is done with it.
        defer { metrics.closed(peer: accepted.caller.pid) }
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
        guard peer.uid == Self.ownUID else {
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

    private func bind(dispatcher: Dispatcher) async throws -> any Channel {
        let limits = FrameLimits(
            maximumFrameBytes: configuration.maximumFrameBytes,
            idleTimeout: TimeAmount(configuration.idleTimeout),
            frameDeadline: TimeAmount(configuration.frameDeadline),
            outputBudget: configuration.outputBudget
        )
        let connections = connections
        let metrics = metrics
        // Runs on the connection's event loop as it is accepted: peer check first, then the pipeline.
        let initializer: @Sendable (any Channel) -> EventLoopFuture<Void> = { [self] channel in
            PeerCredentials.of(channel).flatMapThrowing { peer in
                let refusal = self.admit(peer)
                // Counted open from here until its close, or, for one with a task, until the task has finished its
                // requests (``serve(_:settings:)``): an open count of none means none is in flight.
                channel.closeFuture.whenComplete { _ in
                    guard !connections.closed(channel) else { return }
                    metrics.closed(peer: peer.pid)
                }
                metrics.touch()
                // The options here, not the bootstrap's: it sets each through a future of its own.
                if let options = channel.syncOptions {
                    // A client may send its request and shut down its write side (socat, nc -N); it still gets the
                    // answer.
                    try options.setOption(.allowRemoteHalfClosure, value: true)
                    // Above 256 KiB of unsent answers the channel turns unwritable and the framer stops reading
                    // requests (FrameHandler): a peer that does not read cannot make the broker queue answers without
                    // bound.
                    try options.setOption(.writeBufferWaterMark, value: .init(low: 64 << 10, high: 256 << 10))
                }
                // A refused peer is named by its credentials alone: nothing more is read about it.
                let process =
                    refusal == nil
                    ? PeerProcess.of(channel, credentials: peer)
                    : PeerProcess(pid: peer.pid, executable: nil, processID: nil)
                let caller = Caller(
                    pid: process.pid,
                    uid: peer.uid,
                    gid: peer.gid,
                    executable: process.executable,
                    processID: process.processID
                )
                guard let refusal else {
                    return try channel.pipeline.syncOperations.addHandlers(
                        FrameHandler(limits: limits),
                        RequestHandler(dispatcher: dispatcher, caller: caller, connections: connections)
                    )
                }
                // A refused peer gets one error line, from a task; whatever it sends is never read as a request.
                try channel.pipeline.syncOperations.addHandler(DiscardInbound())
                let async = try NIOAsyncChannel<ConnectionEvent, Never>(wrappingChannelSynchronously: channel)
                connections.start(AcceptedConnection(caller: caller, refusal: refusal, channel: async))
            }
        }
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .childChannelInitializer(initializer)
        switch configuration.listener {
        case .activated(let fd, _):
            return try await withReserve(bootstrap, listening: fd).withBoundSocket(fd).get()
        case .bind(let path):
            let prepared = try SocketPath.prepare(path)
            let (fd, inode) = try prepared.listen(backlog: 256)
            let channel: any Channel
            do {
                channel = try await withReserve(bootstrap, listening: fd).withBoundSocket(fd).get()
            } catch {
                prepared.remove(inode: inode)
                throw error
            }
            channel.closeFuture.whenComplete { _ in prepared.remove(inode: inode) }
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

/// The connections open now, and those of them that asked for a task (``RequestHandler``) and have not got one yet.
///
/// ``started`` ends once the listener has closed and every connection with it: until then a connection may still
/// need a task. Holding the unclaimed ones keeps their async writers alive until someone closes them: the
/// connection's task, or the server when it stops.
final class OpenConnections: Sendable {
    private struct State {
        var open: [ObjectIdentifier: any Channel] = [:]
        /// The channels that asked for a task, until they close.
        var tasked: Set<ObjectIdentifier> = []
        var unclaimed: [ObjectIdentifier: AcceptedConnection] = [:]
        var listenerClosed = false
        var finished = false

        /// Whether ``OpenConnections/started`` ends now: the listener and every connection have closed.
        mutating func finishes() -> Bool {
            guard listenerClosed, open.isEmpty, !finished else { return false }
            finished = true
            return true
        }
    }

    private let state = Mutex(State())
    /// The connections that asked for a task, as they ask.
    let started: AsyncStream<AcceptedConnection>
    private let continuation: AsyncStream<AcceptedConnection>.Continuation

    init() {
        (started, continuation) = AsyncStream.makeStream(of: AcceptedConnection.self)
    }

    /// Counts `channel` open, once it is active; false once the server has stopped taking connections (it must be
    /// closed).
    ///
    /// Not before: a channel whose initializer finished as the listener closed may never be registered with its event
    /// loop (apple/swift-nio #2813), and would then never close to let ``started`` end.
    func opened(_ channel: any Channel) -> Bool {
        state.withLock { state in
            guard !state.finished else { return false }
            state.open[ObjectIdentifier(channel)] = channel
            return true
        }
    }

    /// Takes a closed channel out; true when it had asked for a task (which then counts it closed when done).
    ///
    /// On the channel's event loop, after everything else it did there: a channel asks for its task only while open.
    func closed(_ channel: any Channel) -> Bool {
        let id = ObjectIdentifier(channel)
        let (tasked, finish) = state.withLock { state in
            state.open[id] = nil
            return (state.tasked.remove(id) != nil, state.finishes())
        }
        if finish { continuation.finish() }
        return tasked
    }

    func listenerClosed() {
        let finish = state.withLock { state in
            state.listenerClosed = true
            return state.finishes()
        }
        if finish { continuation.finish() }
    }

    /// Hands `connection` to the server for a task.
    func start(_ connection: AcceptedConnection) {
        state.withLock { state in
            state.tasked.insert(connection.id)
            state.unclaimed[connection.id] = connection
        }
        continuation.yield(connection)
    }

    /// Takes a connection for serving; false when the server already took it to close it.
    func claim(_ connection: AcceptedConnection) -> Bool {
        state.withLock { $0.unclaimed.removeValue(forKey: connection.id) != nil }
    }

    func takeUnclaimed() -> [AcceptedConnection] {
        state.withLock { state in
            defer { state.unclaimed.removeAll() }
            return Array(state.unclaimed.values)
        }
    }

    /// Closes the input of every open connection: no more requests are read.
    func closeInputs() {
        for channel in state.withLock({ Array($0.open.values) }) {
            channel.close(mode: .input, promise: nil)
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
