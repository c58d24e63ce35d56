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

/// A clock whose sleepers wait until a test moves it past their deadline.
///
/// For races with a timeout (a sign-in against its time limit, the watchdog's pings): the timeout neither fires at
/// once, as ``TestClock`` would make it, nor after real time. ``waitForSleepers(_:)`` waits until the code under
/// test is asleep, then ``advance(by:)`` wakes those whose deadline passed.
public final class ManualClock: BrokerClock {
    private struct Sleeper {
        let id: Int
        let deadline: Duration
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var elapsed: Duration = .zero
        var nextID = 0
        var sleepers: [Sleeper] = []
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

    /// Returns once the clock was moved `duration` past now; throws `CancellationError` when the task is cancelled.
    public func sleep(for duration: Duration) async throws {
        try Task.checkCancellation()
        guard duration > .zero else { return }
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let cancelled = state.withLock { state -> Bool in
                    if Task.isCancelled { return true }
                    state.sleepers.append(
                        Sleeper(id: id, deadline: state.elapsed + duration, continuation: continuation)
                    )
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

    /// Moves the clock on, waking every sleeper whose deadline it reaches.
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

    /// How long each sleeper still has to wait, soonest first.
    public var pendingSleeps: [Duration] {
        state.withLock { state in state.sleepers.map { $0.deadline - state.elapsed }.sorted() }
    }

    /// Waits until at least `count` sleepers wait on the clock.
    public func waitForSleepers(_ count: Int = 1) async throws {
        try await waitUntil("\(count) sleepers on the manual clock") { pendingSleeps.count >= count }
    }
}
