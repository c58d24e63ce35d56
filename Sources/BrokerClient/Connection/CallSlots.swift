import Synchronization

/// The calls a connection may have in flight at once (``WireProtocol/maximumRequestsInFlight``): past them, a call
/// waits for an answer to come back instead of being refused by the broker as `broker_busy`.
final class CallSlots: Sendable {
    private struct State {
        var available: Int
        var nextWaiter = 0
        var waiters: [(id: Int, continuation: CheckedContinuation<Void, any Error>)] = []
    }

    private let state: Mutex<State>

    init(_ limit: Int) {
        state = Mutex(State(available: limit))
    }

    /// Takes a slot, waiting for one to be given back; throws `CancellationError` when the task is cancelled first.
    func acquire() async throws {
        let id = state.withLock { state -> Int? in
            guard state.available == 0 else {
                state.available -= 1
                return nil
            }
            state.nextWaiter += 1
            return state.nextWaiter
        }
        guard let id else { return }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let cancelled = state.withLock { state -> Bool in
                    if Task.isCancelled { return true }
                    state.waiters.append((id, continuation))
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, any Error>? in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index).continuation
            }
            waiter?.resume(throwing: CancellationError())
        }
    }

    /// How many calls wait for a slot now.
    var waiting: Int {
        state.withLock { $0.waiters.count }
    }

    /// Gives a slot back: to the call that waited longest, if any.
    func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            guard !state.waiters.isEmpty else {
                state.available += 1
                return nil
            }
            return state.waiters.removeFirst().continuation
        }
        next?.resume()
    }
}
