public import BrokerCore
public import ServiceLifecycle

/// Writes the audit trail's summary lines once per window, and a last time when the daemon stops.
public struct AuditFlushService: Service {
    private let audit: AuditLog
    private let interval: Duration

    /// Flushes `audit` every `interval`.
    public init(audit: AuditLog, interval: Duration) {
        self.audit = audit
        self.interval = interval
    }

    /// Runs until graceful shutdown, then flushes once more and returns.
    public func run() async throws {
        defer { audit.flush() }
        guard interval > .zero else {
            // Nothing to do until the end; returning early would stop the whole service group.
            try? await gracefulShutdown()
            return
        }
        try? await cancelWhenGracefulShutdown {
            while true {
                try await Task.sleep(for: interval)
                audit.flush()
            }
        }
    }
}
