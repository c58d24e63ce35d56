public import BrokerCore
import BrokerProtocol
import BrokerTime
import Foundation
public import Logging
import NIOCore
import NIOHTTP1
public import NIOPosix
public import ServiceLifecycle
import Synchronization

/// The managed-identity endpoint: the HTTP form Azure SDKs and MSAL ask for a token when `IDENTITY_ENDPOINT` and
/// `IDENTITY_HEADER` are set (App Service, `api-version=2019-08-01`), served per grant from the broker's cache.
///
/// It listens only where a grant says (loopback by default, a container bridge's address when asked), one
/// listener per address, open while a grant there lasts. Each request is one connection (`Connection: close`),
/// which must send its request within ``requestTimeout``; at most ``maximumConnections`` are open per listener.
/// A request names its grant by the secret in `X-IDENTITY-HEADER` alone, and gets only what the grant covers,
/// through the broker's silent path: never a refresh token, never a sign-in.
public final class IdentityEndpoint: Service, Sendable {
    let broker: TokenBroker
    let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    private let listeners = Mutex<[ListenAddress: Listener]>([:])

    /// Connections open at once on one listener; more are answered 503 and closed.
    public static let maximumConnections = 64
    /// The longest a connection may take to send its request.
    static let requestTimeout: TimeAmount = .seconds(10)
    /// How often listeners whose grants all expired are closed.
    static let sweepInterval: Duration = .seconds(60)

    private enum Listener {
        case open(any Channel, ConnectionCount)
        case failed(String)
    }

    /// Creates the endpoint; it opens the stored grants' listeners when it runs.
    public init(broker: TokenBroker, logger: Logger, group: MultiThreadedEventLoopGroup = .singleton) {
        self.broker = broker
        self.logger = logger
        self.group = group
    }

    /// Opens a listener for every stored grant, serves until graceful shutdown, then closes them all.
    public func run() async throws {
        let damaged = try await broker.grants.load()
        for id in damaged {
            logger.error("a stored grant could not be opened and is left in place", metadata: ["grant_id": "\(id)"])
        }
        for address in Set(broker.grants.all.map(\.record.listen)) {
            do {
                _ = try await open(address)
            } catch {
                logger.error(
                    "a grant's endpoint cannot listen; its holders get no token until it can",
                    metadata: ["listen": "\(address)", "reason": "\(error)"]
                )
                listeners.withLock { $0[address] = .failed("\(error)") }
            }
        }
        try? await cancelWhenGracefulShutdown {
            while true {
                try await self.broker.clock.sleep(for: Self.sweepInterval)
                await self.closeUnused()
            }
        }
        let channels = listeners.withLock { listeners in
            defer { listeners.removeAll() }
            return listeners.values.compactMap { listener -> (any Channel)? in
                if case .open(let channel, _) = listener { return channel }
                return nil
            }
        }
        for channel in channels { try? await channel.close() }
    }

    /// Whether a grant is live: the daemon must not exit when idle while one is, or its holders lose the endpoint.
    public var servesGrants: Bool {
        !broker.grants.all.isEmpty
    }

    /// The handlers of `createGrant`, `listGrants` and `revokeGrant`, for the socket.
    public func handlers() -> MethodHandlers {
        var handlers = MethodHandlers()
        handlers.on(Methods.CreateGrant.self) { params, caller throws(BrokerFailure) in
            let plan = try self.broker.planGrant(params)
            let correlationId = params.correlationId ?? UUID().uuidString
            return .later { _ throws(BrokerFailure) in
                let bound: ListenAddress
                do {
                    bound = try await self.open(plan.listen)
                } catch {
                    throw BrokerFailure(
                        .invalidParams,
                        "params.listen: cannot listen on \(plan.listen): \(error)",
                        details: .init(field: "params.listen")
                    )
                }
                let made = try await self.broker.createGrant(
                    plan,
                    boundAt: bound,
                    caller: caller,
                    correlationId: correlationId
                )
                return CreateGrantResult(grant: self.listed(made.grant, served: 0), identityHeader: made.secret)
            }
        }
        handlers.on(Methods.ListGrants.self) { _, _ in
            .now(ListGrantsResult(grants: self.broker.grants.all.map { self.listed($0.record, served: $0.served) }))
        }
        handlers.on(Methods.RevokeGrant.self) { params, caller in
            .later { _ throws(BrokerFailure) in
                let grant = try await self.broker.revokeGrant(params, caller: caller)
                await self.closeUnused()
                return RevokeGrantResult(grant: self.listed(grant, served: 0))
            }
        }
        return handlers
    }

    private func listed(_ grant: GrantRecord, served: Int) -> EndpointGrant {
        let problem = listeners.withLock { listeners -> String?? in
            switch listeners[grant.listen] {
            case .open: .some(nil)
            case .failed(let reason): .some(reason)
            case nil: nil
            }
        }
        return grant.listed(
            listening: problem == .some(nil),
            problem: problem ?? "not listening",
            tokensServed: served
        )
    }

    /// The address a grant for `requested` is served at: a listener already open there (for port 0, any on that
    /// host), else a new one.
    func open(_ requested: ListenAddress) async throws -> ListenAddress {
        let existing = listeners.withLock { listeners in
            listeners.first { address, listener in
                guard case .open = listener else { return false }
                return address == requested || (requested.port == 0 && address.host == requested.host)
            }?.key
        }
        if let existing { return existing }
        let count = ConnectionCount()
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 128)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try self.accept(channel, count: count)
                }
            }
            .bind(host: requested.host, port: requested.port)
            .get()
        guard let port = channel.localAddress?.port else {
            try? await channel.close()
            throw EndpointError("the listener has no port")
        }
        let bound = requested.with(port: port)
        listeners.withLock { $0[bound] = .open(channel, count) }
        logger.info("managed-identity endpoint listening", metadata: ["listen": "\(bound)"])
        return bound
    }

    /// Closes listeners that no live grant uses any more.
    func closeUnused() async {
        let used = Set(broker.grants.all.map(\.record.listen))
        let unused = listeners.withLock { listeners -> [(ListenAddress, (any Channel)?)] in
            let addresses = listeners.keys.filter { !used.contains($0) }
            return addresses.map { address in
                defer { listeners.removeValue(forKey: address) }
                if case .open(let channel, _) = listeners[address] { return (address, channel) }
                return (address, nil)
            }
        }
        for (address, channel) in unused {
            guard let channel else { continue }
            logger.info("managed-identity endpoint closed: no grant uses it", metadata: ["listen": "\(address)"])
            try? await channel.close()
        }
    }

    private func accept(_ channel: any Channel, count: ConnectionCount) throws {
        let admitted = count.admit()
        channel.closeFuture.whenComplete { _ in if admitted { count.leave() } }
        try channel.pipeline.syncOperations.configureHTTPServerPipeline(
            withPipeliningAssistance: false,
            withErrorHandling: true
        )
        // However slowly a request comes, the connection is closed when the timeout passes before it is complete
        // (the answer may then take as long as the identity provider does, within the broker's own timeouts).
        let deadline = channel.eventLoop.scheduleTask(in: Self.requestTimeout) { channel.close(promise: nil) }
        channel.closeFuture.whenComplete { _ in deadline.cancel() }
        try channel.pipeline.syncOperations.addHandler(
            TokenRequestHandler(endpoint: self, admitted: admitted, deadline: deadline)
        )
    }
}

/// Connections open on one listener.
final class ConnectionCount: Sendable {
    private let open = Atomic<Int>(0)

    /// Counts a new connection; false (and not counted) when the listener is full.
    func admit() -> Bool {
        let now = open.wrappingAdd(1, ordering: .relaxed).newValue
        guard now <= IdentityEndpoint.maximumConnections else {
            open.wrappingSubtract(1, ordering: .relaxed)
            return false
        }
        return true
    }

    func leave() {
        open.wrappingSubtract(1, ordering: .relaxed)
    }
}

/// A listener that could not be opened.
struct EndpointError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}
