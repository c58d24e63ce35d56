public import BrokerCore
public import BrokerTime
public import ServiceLifecycle

/// Writes the audit trail's summary lines once per window, and a last time when the daemon stops.
public struct AuditFlushService: Service {
    private let audit: AuditLog
    private let interval: Duration
    private let clock: any BrokerClock

    /// Flushes `audit` every `interval`.
    public init(audit: AuditLog, interval: Duration, clock: any BrokerClock = .system) {
        self.clock = clock
        self.audit = audit
        self.interval = interval
    }

    /// Runs until graceful shutdown, then flushes once more, waits for the lines to be written, and returns.
    public func run() async throws {
        if interval > .zero {
            try? await cancelWhenGracefulShutdown {
                while true {
                    try await clock.sleep(for: interval)
                    audit.flush()
                }
            }
        } else {
            // Nothing to do until the end; returning early would stop the whole service group.
            try? await gracefulShutdown()
        }
        audit.flush()
        await audit.written()
    }
}
