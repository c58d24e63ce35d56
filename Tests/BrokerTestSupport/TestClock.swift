public import BrokerTime
public import Foundation
import Synchronization

/// A clock that only moves when told.
///
/// ``advance(by:)`` moves it. By default every sleep returns at once having moved it by its length (recorded in
/// ``sleeps``): throttles, retries, polling, windows and idle timeouts run on it without waiting, and a test sees
/// exactly how long the code under test meant to wait. `holdingSleepers` is for races with a timeout (a sign-in
/// against its time limit, the watchdog's pings), which a sleep that returns at once would always end: each sleeper
/// then waits until the test moves the clock past its deadline (``waitForSleepers(_:)``, ``pendingSleeps``).
public final class TestClock: BrokerClock {
    private struct Sleeper {
        let id: Int
        let deadline: Duration
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var elapsed: Duration = .zero
        var sleeps: [Duration] = []
        var nextID = 0
        var sleepers: [Sleeper] = []
    }

    private let start: Date
    private let holdsSleepers: Bool
    private let state = Mutex(State())

    /// A clock whose wall time starts at `start`; with `holdingSleepers`, sleeps wait for ``advance(by:)``.
    public init(start: Date = Date(timeIntervalSince1970: 1_700_000_000), holdingSleepers: Bool = false) {
        self.start = start
        self.holdsSleepers = holdingSleepers
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

    /// Waits `duration` of the clock's time; throws `CancellationError` when the task is cancelled.
    ///
    /// Returns at once, the clock moved on by `duration`; holding sleepers, once the test has moved the clock
    /// `duration` past now.
    public func sleep(for duration: Duration) async throws {
        try Task.checkCancellation()
        guard holdsSleepers else {
            state.withLock { state in
                state.sleeps.append(duration)
                if duration > .zero { state.elapsed += duration }
            }
            await Task.yield()
            return
        }
        state.withLock { $0.sleeps.append(duration) }
        guard duration > .zero else { return }
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let cancelled = state.withLock { state -> Bool in
                    if Task.isCancelled { return true }
                    let deadline = state.elapsed + duration
                    state.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let sleeper = state.withLock { state -> Sleeper? in
                guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return state.sleepers.remove(at: index)
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves the clock on (time passing between calls), waking every held sleeper whose deadline it reaches.
    public func advance(by duration: Duration) {
        let woken = state.withLock { state -> [Sleeper] in
            state.elapsed += duration
            let elapsed = state.elapsed
            let due = state.sleepers.filter { $0.deadline <= elapsed }
            state.sleepers.removeAll { $0.deadline <= elapsed }
            return due
        }
        for sleeper in woken { sleeper.continuation.resume() }
    }

    /// Every sleep's length, in order.
    public var sleeps: [Duration] {
        state.withLock { $0.sleeps }
    }

    /// How long each held sleeper still has to wait, soonest first.
    public var pendingSleeps: [Duration] {
        state.withLock { state in state.sleepers.map { $0.deadline - state.elapsed }.sorted() }
    }

    /// Waits until at least `count` sleepers are held on the clock.
    public func waitForSleepers(_ count: Int = 1) async throws {
        try await waitUntil("\(count) sleepers on the test clock") { pendingSleeps.count >= count }
    }
}
