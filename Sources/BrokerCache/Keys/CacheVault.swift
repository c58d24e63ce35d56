public import BrokerProtocol
public import BrokerTime
import Dispatch
import Foundation
public import Logging
import Synchronization

/// The cache behind its key: open, or locked while its key store cannot give the key.
///
/// Locked, the broker starts and answers, serves nothing sealed, and says why; it tries the store again at a
/// request (at most every ``retryInterval``), and at `tokenbroker unlock`. Nothing is deleted or made anew.
public final class CacheVault: Sendable {
    /// The cache once open, where its key is and, while the cache is locked, why.
    ///
    /// A `Mutex`, read by every request for the cache: Synchronization's `AtomicLazyReference` is not specialized for
    /// the caller, and its `load` cost 640 instructions a request in generic metadata (callgrind; 2.4 % of a cached
    /// answer).
    private struct State {
        var cache: TokenCache?
        var record: KeyRecord?
        var key: KeyMemory?
        var lock: KeyUnavailable?
    }

    /// How often a locked keyring or an unreachable TPM is tried again, at most.
    public static let retryInterval: Duration = .seconds(1)
    private let state: Mutex<State>
    private let keys: KeyVault?
    private let logger: Logger
    private let clock: any BrokerClock
    /// Calls into the key stores block (a bus round trip, the TPM, Argon2id): one at a time, on a thread of their
    /// own.
    private let queue = DispatchQueue(label: "tokenbroker.key-stores")
    private let attempts = Mutex<Attempts>(Attempts())

    /// Tries of a locked keyring or TPM at the same time: one.
    private let retries = SingleFlight<KeyStoreKind, Bool, Never>()

    private struct Attempts {
        var lastTry: Duration?
        var wrongPassphrases = 0
        var nextPassphraseAt: Duration = .zero
        /// A passphrase is being tried: another waits for its outcome (and its back-off), never runs beside it.
        var tryingPassphrase = false
    }

    /// A vault around a cache already open (tests, and caches without a key).
    public init(
        opened cache: TokenCache,
        logger: Logger = Logger(label: "tokenbroker"),
        clock: any BrokerClock = .system
    ) {
        state = Mutex(State(cache: cache))
        keys = nil
        self.logger = logger
        self.clock = clock
    }

    /// A vault over `keys`, locked until ``open(passphrase:)`` finds the key.
    public init(keys: KeyVault, logger: Logger, clock: any BrokerClock = .system) {
        state = Mutex(
            State(
                lock: KeyUnavailable(store: nil, problem: .locked("the cache is being opened"), hint: "wait a moment")
            )
        )
        self.keys = keys
        self.logger = logger
        self.clock = clock
    }

    /// The cache, when it is open.
    public var cache: TokenCache? {
        state.withLock { $0.cache }
    }

    /// Why the cache is locked; nil when it is open.
    public var lock: KeyUnavailable? {
        state.withLock { $0.lock }
    }

    /// What status shows: where the key is, what that protects against, and why the cache is locked.
    public var status: KeyStoreStatus {
        let order = (keys?.order ?? []).map(\.rawValue)
        return state.withLock { state in
            if let reason = state.lock {
                return KeyStoreStatus(
                    store: reason.store?.rawValue,
                    protection: reason.store?.protection,
                    chosen: reason.chosen,
                    order: order,
                    locked: true,
                    problem: reason.problem.description,
                    hint: reason.hint
                )
            }
            guard let record = state.record else {
                return KeyStoreStatus(store: nil, protection: "held in memory only", order: order)
            }
            return KeyStoreStatus(
                store: record.store.rawValue,
                protection: record.store.protection,
                chosen: record.chosen,
                order: order,
                warning: record.store.warning
            )
        }
    }

    /// Finds the key and opens the cache; true when this call opened it.
    ///
    /// Logs what happened, and the warning of a plain key file.
    @discardableResult
    public func open(passphrase: Passphrase? = nil) async -> Bool {
        await attempt(passphrase: passphrase) == nil && cache != nil
    }

    /// One try at the key and the cache; nil when the cache is open, else why not (a wrong passphrase as such,
    /// though the lock then says only that the passphrase is needed).
    private func attempt(passphrase: Passphrase?) async -> KeyUnavailable? {
        guard let keys, cache == nil else { return nil }
        attempts.withLock { $0.lastTry = clock.elapsed }
        let opened: KeyVault.Opened
        do {
            opened = try await onQueue { () throws(KeyUnavailable) in try keys.open(passphrase: passphrase) }
        } catch {
            var lock = error
            if error.problem == .wrongPassphrase {
                lock.problem = .locked("the cache key is wrapped with a passphrase; a wrong one was given")
                lock.hint = "run: tokenbroker unlock"
            }
            lockAndSay(lock)
            return error
        }
        for note in opened.notes { logger.notice("cache key: \(note)") }
        do {
            let cache = try await keys.location.openCache(
                key: opened.key,
                keyIsNew: opened.isNew,
                logger: logger,
                clock: clock
            )
            // An unlock and a retry may both have found the key: the first cache to open is the one, always.
            let first = state.withLock { state -> Bool in
                guard state.cache == nil else { return false }
                state = State(cache: cache, record: opened.record, key: opened.key)
                return true
            }
            guard first else { return nil }
        } catch {
            let reason = KeyUnavailable(
                store: opened.record.store,
                problem: .failed(String(describing: error)),
                hint: "see the journal; nothing was changed",
                chosen: opened.record.chosen
            )
            lockAndSay(reason)
            return reason
        }
        attempts.withLock { $0.wrongPassphrases = 0 }
        let store = opened.record.store
        logger.notice("cache open", metadata: ["key_store": "\(store.rawValue)", "protection": "\(store.protection)"])
        if let warning = store.warning { logger.warning("\(warning)") }
        return nil
    }

    /// Tries the store again when the cache is locked by one that may have come back (a keyring unlocked, a TPM
    /// reachable again) and the last try is ``retryInterval`` old; true when the cache opened.
    ///
    /// Callers at the same time share one try.
    public func retryIfDue() async -> Bool {
        guard let lock, let store = lock.store, store != .passphrase, lock.retryAfter == nil else { return false }
        let now = clock.elapsed
        let due = attempts.withLock { attempts in attempts.lastTry.map { now - $0 >= Self.retryInterval } ?? true }
        guard due else { return false }
        return await retries.run(store) { await self.open() }
    }

    /// `tokenbroker unlock`: opens a cache locked by a passphrase with `passphrase`, or asks the keyring to unlock
    /// (its own prompt, on a desktop) and tries again; true when this call opened it.
    ///
    /// Wrong passphrases are refused with a growing wait (1, 2, 4 … 300 s), during which none is tried.
    public func unlock(passphrase: Passphrase?) async throws(KeyUnavailable) -> Bool {
        guard let lock else { return false }
        if lock.store == .passphrase || passphrase != nil {
            guard let passphrase else {
                throw KeyUnavailable(store: .passphrase, problem: lock.problem, hint: "give the passphrase")
            }
            // The wait is judged and the try reserved in one step: of passphrases sent at once one is tried, and
            // the others are told to send again after a second, never tried side by side.
            let refusal = attempts.withLock { attempts -> KeyUnavailable? in
                let wait = attempts.nextPassphraseAt - clock.elapsed
                if wait > .zero {
                    return KeyUnavailable(
                        store: .passphrase,
                        problem: .wrongPassphrase,
                        hint: "wait before trying again",
                        retryAfter: Int(wait.components.seconds) + (wait.components.attoseconds > 0 ? 1 : 0)
                    )
                }
                if attempts.tryingPassphrase {
                    return KeyUnavailable(
                        store: .passphrase,
                        problem: .locked("another passphrase is being tried"),
                        hint: "try again in a second",
                        retryAfter: 1
                    )
                }
                attempts.tryingPassphrase = true
                return nil
            }
            if let refusal { throw refusal }
            defer { attempts.withLock { $0.tryingPassphrase = false } }
            let failure = await attempt(passphrase: passphrase)
            if failure == nil { return cache != nil }
            if failure?.problem == .wrongPassphrase {
                let delay = attempts.withLock { attempts in
                    attempts.wrongPassphrases += 1
                    let delay = Duration.seconds(min(1 << min(attempts.wrongPassphrases - 1, 9), 300))
                    attempts.nextPassphraseAt = clock.elapsed + delay
                    return delay
                }
                logger.warning(
                    "a wrong passphrase was given for the cache key",
                    metadata: ["next_try_in": "\(delay.components.seconds)s"]
                )
            }
            throw failure ?? self.lock
                ?? KeyUnavailable(store: .passphrase, problem: .locked("locked"), hint: "try again")
        }
        if lock.store == .secretService {
            if let problem = await onQueue({ self.keys?.askKeyringToUnlock() }) {
                logger.info("the keyring did not unlock: \(problem)")
            }
        }
        if await open() { return true }
        throw self.lock ?? lock
    }

    /// `tokenbroker key move --to kind`: moves the key of the open cache there (with `passphrase` for the
    /// passphrase store), marked as the user's choice; the status after it.
    public func move(to kind: KeyStoreKind, passphrase: Passphrase?) async throws(KeyUnavailable) -> KeyStoreStatus {
        guard let keys else {
            throw KeyUnavailable(store: nil, problem: .failed("this cache has no key store"), hint: "nothing to move")
        }
        if let lock { throw lock }
        // Read and replaced on the key stores' thread, so that two moves at once each start where the other ended.
        let moves = await onQueue { () -> Result<(from: KeyRecord, to: KeyRecord), KeyUnavailable> in
            let (record, key) = self.state.withLock { ($0.record, $0.key) }
            guard let record, let key else {
                return .failure(
                    KeyUnavailable(store: nil, problem: .failed("this cache has no key record"), hint: "restart")
                )
            }
            do throws(KeyStoreProblem) {
                let moved = try keys.move(key, from: record, to: kind, passphrase: passphrase, chosen: true)
                self.state.withLock { $0.record = moved }
                return .success((record, moved))
            } catch {
                return .failure(
                    KeyUnavailable(
                        store: kind,
                        problem: error,
                        hint: "the key stays in the \(record.store.rawValue) store; make the \(kind.rawValue) store "
                            + "reachable and move again"
                    )
                )
            }
        }
        let record = try moves.get().from
        logger.notice(
            "the cache key moved",
            metadata: [
                "from": "\(record.store.rawValue)", "to": "\(kind.rawValue)", "protection": "\(kind.protection)",
            ]
        )
        if let warning = kind.warning { logger.warning("\(warning)") }
        return status
    }

    private func lockAndSay(_ reason: KeyUnavailable) {
        let changed = state.withLock { state -> Bool in
            if let old = state.lock, old.description == reason.description { return false }
            state.lock = reason
            return true
        }
        if changed {
            logger.warning(
                "the cache is locked: \(reason.problem)",
                metadata: ["key_store": "\(reason.store?.rawValue ?? "none")", "hint": "\(reason.hint)"]
            )
        }
    }

    /// `body`'s value, computed on the key stores' thread.
    private func onQueue<Value: Sendable, Failure: Error>(
        _ body: @escaping @Sendable () throws(Failure) -> Value
    ) async throws(Failure) -> Value {
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<Value, Failure>, Never>) in
            queue.async { continuation.resume(returning: Result { () throws(Failure) in try body() }) }
        }
        return try result.get()
    }
}
