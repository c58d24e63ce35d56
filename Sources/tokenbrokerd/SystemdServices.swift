import BrokerCore
import BrokerServer
import BrokerSystemd
import Logging
import ServiceLifecycle
import UnixSignals

/// Pings systemd's watchdog at half of `WatchdogSec=` and keeps `STATUS=` current.
///
/// First in the service group, which stops its services one after the other from the last: the pings go on while the
/// server drains.
struct WatchdogService: Service {
    let interval: Duration?
    let server: SocketServer

    func run() async throws {
        let period = interval.map { $0 / 2 } ?? .seconds(10)
        try? await cancelWhenGracefulShutdown {
            var lastStatus = ""
            while true {
                try await Task.sleep(for: period)
                var assignments: [String: String] = [:]
                if interval != nil { assignments["WATCHDOG"] = "1" }
                let status = server.statusLine
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
struct StoppingService: Service {
    func run() async throws {
        try? await gracefulShutdown()
        Systemd.notify(["STOPPING": "1", "STATUS": "Stopping: finishing the requests in flight"])
    }
}

/// SIGHUP (`systemctl --user reload`): re-reads the configuration file and forgets cached provider metadata,
/// between `RELOADING=1` and `READY=1`.
struct ReloadService: Service {
    let reload: @Sendable () async -> String

    func run() async throws {
        for await _ in await UnixSignalsSequence(trapping: .sighup).cancelOnGracefulShutdown() {
            Systemd.notify(["RELOADING": "1", "MONOTONIC_USEC": "\(Systemd.monotonicMicroseconds)"])
            let outcome = await reload()
            Systemd.notify(["READY": "1", "STATUS": outcome])
        }
    }
}

/// `--idle-exit`: when socket-activated, exits (status 0) after this long with no connection and nothing under
/// way; systemd keeps the socket and starts the daemon again on the next connection.
struct IdleExitService: Service {
    let after: Duration
    let server: SocketServer
    let broker: TokenBroker
    let logger: Logger

    func run() async throws {
        while !Task.isShuttingDownGracefully {
            try? await Task.sleep(for: .milliseconds(250))
            guard let idle = server.idleFor, idle >= after, await !broker.isBusy else { continue }
            logger.info(
                "idle: exiting until the next connection",
                metadata: ["idle_seconds": "\(idle.components.seconds)"]
            )
            return
        }
    }
}
