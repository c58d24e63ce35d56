import Synchronization

/// Counts, from any task.
public final class Counter: Sendable {
    private let count = Mutex(0)
    public init() {}
    public var value: Int { count.withLock { $0 } }
    public func increment() { count.withLock { $0 += 1 } }
    public func decrement() { count.withLock { $0 -= 1 } }
}

/// Holds its waiters until opened.
public final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    public init() {}

    public func wait() async {
        await withCheckedContinuation { continuation in
            let resumeNow = state.withLock { state in
                if state.open { return true }
                state.waiters.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    public func open() {
        let waiters = state.withLock { state in
            state.open = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}
