public import Synchronization

/// Runs a piece of work once for all concurrent callers with the same key: the first caller starts it, the
/// others wait for its result.
///
/// The work runs in a task of its own, so a caller that goes away does not cut it short (a refresh whose rotated
/// token must be stored, a discovery fetch others wait on, a try of a locked keyring). The task forgets its key
/// itself when it ends, so the next caller after that starts afresh, and a failure is never remembered.
///
/// The one implementation for the broker's refreshes, the providers' discovery documents and signing keys, and the
/// key stores' retries.
///
/// Public and inlinable, in a module no product exports, so that each user's module specializes it for its key and
/// result: a module calls another's `package` generics, inlinable or not, as generic code, and the flight's state cost
/// a refresh 10,000 instructions more so (callgrind).
public final class SingleFlight<Key: Hashable & Sendable, Value: Sendable, Failure: Error>: Sendable {
    @usableFromInline typealias Flight = Task<Result<Value, Failure>, Never>

    @usableFromInline struct State {
        @usableFromInline var running: [Key: (serial: UInt64, task: Flight)] = [:]
        @usableFromInline var serial: UInt64 = 0
        @usableFromInline var started = 0
        @usableFromInline var joined = 0

        @usableFromInline init() {}
    }

    @usableFromInline let state: Mutex<State>

    /// Nothing running yet.
    public init() {
        state = Mutex(State())
    }

    /// The result of `work` for `key`: of the run under way, or of a new one.
    @inlinable public func run(
        _ key: Key,
        _ work: @escaping @Sendable () async throws(Failure) -> Value
    ) async throws(Failure) -> Value {
        let task = state.withLock { state -> Flight in
            if let running = state.running[key] {
                state.joined += 1
                return running.task
            }
            state.serial += 1
            state.started += 1
            let serial = state.serial
            // The task takes the lock to forget itself, so it cannot do so before it is recorded here.
            let task = Flight {
                let result: Result<Value, Failure>
                do throws(Failure) {
                    result = .success(try await work())
                } catch {
                    result = .failure(error)
                }
                self.forget(key, serial: serial)
                return result
            }
            state.running[key] = (serial, task)
            return task
        }
        return try await task.value.get()
    }

    /// Whether no work is under way.
    public var isIdle: Bool {
        state.withLock { $0.running.isEmpty }
    }

    /// Runs started, and callers that joined one under way instead of starting their own.
    public var counts: (started: Int, joined: Int) {
        state.withLock { ($0.started, $0.joined) }
    }

    /// Waits until the work under way now has finished.
    public func waitForRunning() async {
        for task in state.withLock({ $0.running.values.map(\.task) }) { _ = await task.value }
    }

    @inlinable func forget(_ key: Key, serial: UInt64) {
        state.withLock { state in
            if state.running[key]?.serial == serial { state.running[key] = nil }
        }
    }
}
