public import BrokerProtocol
public import Foundation

/// Durable storage for cache entries.
///
/// The in-memory ``CacheContents`` is the read path; a store only has to load everything once and apply change sets
/// atomically and durably.
public protocol TokenStore: Sendable {
    /// Every stored entry, plus the ids of entries that could not be opened (kept on disk, never deleted).
    func loadAll() async throws -> StoredEntries

    /// Puts a write in line and returns at once, without calling anything; `changes` gives what to write when its
    /// turn comes.
    ///
    /// Writes run one at a time, off the caller's thread, in the order they were put in line. Each is one
    /// transaction; once it is durable (it survives a crash), `afterCommit` runs before any later write starts, so
    /// callers can mirror commits in memory in commit order. `completion` then gets nil, or the error when nothing
    /// was written (and `afterCommit` was not called), also before any later write starts: `changes` runs once
    /// every write ahead has ended, and can leave out what they wrote.
    ///
    /// Never calls a closure on the caller's thread before returning: a caller may hold a lock that they take.
    func enqueueCommit(
        preparing changes: @escaping @Sendable () -> CacheChanges,
        afterCommit: @escaping @Sendable () -> Void,
        completion: @escaping @Sendable ((any Error)?) -> Void
    )

    /// The secrets of the access tokens `ids`, as stored now, for contents loaded without them
    /// (``CacheContents/leavesAccessTokenSecretsInStore``); an id whose entry is gone has none.
    ///
    /// Reads off the caller's thread (never on an event loop): one indexed read per token, once per token and cache
    /// generation (answers and secrets read are remembered for that long).
    func secrets(of ids: [EntryID]) async throws -> [EntryID: Secret]
}

extension TokenStore {
    /// Puts a write of `changes` in line, as ``enqueueCommit(preparing:afterCommit:completion:)`` does.
    public func enqueueCommit(
        _ changes: CacheChanges,
        afterCommit: @escaping @Sendable () -> Void,
        completion: @escaping @Sendable ((any Error)?) -> Void
    ) {
        enqueueCommit(preparing: { changes }, afterCommit: afterCommit, completion: completion)
    }

    /// None: a store whose contents keep every secret in memory.
    public func secrets(of ids: [EntryID]) async throws -> [EntryID: Secret] { [:] }
}

/// What a store holds.
public struct StoredEntries: Sendable {
    /// The entries that could be read, with their indexes.
    public var contents: CacheContents
    /// Entries that could not be opened or read, with the reason.
    public var damaged: [(id: EntryID, reason: String)]

    /// Creates the result from entries read.
    public init(
        entries: some Sequence<CacheEntry>,
        damaged: [(id: EntryID, reason: String)] = [],
        leavingAccessTokenSecretsInStore: Bool = false
    ) {
        self.init(
            contents: CacheContents(entries, leavingAccessTokenSecretsInStore: leavingAccessTokenSecretsInStore),
            damaged: damaged
        )
    }

    /// Creates the result from contents built while reading: each entry goes into them as it is read, so what it
    /// holds alike with others (account and client ids, scopes) is shared before the next is read.
    public init(contents: CacheContents, damaged: [(id: EntryID, reason: String)] = []) {
        self.contents = contents
        self.damaged = damaged
    }
}

/// Durable storage of the managed-identity endpoint's grants: opaque records by id, kept beside the cache and
/// sealed with its key.
public protocol GrantStore: Sendable {
    /// Every stored grant record, plus the ids of records that could not be opened (kept on disk).
    func loadGrants() async throws -> (records: [String: Data], damaged: [String])

    /// Writes `record` under `id` durably (replacing one there).
    func saveGrant(id: String, record: Data) async throws

    /// Deletes the records of `ids` durably.
    func deleteGrants(ids: [String]) async throws
}
