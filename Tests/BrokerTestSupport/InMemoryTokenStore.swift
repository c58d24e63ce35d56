public import BrokerCache
import Synchronization

/// A store that keeps entries in memory only: for unit tests of code above the cache, never for the daemon.
public final class InMemoryTokenStore: TokenStore {
    private let state: Mutex<[EntryID: CacheEntry]>
    private let failure: Mutex<(any Error)?> = Mutex(nil)

    /// A store holding `entries`.
    public init(_ entries: [CacheEntry] = []) {
        state = Mutex(Dictionary(entries.map { ($0.id, $0) }, uniquingKeysWith: { _, last in last }))
    }

    /// Makes every later commit throw `error` (nil to stop), to test that failed writes change nothing.
    public func failCommits(with error: (any Error)?) {
        failure.withLock { $0 = error }
    }

    /// The entries as committed.
    public var entries: [CacheEntry] {
        state.withLock { Array($0.values) }
    }

    /// Returns every entry.
    public func loadAll() async throws -> StoredEntries {
        StoredEntries(entries: entries)
    }

    /// Applies the change set under a lock, then calls `afterCommit` under the same lock.
    public func commit(_ changes: CacheChanges, afterCommit: @Sendable () -> Void) async throws {
        if let error = failure.withLock({ $0 }) { throw error }
        state.withLock { entries in
            for id in changes.deletions { entries[id] = nil }
            for entry in changes.upserts { entries[entry.id] = entry }
            afterCommit()
        }
    }
}
