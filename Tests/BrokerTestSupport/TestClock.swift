public import BrokerTime
public import Foundation
import Synchronization

/// A clock that only moves when told.
///
/// ``advance(by:)`` moves it, and every sleep returns at once having moved it by its length (recorded in
/// ``sleeps``). Throttles, retries, polling, windows and idle timeouts run on it without waiting, and a test sees
/// exactly how long the code under test meant to wait.
public final class TestClock: BrokerClock {
    private struct State {
        var elapsed: Duration = .zero
        var sleeps: [Duration] = []
    }

    private let start: Date
    private let state = Mutex(State())

    /// A clock whose wall time starts at `start`.
    public init(start: Date = Date(timeIntervalSince1970: 1_700_000_000)) {
        self.start = start
    }

    public var now: Date {
        let elapsed = self.elapsed
        return start.addingTimeInterval(
            Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        )
    }

    public var elapsed: Duration {
        state.withLock { $0.elapsed }
    }

    /// Returns at once, the clock moved on by `duration`; throws when the task is cancelled.
    public func sleep(for duration: Duration) async throws {
        try Task.checkCancellation()
        state.withLock { state in
            state.sleeps.append(duration)
            if duration > .zero { state.elapsed += duration }
        }
        await Task.yield()
    }

    /// Moves the clock on: time passing between calls.
    public func advance(by duration: Duration) {
        state.withLock { $0.elapsed += duration }
    }

    /// Every sleep's length, in order.
    public var sleeps: [Duration] {
        state.withLock { $0.sleeps }
    }
}
