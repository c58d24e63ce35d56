public import BrokerTime
public import Logging
public import ServiceLifecycle
import Synchronization
import UnixSignals

/// The daemon's one voice to the service manager.
///
/// The services that speak run concurrently, and the one that hears of a shutdown first is not the one that pings:
/// once `STOPPING=1` is said, nothing after it says the daemon is ready or serving (a status computed a moment
/// before, sent a moment after, would).
public final class ServiceManagerNotifier: Sendable {
    private let state = Mutex<(stopping: Bool, lastStatus: String)>((false, ""))

    /// A notifier that has said nothing yet.
    public init() {}

    /// Sends `assignments` (`READY=1`, `RELOADING=1`, `STATUS=…`), or nothing once stopping has been said.
    public func send(_ assignments: [String: String]) {
        state.withLock { state in
            guard !state.stopping else { return }
            if let status = assignments["STATUS"] { state.lastStatus = status }
            Systemd.notify(assignments)
        }
    }

    /// `WATCHDOG=1` if `ping`, with `STATUS=` when `status()` changed; once stopping, the ping alone.
    func tick(ping: Bool, status: () -> String) {
        state.withLock { state in
            var assignments: [String: String] = [:]
            if ping { assignments["WATCHDOG"] = "1" }
            if !state.stopping {
                let now = status()
                if now != state.lastStatus {
                    assignments["STATUS"] = now
                    state.lastStatus = now
                }
            }
            if !assignments.isEmpty { Systemd.notify(assignments) }
        }
    }

    /// `STOPPING=1`, once; from then on only watchdog pings go.
    func stopping() {
        state.withLock { state in
            guard !state.stopping else { return }
            state.stopping = true
            Systemd.notify(["STOPPING": "1", "STATUS": "Stopping: finishing the requests in flight"])
        }
    }
}

/// Pings systemd's watchdog at half of `WatchdogSec=` and keeps `STATUS=` current.
///
/// First in the service group, which stops its services one after the other from the last: the pings go on while the
/// server drains.
public struct WatchdogService: Service {
    let interval: Duration?
    let notifier: ServiceManagerNotifier
    let statusLine: @Sendable () -> String
    let clock: any BrokerClock

    /// Pings every `interval / 2` (none without an interval), and sends `statusLine()` whenever it changed, through
    /// `notifier`.
    public init(
        interval: Duration?,
        notifier: ServiceManagerNotifier,
        clock: any BrokerClock = .system,
        statusLine: @escaping @Sendable () -> String
    ) {
        self.interval = interval
        self.notifier = notifier
        self.clock = clock
        self.statusLine = statusLine
    }

    public func run() async throws {
        let period = interval.map { $0 / 2 } ?? .seconds(10)
        try? await cancelWhenGracefulShutdown {
            while true {
                try await clock.sleep(for: period)
                notifier.tick(ping: interval != nil, status: statusLine)
            }
        }
    }
}

/// Tells systemd at once that the daemon is stopping.
///
/// Last in the group, so it hears of the shutdown first.
public struct StoppingService: Service {
    let notifier: ServiceManagerNotifier

    /// The service, which says `STOPPING=1` through `notifier`.
    public init(notifier: ServiceManagerNotifier) {
        self.notifier = notifier
    }

    public func run() async throws {
        try? await gracefulShutdown()
        notifier.stopping()
    }
}

/// SIGHUP (`systemctl --user reload`): re-reads the configuration file and forgets cached provider metadata,
/// between `RELOADING=1` and `READY=1`.
public struct ReloadService: Service {
    let notifier: ServiceManagerNotifier
    let reload: @Sendable () async -> String

    /// Runs `reload` on each SIGHUP; what it returns is the new `STATUS=`, said through `notifier`.
    public init(notifier: ServiceManagerNotifier, reload: @escaping @Sendable () async -> String) {
        self.notifier = notifier
        self.reload = reload
    }

    public func run() async throws {
        for await _ in await UnixSignalsSequence(trapping: .sighup).cancelOnGracefulShutdown() {
            notifier.send(["RELOADING": "1", "MONOTONIC_USEC": "\(Systemd.monotonicMicroseconds)"])
            let outcome = await reload()
            notifier.send(["READY": "1", "STATUS": outcome])
        }
    }
}

/// `--idle-exit`: when socket-activated, exits (status 0) after this long with no connection and nothing under
/// way; systemd keeps the socket and starts the daemon again on the next connection.
public struct IdleExitService: Service {
    let after: Duration
    let idleFor: @Sendable () -> Duration?
    let isBusy: @Sendable () -> Bool
    let holdsOn: @Sendable () -> String?
    let logger: Logger
    let pollInterval: Duration
    let clock: any BrokerClock

    /// Ends (successfully) once `idleFor()` (nil while a connection is open) reaches `after` and `isBusy()` is
    /// false, looking every `pollInterval`; while `holdsOn()` gives a reason (something that nothing would start
    /// again, such as a grant's endpoint), it stays, and says so once each time it is idle.
    public init(
        after: Duration,
        idleFor: @escaping @Sendable () -> Duration?,
        isBusy: @escaping @Sendable () -> Bool,
        holdsOn: @escaping @Sendable () -> String? = { nil },
        logger: Logger,
        pollInterval: Duration = .milliseconds(250),
        clock: any BrokerClock = .system
    ) {
        self.clock = clock
        self.after = after
        self.idleFor = idleFor
        self.isBusy = isBusy
        self.holdsOn = holdsOn
        self.logger = logger
        self.pollInterval = pollInterval
    }

    public func run() async throws {
        var saidWhy = false
        while !Task.isShuttingDownGracefully {
            try? await clock.sleep(for: pollInterval)
            guard let idle = idleFor(), idle >= after, !isBusy() else {
                saidWhy = false
                continue
            }
            if let reason = holdsOn() {
                if !saidWhy { logger.info("idle, but staying: \(reason)") }
                saidWhy = true
                continue
            }
            logger.info(
                "idle: exiting until the next connection",
                metadata: ["idle_seconds": "\(idle.components.seconds)"]
            )
            return
        }
    }
}
