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
    /// Addresses a grant being created is about to use: not closed as unused meanwhile.
    private let pending = Mutex<[ListenAddress: Int]>([:])
    /// Requests refused for a secret that names no grant, and when that was last logged (a flood is logged once a
    /// minute, with its count).
    let refusals = Mutex<(count: Int, lastLogged: Duration?)>((0, nil))

    /// Connections open at once on one listener; more are closed at once.
    public static let maximumConnections = 128
    /// Connections open at once from one peer address: one peer cannot take a listener's every slot.
    public static let maximumConnectionsPerPeer = 64
    /// The longest a connection may take to send its request.
    static let requestTimeout: TimeAmount = .seconds(10)
    /// How often listeners whose grants all expired are closed, and listeners that could not open are tried again.
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
    ///
    /// A listener that cannot open (the bridge is not up yet, the port is taken) is tried again at every sweep; a
    /// store that cannot be read leaves the endpoint without its stored grants, said in the log, and the rest of
    /// the broker serving.
    public func run() async throws {
        do {
            for id in try await broker.grants.load() {
                logger.error("a stored grant could not be opened and is left in place", metadata: ["grant_id": "\(id)"])
            }
        } catch {
            logger.error("the stored grants could not be read; none is served", metadata: ["reason": "\(error)"])
        }
        await openMissing()
        try? await cancelWhenGracefulShutdown {
            while true {
                try await self.broker.clock.sleep(for: Self.sweepInterval)
                try? await self.broker.grants.dropExpired()
                await self.closeUnused()
                await self.openMissing()
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

    /// Opens the listeners of live grants that have none (at start, and again at each sweep after a failure).
    private func openMissing() async {
        let missing = Set(broker.grants.all.map(\.record.listen)).filter { address in
            listeners.withLock { listeners in
                if case .open = listeners[address] { return false }
                return true
            }
        }
        for address in missing {
            do {
                _ = try await open(address)
            } catch {
                let known = listeners.withLock { listeners -> Bool in
                    defer { listeners[address] = .failed("\(error)") }
                    if case .failed = listeners[address] { return true }
                    return false
                }
                if !known {
                    logger.error(
                        "a grant's endpoint cannot listen; its holders get no token until it can (tried again every minute)",
                        metadata: ["listen": "\(address)", "reason": "\(error)"]
                    )
                }
            }
        }
    }

    /// Whether a grant is live: the daemon must not exit when idle while one is, or its holders lose the endpoint.
    public var servesGrants: Bool {
        !broker.grants.all.isEmpty
    }

    /// The handlers of `createGrant`, `listGrants` and `revokeGrant`, for the socket.
    public func handlers() -> MethodHandlers {
        var handlers = MethodHandlers()
        // Grants live in the sealed store: while the cache is locked they are neither known nor kept.
        handlers.on(
            Methods.CreateGrant.self,
            broker.whenCacheOpen { params, caller throws(BrokerFailure) in
                try self.broker.requireOpenCache()
                let plan = try self.broker.planGrant(params)
                let correlationId = params.effectiveCorrelationId
                return .later { _ throws(BrokerFailure) in
                    let bound: ListenAddress
                    do {
                        bound = try await self.open(plan.listen, reserving: true)
                    } catch {
                        throw BrokerFailure.invalidParams(
                            ParamField(CreateGrantParams.CodingKeys.listen),
                            "cannot listen on \(plan.listen): \(error)"
                        )
                    }
                    defer { self.pending.withLock { $0[bound, default: 1] -= 1 } }
                    let made = try await self.broker.createGrant(
                        plan,
                        boundAt: bound,
                        caller: caller,
                        correlationId: correlationId
                    )
                    return CreateGrantResult(grant: self.listed(made.grant, served: 0), identityHeader: made.secret)
                }
            }
        )
        handlers.on(
            Methods.ListGrants.self,
            broker.whenCacheOpen { _, _ throws(BrokerFailure) in
                try self.broker.requireOpenCache()
                return .now(
                    ListGrantsResult(grants: self.broker.grants.all.map { self.listed($0.record, served: $0.served) })
                )
            }
        )
        handlers.on(
            Methods.RevokeGrant.self,
            broker.whenCacheOpen { params, caller throws(BrokerFailure) in
                try self.broker.requireOpenCache()
                return .later { _ throws(BrokerFailure) in
                    let grant = try await self.broker.revokeGrant(params, caller: caller)
                    await self.closeUnused()
                    return RevokeGrantResult(grant: self.listed(grant, served: 0))
                }
            }
        )
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
    ///
    /// `reserving` keeps the listener from being closed as unused until the caller's grant is kept (the caller
    /// then ends the reservation).
    func open(_ requested: ListenAddress, reserving: Bool = false) async throws -> ListenAddress {
        let existing = listeners.withLock { listeners -> ListenAddress? in
            let found = listeners.first { address, listener in
                guard case .open = listener else { return false }
                return address == requested || (requested.port == 0 && address.host == requested.host)
            }?.key
            if let found, reserving { pending.withLock { $0[found, default: 0] += 1 } }
            return found
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
        listeners.withLock { listeners in
            listeners[bound] = .open(channel, count)
            if reserving { pending.withLock { $0[bound, default: 0] += 1 } }
        }
        logger.info("managed-identity endpoint listening", metadata: ["listen": "\(bound)"])
        return bound
    }

    /// Closes listeners that no live grant uses any more.
    func closeUnused() async {
        let unused = listeners.withLock { listeners -> [(ListenAddress, (any Channel)?)] in
            // Read under the listeners' lock: a grant being created is either reserved here or already kept.
            let used = Set(broker.grants.all.map(\.record.listen))
                .union(pending.withLock { $0.filter { $0.value > 0 }.keys })
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
        let peer = channel.remoteAddress?.ipAddress ?? ""
        let admitted = count.admit(peer)
        channel.closeFuture.whenComplete { _ in if admitted { count.leave(peer) } }
        // Malformed HTTP is answered by the request handler (431 or 400, then a lingering close), not by NIO's error
        // handler, whose close at once lets the kernel reset the connection and drop the answer while the client is
        // still sending.
        try channel.pipeline.syncOperations.configureHTTPServerPipeline(
            withPipeliningAssistance: false,
            withErrorHandling: false
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

/// Connections open on one listener, in all and by peer address.
final class ConnectionCount: Sendable {
    private let open = Mutex<(total: Int, byPeer: [String: Int])>((0, [:]))

    /// Counts a new connection from `peer`; false (and not counted) when the listener, or the peer's share of it,
    /// is full.
    func admit(_ peer: String) -> Bool {
        open.withLock { open in
            guard open.total < IdentityEndpoint.maximumConnections,
                open.byPeer[peer, default: 0] < IdentityEndpoint.maximumConnectionsPerPeer
            else { return false }
            open.total += 1
            open.byPeer[peer, default: 0] += 1
            return true
        }
    }

    func leave(_ peer: String) {
        open.withLock { open in
            open.total -= 1
            open.byPeer[peer, default: 1] -= 1
            if open.byPeer[peer] == 0 { open.byPeer.removeValue(forKey: peer) }
        }
    }
}

/// A listener that could not be opened.
struct EndpointError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}
