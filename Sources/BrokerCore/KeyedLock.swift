import Synchronization

/// Lets one caller at a time hold a key: the others wait for their turn, first come first served.
///
/// Callers of different keys never wait for each other.
///
/// The broker takes a refresh token's turn before redeeming it: a provider that rotates refresh tokens and detects
/// their reuse revokes every token of the user when the one it just rotated out is presented again, which two
/// redemptions of the same token at once would do.
///
/// Waiting for a turn is not cancelled with the caller's task: the work behind it (a refresh whose rotated token
/// must be stored) runs to its end anyway, in its own task.
///
/// Here, beside its one user, where it is specialized for the refresh token's key: as a `package` type of BrokerTime it
/// was called as generic code (a module specializes only the public inlinable code of another), and the lock's
/// dictionary work, looked up through the key's witness tables, cost each refresh 6,900 instructions more (callgrind).
package final class KeyedLock<Key: Hashable & Sendable>: Sendable {
    private struct State {
        /// The keys held, each with the callers waiting for it, in the order they came.
        var held: [Key: [CheckedContinuation<Void, Never>]] = [:]
        /// Callers that had to wait for a turn, since the lock was made.
        var waited = 0

        /// Takes `key` when nobody holds it.
        mutating func take(_ key: Key) -> Bool {
            guard held[key] == nil else { return false }
            held[key] = []
            return true
        }
    }

    private let state = Mutex(State())

    /// No key held.
    package init() {}

    /// Runs `body` holding `key`, once every caller that asked for it before has had its turn; `waiting` is called
    /// first when the key is held by another.
    package func withLock<Value, Failure: Error>(
        _ key: Key,
        waiting: () -> Void = {},
        _ body: () async throws(Failure) -> Value
    ) async throws(Failure) -> Value {
        await acquire(key, waiting: waiting)
        defer { release(key) }
        return try await body()
    }

    /// Whether no key is held.
    package var isIdle: Bool {
        state.withLock { $0.held.isEmpty }
    }

    /// How many callers waited for a turn, since the lock was made.
    package var waited: Int {
        state.withLock { $0.waited }
    }

    private func acquire(_ key: Key, waiting: () -> Void) async {
        // A free key is taken without a continuation: awaiting one, even resumed at once, costs a task switch.
        guard !state.withLock({ $0.take(key) }) else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let taken = state.withLock { state -> Bool in
                guard !state.take(key) else { return true }
                state.held[key]?.append(continuation)
                state.waited += 1
                return false
            }
            if taken { continuation.resume() } else { waiting() }
        }
    }

    /// Hands `key` to the first caller waiting for it, or frees it.
    private func release(_ key: Key) {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard var waiting = state.held[key], !waiting.isEmpty else {
                state.held[key] = nil
                return nil
            }
            let next = waiting.removeFirst()
            state.held[key] = waiting
            return next
        }
        next?.resume()
    }
}
