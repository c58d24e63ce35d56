public import BrokerProtocol
public import BrokerTime
import Crypto
public import Foundation
public import Logging
import Synchronization

/// The cache: the in-memory contents every lookup reads, kept in step with a durable ``TokenStore``.
///
/// Commits change the contents and the store in one order. A commit that waits for the disk (``CommitWait/disk``)
/// changes memory only after the store committed, and one that throws changed nothing, on disk or in memory. A
/// commit that waits only for memory (``CommitWait/memory``: a refresh) changes the contents at once and is written
/// behind, in line; if that write fails, the contents keep the tokens and the failure is logged and counted.
public final class TokenCache: Sendable {
    private let store: any TokenStore
    private let contents: ReadWriteLocked<CacheContents>
    /// Entries found on disk that could not be opened; left in place, reported by status.
    public let damaged: [(id: EntryID, reason: String)]
    /// Whether the database was missing beside an existing key when the cache was opened (it started empty).
    public let databaseWasMissing: Bool
    private let failures = Mutex<WriteFailures>(WriteFailures())
    private let line = Mutex(WriteLine())
    private let changeCount = Atomic<UInt64>(0)
    private let recentSecrets = Mutex(RecentSecrets())
    /// Reads of one token's secret at the same time (the first answers after a restart): one per token and cache
    /// generation, so that a caller who looked the token up after a commit never joins a read begun before it.
    private let secretReads = SingleFlight<SecretRead, Secret?, any Error>()

    private struct SecretRead: Hashable, Sendable {
        let id: EntryID
        let generation: UInt64
    }
    private let logger: Logger?
    private let clock: any BrokerClock

    /// Access tokens' secrets read from the store lately, for one generation of the contents: the bus and the
    /// managed-identity endpoint look a token up for every request (only the socket remembers whole answers), and
    /// a read from the store costs about 40 µs against 7 µs for the lookup.
    private struct RecentSecrets {
        /// The most kept; past it the table starts again.
        static let capacity = 256

        var generation: UInt64 = 0
        var secrets: [EntryID: Secret] = [:]
        /// The secrets of access tokens whose write is behind the contents, by the generation that wrote each.
        ///
        /// A commit that does not wait for the disk puts them here until its write is in the store (which would
        /// answer with the token's previous secret, or none). Kept across generations, and when the write failed.
        var unwritten: [EntryID: (secret: Secret, generation: UInt64)] = [:]
    }

    /// The commits in line for the store.
    private struct WriteLine {
        /// Commits waiting for the disk that are in line and not yet in the contents: a commit that waits only for
        /// memory waits for them to be in the contents, never going ahead.
        var durableAhead = 0
        /// Commits in line, of both kinds, those waiting behind the disk's included.
        var count = 0
        /// Commits that wait only for memory, waiting for those that wait for the disk to be in the contents.
        var behindTheDisk: [CheckedContinuation<Void, Never>] = []
        /// Who waits for the line to empty.
        var drained: [CheckedContinuation<Void, Never>] = []
        /// Whether a write failed whose changes memory kept: the store may then lack what the contents hold, until
        /// the cache is opened again, and writes leave nothing out.
        var memoryAheadOfDisk = false

        /// One commit waiting for the disk is in the contents (or failed); those behind the disk when none is left.
        mutating func durableLeft() -> [CheckedContinuation<Void, Never>] {
            durableAhead -= 1
            guard durableAhead == 0 else { return [] }
            defer { behindTheDisk = [] }
            return behindTheDisk
        }
    }

    /// Writes that failed since the cache was opened (a full disk, a read-only file system), for status.
    public struct WriteFailures: Sendable {
        /// How many failed.
        public var count = 0
        /// The last one's reason, and when it failed (epoch milliseconds).
        public var last: (reason: String, at: Int64)?
    }

    /// Loads everything `store` holds; `databaseWasMissing` is what ``CacheLocation/openCache(logger:clock:)`` found.
    ///
    /// A failed write is logged to `logger` at error level, and counted in ``writeFailures``.
    public init(
        store: any TokenStore,
        databaseWasMissing: Bool = false,
        logger: Logger? = nil,
        clock: any BrokerClock = .system
    ) async throws {
        self.logger = logger
        self.clock = clock
        let stored = try await store.loadAll()
        self.store = store
        self.contents = ReadWriteLocked(stored.contents)
        self.damaged = stored.damaged
        self.databaseWasMissing = databaseWasMissing
        if stored.contents.count.total >= FreeMemory.bulk { FreeMemory.release() }
    }

    /// Where the managed-identity endpoint's grants are kept: beside the entries, when the store can hold them.
    public var grantStore: (any GrantStore)? {
        store as? any GrantStore
    }

    /// Writes that failed since the cache was opened.
    public var writeFailures: WriteFailures {
        failures.withLock { $0 }
    }

    /// Runs `body` on the current contents under the cache's shared lock (readers never wait for each other).
    ///
    /// Keep it short and free of I/O.
    public func read<Result, Failure: Error>(
        _ body: (borrowing CacheContents) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        try contents.read(body)
    }

    /// How many commits changed the contents so far: an answer worked out from the contents holds while this stays.
    ///
    /// Read it inside ``read(_:)`` to pair it with what was read there; it moves under the exclusive lock, with
    /// the contents, and before ``commit(_:)`` returns.
    public var generation: UInt64 {
        changeCount.load(ordering: .acquiring)
    }

    /// The secret of `token` (an access token read from the contents) when memory holds it.
    ///
    /// Its own, or one read from the store in this generation of the contents; nil when only the store has it (ask
    /// ``secret(of:)``).
    ///
    /// Never waits: safe on an event loop.
    public func secretInMemory(of token: AccessToken) -> Secret? {
        guard token.secret.isEmpty else { return token.secret }
        let generation = self.generation
        return recentSecrets.withLock { recent in
            let unwritten = recent.unwritten.isEmpty ? nil : recent.unwritten[token.id]
            if let unwritten { return unwritten.secret }
            return recent.generation == generation ? recent.secrets[token.id] : nil
        }
    }

    /// The secret of `token` (an access token read from the contents): from memory (``secretInMemory(of:)``), else
    /// read from the store on its reader's queue, off the caller's thread; nil when the store no longer holds the
    /// token (a commit replaced or removed it since it was read).
    public func secret(of token: AccessToken) async throws -> Secret? {
        if let secret = secretInMemory(of: token) { return secret }
        let id = token.id
        let generation = self.generation
        return try await secretReads.run(SecretRead(id: id, generation: generation)) {
            guard let secret = try await self.store.secrets(of: [id])[id] else { return nil }
            // Remembered before the readers sharing this read are let go, so that none after them reads again.
            self.recentSecrets.withLock { recent in
                // Kept only for the generation it was read in: a commit since may have replaced it.
                guard self.generation == generation else { return }
                if recent.generation != generation || recent.secrets.count >= RecentSecrets.capacity {
                    recent = RecentSecrets(generation: generation)
                }
                recent.secrets[id] = secret
            }
            return secret
        }
    }

    /// Reads of secrets started, and callers that joined one under way (for tests).
    var secretReadCounts: (started: Int, joined: Int) {
        secretReads.counts
    }

    /// The secrets remembered for the generation before `generation` that `changes` left alone, and those of the
    /// access tokens it wrote, remembered for `generation`: a commit (a refresh of one token) does not send the next
    /// answers for every other token to the store, and the token just written is answered from memory.
    ///
    /// Called in commit order, right after the contents changed.
    ///
    /// With `unwritten`, the access tokens' secrets are also kept until their write is in the store.
    private func carrySecrets(over changes: CacheChanges, to generation: UInt64, unwritten: Bool) {
        recentSecrets.withLock { recent in
            var secrets = recent.generation == generation - 1 ? recent.secrets : [:]
            for id in changes.deletions {
                secrets[id] = nil
                recent.unwritten[id] = nil
            }
            for (entry, id) in changes.identifiedUpserts {
                guard case .accessToken(let token) = entry else { continue }
                secrets[id] = token.secret.isEmpty ? nil : token.secret
                recent.unwritten[id] = unwritten ? (token.secret, generation) : nil
            }
            if secrets.count > RecentSecrets.capacity { secrets = [:] }
            recent.generation = generation
            recent.secrets = secrets
        }
    }

    /// Forgets the unwritten secrets of the commit of `generation`, now in the store (those a later commit wrote
    /// again stay).
    private func secretsWritten(by generation: UInt64) {
        recentSecrets.withLock { recent in
            guard !recent.unwritten.isEmpty else { return }
            recent.unwritten = recent.unwritten.filter { $0.value.generation != generation }
        }
    }

    /// Every entry, sorted by id, with the access tokens' secrets: for an export.
    ///
    /// The secrets the contents leave in the store are read from it, on its reader's queue. A token a commit
    /// removed between the two reads is left out; one it replaced has the new token's secret.
    public func allEntriesWithSecrets() async throws -> [CacheEntry] {
        let entries = read { $0.allEntries }
        return Self.filling(entries, with: try await storedSecrets(for: entries))
    }

    /// The secrets the store holds for those of `entries` that are access tokens without theirs (read on the
    /// store's reader queue), to be put in by ``filling(_:with:)``.
    public func storedSecrets(for entries: [CacheEntry]) async throws -> [EntryID: Secret] {
        let ids = entries.compactMap { entry -> EntryID? in
            guard case .accessToken(let token) = entry, token.secret.isEmpty else { return nil }
            return token.id
        }
        guard !ids.isEmpty else { return [:] }
        // Those whose write is still in line are not in the store yet.
        let unwritten = recentSecrets.withLock { recent in
            ids.compactMap { id in recent.unwritten[id].map { (id, $0.secret) } }
        }
        var secrets = Dictionary(unwritten, uniquingKeysWith: { first, _ in first })
        let rest = ids.filter { secrets[$0] == nil }
        guard !rest.isEmpty else { return secrets }
        secrets.merge(try await store.secrets(of: rest)) { unwritten, _ in unwritten }
        return secrets
    }

    /// `entries` with the access tokens' `secrets` put in; an access token without a secret and none in `secrets`
    /// (a commit removed it meanwhile) left out.
    public static func filling(_ entries: [CacheEntry], with secrets: [EntryID: Secret]) -> [CacheEntry] {
        entries.compactMap { entry in
            guard case .accessToken(var token) = entry, token.secret.isEmpty else { return entry }
            guard let secret = secrets[token.id] else { return nil }
            token.secret = secret
            return .accessToken(token)
        }
    }

    /// Whether commits are in line for the store.
    public var isWriting: Bool {
        writesInLine > 0
    }

    /// How many commits wait for those that wait for the disk to be in memory (a refresh's, a planned one's).
    var waitingBehindTheDisk: Int {
        line.withLock { $0.behindTheDisk.count }
    }

    /// How many commits are in line for the store, of both kinds.
    var writesInLine: Int {
        line.withLock { $0.count }
    }

    /// Waits until every commit in line is in the store (or failed); call before the process exits.
    public func finishWrites() async {
        await waitInLine(until: { $0.count == 0 }, among: \.drained)
    }

    /// Waits until `done` holds of the line: at once when it does, else among `waiters`, whom the commit that makes
    /// it hold resumes.
    private func waitInLine(
        until done: (WriteLine) -> Bool,
        among waiters: WritableKeyPath<WriteLine, [CheckedContinuation<Void, Never>]>
    ) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let holds = line.withLock { line -> Bool in
                guard !done(line) else { return true }
                line[keyPath: waiters].append(continuation)
                return false
            }
            if holds { continuation.resume() }
        }
    }

    /// Commits `changes`: when `wait` is ``CommitWait/disk``, writes them durably, then applies them in memory; when
    /// it is ``CommitWait/memory``, applies them in memory (once the commits ahead that wait for the disk are) and
    /// puts their write in line.
    public func commit(_ changes: CacheChanges, waitingFor wait: CommitWait = .disk) async throws {
        if wait == .memory {
            _ = try await commitInMemory(changes)
            return
        }
        do {
            try await commitDurably(changes)
            if changes.upserts.count + changes.deletions.count >= FreeMemory.bulk { FreeMemory.release() }
        } catch {
            recordFailure(error, "a cache write failed; none of it was kept")
            throw error
        }
    }

    /// Commits `changes` as ``CommitWait/memory`` does, provided `condition` holds of the contents once every commit
    /// in line before its write is in them; false, having changed nothing, when it does not.
    ///
    /// A refresh keeps its tokens only while the refresh token it redeemed is still cached: a sign-out that came
    /// first, even one still on its way to the disk, wins, and the account does not come back.
    ///
    /// It waits until no commit that waits for the disk is in line, those that came after it included (its write
    /// goes behind theirs, and memory must change in the order the store does). `condition` runs with the line
    /// locked and the contents read-locked: it must not touch the cache.
    public func commitInMemory(
        _ changes: CacheChanges,
        provided condition: (borrowing CacheContents) -> Bool = { _ in true }
    ) async throws -> Bool {
        try changes.checkStorable()
        var placed = false
        while true {
            let committed = line.withLock { line -> Bool? in
                if !placed {
                    // Its place in line from now on, so that finishWrites waits for it.
                    line.count += 1
                    placed = true
                }
                guard line.durableAhead == 0 else { return nil }
                guard contents.read(condition) else { return false }
                enqueueInMemory(changes)
                return true
            }
            switch committed {
            case true?:
                return true
            case false?:
                writeEnded()
                return false
            case nil:
                await durableCommitsApplied()
            }
        }
    }

    /// Waits until no commit that waits for the disk is in line and not yet in the contents.
    private func durableCommitsApplied() async {
        await waitInLine(until: { $0.durableAhead == 0 }, among: \.behindTheDisk)
    }

    /// Applies `changes` in memory and puts their write in line, in the place already counted for it; called with
    /// the line locked and no commit waiting for the disk ahead.
    ///
    /// What the contents held already as it is (a refresh's account and app metadata, the same at every refresh) is
    /// left out of the write when its turn comes, if no write that changed memory has failed: every write ahead then
    /// landed (none waiting for the disk is ahead), and the store holds it as it is too.
    private func enqueueInMemory(_ changes: CacheChanges) {
        let (generation, unchanged) = apply(changes, unwritten: true)
        store.enqueueCommit {
            unchanged.isEmpty || self.line.withLock(\.memoryAheadOfDisk)
                ? changes : changes.removingUpserts(at: unchanged)
        } afterCommit: {
            self.secretsWritten(by: generation)
        } completion: { error in
            if let error {
                // Before the next write's turn: it, and every one after, is written whole.
                self.line.withLock { $0.memoryAheadOfDisk = true }
                self.recordFailure(
                    error,
                    "a cache write failed after its tokens were handed out: memory keeps them, the disk has what it had before"
                )
            }
            self.writeEnded()
        }
    }

    /// Puts the write of `changes` in line and waits for it; memory changes when it is durable.
    private func commitDurably(_ changes: CacheChanges) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            line.withLock { line in
                enqueueDurably(changes, in: &line) { error in
                    if let error { continuation.resume(throwing: error) } else { continuation.resume() }
                }
            }
        }
    }

    /// Commits durably what `plan` makes of the contents (and returns what else it gives), as
    /// ``commit(_:waitingFor:)`` does with ``CommitWait/disk``.
    ///
    /// `plan` reads the contents once every commit ahead is in them, and no commit comes between its reading and
    /// the write's place in line: a removal planned so takes every token that a sign-in or a refresh ahead of it
    /// stored. Errors `plan` throws come out as they are, with nothing changed; a write that fails is logged and
    /// counted as ``commit(_:waitingFor:)``'s are.
    ///
    /// `plan` runs with the line locked and the contents read-locked: it must not touch the cache.
    public func commit<Plan: Sendable, Failure: Error>(
        planning plan: (borrowing CacheContents) throws(Failure) -> (changes: CacheChanges, plan: Plan)
    ) async throws -> Plan {
        while true {
            await durableCommitsApplied()
            let outcome = try await withCheckedThrowingContinuation {
                (continuation: CheckedContinuation<PlannedCommit<Plan>?, any Error>) in
                line.withLock { line in
                    // Another commit that waits for the disk came in line first: wait for it too.
                    guard line.durableAhead == 0 else { return continuation.resume(returning: nil) }
                    let planned: (changes: CacheChanges, plan: Plan)
                    do {
                        planned = try contents.read(plan)
                    } catch {
                        return continuation.resume(throwing: error)
                    }
                    let (changes, result) = planned
                    enqueueDurably(changes, in: &line) { error in
                        let written = error.map { PlannedCommit.failed($0) } ?? .written(result, changes)
                        continuation.resume(returning: written)
                    }
                }
            }
            switch outcome {
            case nil:
                continue
            case .written(let result, let changes)?:
                if changes.upserts.count + changes.deletions.count >= FreeMemory.bulk { FreeMemory.release() }
                return result
            case .failed(let error)?:
                recordFailure(error, "a cache write failed; none of it was kept")
                throw error
            }
        }
    }

    /// How a planned commit's write ended.
    private enum PlannedCommit<Plan: Sendable>: Sendable {
        case written(Plan, CacheChanges)
        case failed(any Error)
    }

    /// Puts the write of `changes` in line, to be applied in memory once it is durable; `done` gets its outcome.
    ///
    /// Called with the line locked.
    private func enqueueDurably(
        _ changes: CacheChanges,
        in line: inout WriteLine,
        done: @escaping @Sendable ((any Error)?) -> Void
    ) {
        line.durableAhead += 1
        line.count += 1
        store.enqueueCommit(changes) {
            let behind = self.line.withLock { line in
                _ = self.apply(changes, unwritten: false)
                return line.durableLeft()
            }
            for commit in behind { commit.resume() }
        } completion: { error in
            if error != nil {
                let behind = self.line.withLock { $0.durableLeft() }
                for commit in behind { commit.resume() }
            }
            self.writeEnded()
            done(error)
        }
    }

    /// Applies `changes` to the contents and returns the new generation, with the positions of the upserts the
    /// contents held already as they are (``CacheContents/apply(_:)``); called with the line locked, so the contents
    /// change in the order the writes are in line.
    private func apply(_ changes: CacheChanges, unwritten: Bool) -> (generation: UInt64, unchanged: [Int]) {
        let (generation, unchanged) = contents.write { contents -> (UInt64, [Int]) in
            let unchanged = contents.apply(changes)
            return (changeCount.add(1, ordering: .releasing).newValue, unchanged)
        }
        carrySecrets(over: changes, to: generation, unwritten: unwritten)
        return (generation, unchanged)
    }

    /// One commit left the line: lets those waiting for it to empty go on when it has.
    private func writeEnded() {
        let waiting = line.withLock { line -> [CheckedContinuation<Void, Never>] in
            line.count -= 1
            guard line.count == 0 else { return [] }
            defer { line.drained = [] }
            return line.drained
        }
        for continuation in waiting { continuation.resume() }
    }

    private func recordFailure(_ error: any Error, _ message: Logger.Message) {
        let reason = String(String(describing: error).prefix(300))
        let at = clock.nowMilliseconds
        failures.withLock {
            $0.count += 1
            $0.last = (reason, at)
        }
        logger?.error(message, metadata: ["reason": "\(reason)"])
    }
}

/// What a commit's caller waits for.
public enum CommitWait: Sendable {
    /// The write is durable, and then memory shows it: for what the caller is told is done (a sign-in, a removal,
    /// an import).
    case disk

    /// Memory shows it; the write follows in line. For a refresh's answer: the caller asked for a token, not for a
    /// write, and the write starts as soon as it would have. The window in which a crash loses the rotated refresh
    /// token (from the provider's answer until the write is durable) is no longer than when the answer waits.
    case memory
}

/// Where the cache lives inside the state directory, and how it is opened safely.
public struct CacheLocation: Sendable {
    /// The state directory (0700).
    public var stateDirectory: URL

    /// The cache inside `stateDirectory`.
    public init(stateDirectory: URL) {
        self.stateDirectory = stateDirectory
    }

    /// Where the daemon keeps its state: `option` (`--state-directory`), else `$STATE_DIRECTORY` (systemd's
    /// `StateDirectory=`, its first entry), else `$XDG_STATE_HOME/tokenbroker`, else `~/.local/state/tokenbroker`;
    /// nil when none of them is set to an absolute path.
    public static func stateDirectory(option: String?, environment: [String: String]) -> URL? {
        if let option { return URL(filePath: option) }
        if let systemd = environment["STATE_DIRECTORY"]?.split(separator: ":").first, systemd.hasPrefix("/") {
            return URL(filePath: String(systemd))
        }
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") {
            return URL(filePath: state).appending(path: "tokenbroker")
        }
        guard let home = environment["HOME"], home.hasPrefix("/") else { return nil }
        return URL(filePath: home).appending(path: ".local/state/tokenbroker")
    }

    /// The database: `<state>/db/cache.sqlite3` (with its `-wal` and `-shm` files beside it).
    public var databaseURL: URL {
        stateDirectory.appending(path: "db/cache.sqlite3")
    }

    /// The sealing key: `<state>/cache.key`, outside the database's directory, so a copy of `db/` alone reveals
    /// nothing.
    public var keyURL: URL {
        stateDirectory.appending(path: "cache.key")
    }

    /// Where the key is kept, and what it takes to find it: `<state>/key.json` (never the key itself).
    public var keyRecordURL: URL {
        stateDirectory.appending(path: "key.json")
    }

    /// The lock that keeps two daemons off one state directory: `<state>/lock`.
    public var lockURL: URL {
        stateDirectory.appending(path: "lock")
    }

    /// Opens the cache over ``openStore(clock:)``.
    ///
    /// Where the key exists and the database does not (deleted, or lost with its directory), the new empty cache
    /// says so in ``TokenCache/databaseWasMissing``: every token the key sealed is gone, and the user should hear it.
    public func openCache(logger: Logger? = nil, clock: any BrokerClock = .system) async throws -> TokenCache {
        let databaseWasMissing =
            FileManager.default.fileExists(atPath: keyURL.path)
            && !FileManager.default.fileExists(atPath: databaseURL.path)
        return try await TokenCache(
            store: try openStore(clock: clock),
            databaseWasMissing: databaseWasMissing,
            logger: logger,
            clock: clock
        )
    }

    /// Opens the cache sealed with `key` (the ``KeyVault``'s), creating the database's directory 0700; refuses a
    /// database sealed with another key.
    ///
    /// A database missing beside a key that is not new is said in ``TokenCache/databaseWasMissing``.
    public func openCache(
        key: KeyMemory,
        keyIsNew: Bool,
        logger: Logger? = nil,
        clock: any BrokerClock = .system
    ) async throws -> TokenCache {
        try Directories.ensurePrivateDirectory(stateDirectory)
        try Directories.ensurePrivateDirectory(databaseURL.deletingLastPathComponent())
        let databaseWasMissing = !keyIsNew && !FileManager.default.fileExists(atPath: databaseURL.path)
        return try await TokenCache(
            store: try SQLiteTokenStore(url: databaseURL, sealer: try SecretSealer(key: key), clock: clock),
            databaseWasMissing: databaseWasMissing,
            logger: logger,
            clock: clock
        )
    }

    /// Opens the SQLite store: creates the directories 0700 and a new key only for a database without data;
    /// refuses a database whose key is missing or different.
    public func openStore(clock: any BrokerClock = .system) throws -> SQLiteTokenStore {
        try Directories.ensurePrivateDirectory(stateDirectory)
        try Directories.ensurePrivateDirectory(databaseURL.deletingLastPathComponent())
        let key: KeyMemory
        if let existing = try KeyFile.load(keyURL) {
            key = existing
        } else if SQLiteTokenStore.holdsData(at: databaseURL) {
            throw CacheError(
                .keyMismatch,
                "the cache key \(keyURL.path) is missing but the database \(databaseURL.path) holds tokens: "
                    + "restore the key, or move the database away to start empty"
            )
        } else {
            key = try KeyFile.create(keyURL)
        }
        return try SQLiteTokenStore(url: databaseURL, sealer: try SecretSealer(key: key), clock: clock)
    }
}
