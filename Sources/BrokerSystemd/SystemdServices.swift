public import BrokerTime
public import Logging
public import ServiceLifecycle
import UnixSignals

/// Pings systemd's watchdog at half of `WatchdogSec=` and keeps `STATUS=` current.
///
/// First in the service group, which stops its services one after the other from the last: the pings go on while the
/// server drains.
public struct WatchdogService: Service {
    let interval: Duration?
    let statusLine: @Sendable () -> String
    let clock: any BrokerClock

    /// Pings every `interval / 2` (none without an interval), and sends `statusLine()` whenever it changed.
    public init(
        interval: Duration?,
        clock: any BrokerClock = .system,
        statusLine: @escaping @Sendable () -> String
    ) {
        self.interval = interval
        self.clock = clock
        self.statusLine = statusLine
    }

    public func run() async throws {
        let period = interval.map { $0 / 2 } ?? .seconds(10)
        try? await cancelWhenGracefulShutdown {
            var lastStatus = ""
            while true {
                try await clock.sleep(for: period)
                var assignments: [String: String] = [:]
                if interval != nil { assignments["WATCHDOG"] = "1" }
                let status = statusLine()
                if status != lastStatus {
                    assignments["STATUS"] = status
                    lastStatus = status
                }
                if !assignments.isEmpty { Systemd.notify(assignments) }
            }
        }
    }
}

/// Tells systemd at once that the daemon is stopping.
///
/// Last in the group, so it hears of the shutdown first.
public struct StoppingService: Service {
    /// The service.
    public init() {}

    public func run() async throws {
        try? await gracefulShutdown()
        Systemd.notify(["STOPPING": "1", "STATUS": "Stopping: finishing the requests in flight"])
    }
}

/// SIGHUP (`systemctl --user reload`): re-reads the configuration file and forgets cached provider metadata,
/// between `RELOADING=1` and `READY=1`.
public struct ReloadService: Service {
    let reload: @Sendable () async -> String

    /// Runs `reload` on each SIGHUP; what it returns is the new `STATUS=`.
    public init(reload: @escaping @Sendable () async -> String) {
        self.reload = reload
    }

    public func run() async throws {
        for await _ in await UnixSignalsSequence(trapping: .sighup).cancelOnGracefulShutdown() {
            Systemd.notify(["RELOADING": "1", "MONOTONIC_USEC": "\(Systemd.monotonicMicroseconds)"])
            let outcome = await reload()
            Systemd.notify(["READY": "1", "STATUS": outcome])
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
