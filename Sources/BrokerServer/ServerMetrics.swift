import BrokerProtocol
import Foundation
import Synchronization

/// Counters for `getStatus`, updated from every connection.
final class ServerMetrics: Sendable {
    let startedAt = Date()
    let openConnections = Atomic<Int>(0)
    let acceptedConnections = Atomic<Int>(0)
    let refusedConnections = Atomic<Int>(0)
    let succeeded = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let inFlight = Atomic<Int>(0)
    /// Numbers connections, so interactive flows know which one they belong to.
    let connectionSerial = Atomic<UInt64>(0)
    /// When a connection last opened or closed, in nanoseconds of the monotonic clock.
    let lastActivity = Atomic<Int64>(ServerMetrics.monotonicNanoseconds)

    static var monotonicNanoseconds: Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }

    func touch() {
        lastActivity.store(Self.monotonicNanoseconds, ordering: .relaxed)
    }
    private let recent = Mutex<[StatusResult.RecentError]>([])
    private static let recentLimit = 20

    func recordError(method: String, error: ErrorObject, correlationId: String?) {
        failed.add(1, ordering: .relaxed)
        let entry = StatusResult.RecentError(
            at: Int64(Date().timeIntervalSince1970 * 1000),
            method: method,
            errorCode: error.errorCode,
            message: error.message,
            correlationId: correlationId
        )
        recent.withLock { errors in
            errors.append(entry)
            if errors.count > Self.recentLimit { errors.removeFirst(errors.count - Self.recentLimit) }
        }
    }

    var recentErrors: [StatusResult.RecentError] {
        recent.withLock { $0 }
    }
}
