public import BrokerCache
public import BrokerProtocol
import Dispatch
import Synchronization

/// A store that keeps entries in memory only: for unit tests of code above the cache, never for the daemon.
///
/// Like the daemon's SQLite store, it leaves access tokens' secrets out of the contents it loads (they are read back
/// through ``secrets(of:)``), so tests above the cache go the daemon's way.
public final class InMemoryTokenStore: TokenStore {
    private let state: Mutex<[EntryID: CacheEntry]>
    private let failure: Mutex<(error: any Error, count: Int?)?> = Mutex(nil)
    private let leavesAccessTokenSecrets: Bool
    private let secretReadCount = Mutex(0)
    private let secretReadHold: Mutex<(@Sendable () -> Bool)?> = Mutex(nil)
    private let writer = DispatchQueue(label: "InMemoryTokenStore.writer")
    private let upsertsWritten: Mutex<[[EntryID]]> = Mutex([])

    /// A store holding `entries`; with `leavingAccessTokenSecrets` false, its contents keep every secret in memory.
    public init(_ entries: [CacheEntry] = [], leavingAccessTokenSecrets: Bool = true) {
        state = Mutex(Dictionary(entries.map { ($0.id, $0) }, uniquingKeysWith: { _, last in last }))
        leavesAccessTokenSecrets = leavingAccessTokenSecrets
    }

    /// Makes every later commit throw `error` (nil to stop), or the next `count` of them, to test that failed writes
    /// change nothing.
    public func failCommits(with error: (any Error)?, count: Int? = nil) {
        failure.withLock { $0 = error.map { ($0, count) } }
    }

    /// The error the commit starting now throws, if any.
    private func nextFailure() -> (any Error)? {
        failure.withLock { failure in
            guard let (error, count) = failure else { return nil }
            if let count { failure = count > 1 ? (error, count - 1) : nil }
            return error
        }
    }

    /// Holds every write in line behind this call until the returned closure is called: a test looks at the cache
    /// while its writes wait, as they do behind a slow disk.
    public func holdWrites() -> @Sendable () -> Void {
        let gate = DispatchSemaphore(value: 0)
        writer.async { gate.wait() }
        return { gate.signal() }
    }

    /// The entries as committed.
    public var entries: [CacheEntry] {
        state.withLock { Array($0.values) }
    }

    /// The ids each commit wrote, in the order the commits landed.
    public var committedUpserts: [[EntryID]] {
        upsertsWritten.withLock { $0 }
    }

    /// Returns every entry.
    public func loadAll() async throws -> StoredEntries {
        StoredEntries(entries: entries, leavingAccessTokenSecretsInStore: leavesAccessTokenSecrets)
    }

    /// How many times ``secrets(of:)`` was asked.
    public var secretReads: Int {
        secretReadCount.withLock { $0 }
    }

    /// Makes every later read of secrets wait until `condition` holds (and throw when it does not within
    /// ``eventTimeout``): a test holds the first read until the callers it expects have joined it.
    public func holdSecretReads(until condition: @escaping @Sendable () -> Bool) {
        secretReadHold.withLock { $0 = condition }
    }

    /// The access tokens' secrets as committed (after a yield, as a read of the daemon's store takes time).
    public func secrets(of ids: [EntryID]) async throws -> [EntryID: Secret] {
        secretReadCount.withLock { $0 += 1 }
        await Task.yield()
        if let condition = secretReadHold.withLock({ $0 }) {
            try await waitUntil("the held read of secrets may go on", condition)
        }
        return state.withLock { entries in
            var secrets: [EntryID: Secret] = [:]
            for id in ids {
                if case .accessToken(let token)? = entries[id] { secrets[id] = token.secret }
            }
            return secrets
        }
    }

    /// Puts the change set in line on the store's own serial queue, as the SQLite store does on its writer's.
    ///
    /// There it is applied under a lock, and `afterCommit` runs under the same lock. Refuses an access token without
    /// its secret, as the SQLite store does.
    public func enqueueCommit(
        preparing prepare: @escaping @Sendable () -> CacheChanges,
        afterCommit: @escaping @Sendable () -> Void,
        completion: @escaping @Sendable ((any Error)?) -> Void
    ) {
        writer.async {
            let changes = prepare()
            if let error = self.nextFailure() { return completion(error) }
            do { try changes.checkStorable() } catch { return completion(error) }
            self.state.withLock { entries in
                for id in changes.deletions { entries[id] = nil }
                for entry in changes.upserts { entries[entry.id] = entry }
                self.upsertsWritten.withLock { $0.append(changes.upserts.map(\.id)) }
                afterCommit()
            }
            completion(nil)
        }
    }
}
