#if canImport(Glibc)
import Glibc
#endif

/// A value guarded by a readers–writer lock: any number of readers at once, one writer alone.
///
/// The cache is read on every token request from every event loop and written rarely (a refresh, an import);
/// a mutex would make the readers queue behind each other, this lets them run side by side.
public final class ReadWriteLocked<Value>: @unchecked Sendable {
    // SAFETY: `value` is only touched while `lock` is held: shared for reads, exclusive for writes.
    private var value: Value
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>

    /// Guards `value`.
    public init(_ value: Value) {
        self.value = value
        lock = .allocate(capacity: 1)
        lock.initialize(to: pthread_rwlock_t())
        precondition(pthread_rwlock_init(lock, nil) == 0, "pthread_rwlock_init failed")
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    /// Runs `body` with shared access.
    ///
    /// Keep it short; never write through it.
    public func read<Result, Failure: Error>(
        _ body: (borrowing Value) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body(value)
    }

    /// Runs `body` with exclusive access.
    public func write<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result
    {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body(&value)
    }
}
