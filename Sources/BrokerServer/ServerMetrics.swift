import BrokerProtocol
import BrokerTime
import Foundation
import Synchronization

/// Counters for `getStatus`, updated from every connection.
final class ServerMetrics: Sendable {
    let clock: any BrokerClock
    let startedAt: Date
    let openConnections = Atomic<Int>(0)
    let acceptedConnections = Atomic<Int>(0)
    let refusedConnections = Atomic<Int>(0)
    let succeeded = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let inFlight = Atomic<Int>(0)
    /// Numbers connections, so interactive flows know which one they belong to.
    let connectionSerial = Atomic<UInt64>(0)
    /// When a connection last opened or closed, in nanoseconds of the monotonic clock.
    let lastActivity: Atomic<Int64>

    init(clock: any BrokerClock) {
        self.clock = clock
        startedAt = clock.now
        lastActivity = Atomic(Self.nanoseconds(clock.elapsed))
    }

    func touch() {
        lastActivity.store(Self.nanoseconds(clock.elapsed), ordering: .relaxed)
    }

    /// How long since a connection last opened or closed.
    var sinceLastActivity: Duration {
        .nanoseconds(Self.nanoseconds(clock.elapsed) - lastActivity.load(ordering: .relaxed))
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    }

    /// Open connections by peer process.
    private let byPeer = Mutex<[Int32: Int]>([:])

    /// Counts a connection of `peer` as open; returns how many it has open now.
    func opened(peer: Int32) -> Int {
        byPeer.withLock { counts in
            counts[peer, default: 0] += 1
            return counts[peer, default: 0]
        }
    }

    /// Counts a connection of `peer` as closed: one open connection fewer, in all and of `peer`, and activity now.
    func closed(peer: Int32) {
        openConnections.subtract(1, ordering: .relaxed)
        touch()
        byPeer.withLock { counts in
            let left = counts[peer, default: 1] - 1
            counts[peer] = left > 0 ? left : nil
        }
    }
    private let recent = Mutex<[StatusResult.RecentError]>([])
    private static let recentLimit = 20
    private static let messageLimit = 300

    func recordError(method: String, error: ErrorObject, correlationId: String?) {
        failed.add(1, ordering: .relaxed)
        // Every string kept here is bounded: getStatus repeats the list to every caller.
        let entry = StatusResult.RecentError(
            at: clock.nowMilliseconds,
            method: String(method.prefix(64)),
            errorCode: error.errorCode,
            message: error.message.count > Self.messageLimit
                ? String(error.message.prefix(Self.messageLimit - 1)) + "…" : error.message,
            correlationId: correlationId.map { String($0.prefix(WireProtocol.maximumCorrelationIdBytes)) }
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
