import Dispatch

/// Runs CPU-heavy work (parsing an imported cache, serializing an export) one piece at a time on a thread of its
/// own, never on the threads that serve connections.
///
/// The daemon runs Swift concurrency on its event loops, so a task that parses a 1 MiB document there keeps every
/// connection of that loop waiting. One piece at a time also bounds the memory those documents take.
enum HeavyWork {
    private static let queue = DispatchQueue(label: "tokenbroker.heavy-work", qos: .utility)

    /// The value of `body`, computed off the connection threads; its error when it throws.
    static func run<Value: Sendable, Failure: Error>(
        _ body: @escaping @Sendable () throws(Failure) -> Value
    ) async throws(Failure) -> Value {
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<Value, Failure>, Never>) in
            queue.async {
                continuation.resume(returning: Result { () throws(Failure) in try body() })
            }
        }
        return try result.get()
    }
}
