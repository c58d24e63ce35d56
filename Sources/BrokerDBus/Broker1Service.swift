public import BrokerCore
public import BrokerProtocol
public import Logging
public import ServiceLifecycle

/// The Broker1 front end as a service of the daemon: joins the session bus at start, and leaves it (name first)
/// at graceful shutdown.
public final class Broker1Service: Service, Sendable {
    /// The owner of the sign-ins started over the bus: a connection id no socket connection gets.
    public static let flowOwnerConnection = UInt64.max

    private let loop: BusLoop?
    private let broker: TokenBroker
    private let offReason: String

    /// A front end over `broker`'s method table; `enabled` false only reports itself off, saying `why`.
    public init(broker: TokenBroker, enabled: Bool, why: String = "turned off (--no-bus)", logger: Logger) {
        self.broker = broker
        offReason = why
        guard enabled else {
            loop = nil
            return
        }
        let translator = Broker1Translator(
            handlers: broker.handlers(status: nil),
            owner: FlowOwner(connection: Self.flowOwnerConnection) { _ in },
            releaseVersion: TokenBroker.version
        )
        loop = BusLoop(translator: translator, logger: logger, clock: broker.clock)
    }

    public func run() async throws {
        guard let loop else {
            try? await gracefulShutdown()
            return
        }
        loop.start()
        try? await gracefulShutdown()
        broker.cancelFlows(ownedBy: Self.flowOwnerConnection, because: .brokerStopping)
        await loop.stop()
    }

    /// What `getStatus` and `tokenbroker status` show.
    public var status: StatusResult.BusStatus {
        loop?.status ?? StatusResult.BusStatus(state: .off, name: Broker1.busName, message: offReason)
    }

    /// How long no bus call has been under way; nil while one is (the front end turned off is never busy).
    public var idleFor: Duration? {
        guard let loop else { return .seconds(Int64.max) }
        return loop.idleFor
    }
}
