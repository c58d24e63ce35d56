import BrokerProtocol
public import BrokerTime
import Foundation
public import Logging
import Synchronization

/// The audit trail: which process got which kind of token, for which client id, scopes and account, and from where.
///
/// Never the token itself.
///
/// The first time a caller gets a given kind of token in a window, the line is written at once; repeats in
/// the same window are counted and written as one summary line when the window ends (or the daemon stops).
/// An app polling for its token many times a second would otherwise flood the journal (and journald's rate
/// limit would then drop lines). A window of zero writes every single issuance.
///
/// Lines are handed to an asynchronous sink, never written by the caller: a token answered on an event loop does
/// no I/O there. ``written()`` waits until every line handed over so far is out.
public final class AuditLog: Sendable {
    private let sink: AuditSink
    private let window: Duration
    private let clock: any BrokerClock
    private let state: Mutex<State>

    private struct State {
        var windowStart: Duration
        var repeats: [Issuance: Int] = [:]
    }

    /// Who got what: everything an audit line says.
    struct Issuance: Hashable {
        let caller: Caller
        let issue: TokenIssue

        /// Hashes the issue's hash (made once), the caller's numbers, and an endpoint caller's grant and address.
        ///
        /// `==` still compares every field. Hashing the whole caller, its executable's path among them, was a quarter
        /// of what auditing a cached answer cost; its door, a string-valued enum, hashes a string too, and a process
        /// nearly always comes through one door. The grant and the address are nil but for the endpoint's callers,
        /// which have no process numbers: unhashed, every container asking for one token fell on one hash, and the
        /// window's count of repeats became a list searched end to end on each request.
        func hash(into hasher: inout Hasher) {
            hasher.combine(issue)
            hasher.combine(caller.pid)
            hasher.combine(caller.processID)
            hasher.combine(caller.grant)
            hasher.combine(caller.address)
        }
    }

    /// An audit log writing to `logger`, coalescing repeats within `window`.
    public init(
        logger: Logger,
        window: Duration = .seconds(60),
        clock: any BrokerClock = .system
    ) {
        self.sink = AuditSink(logger: logger)
        self.window = window
        self.clock = clock
        self.state = Mutex(State(windowStart: clock.elapsed))
    }

    /// What a token issuance's audit line says besides the caller and the correlation id.
    ///
    /// Hashed once: a remembered answer keeps its issue, and counting a repeat then hashes a number, not four
    /// strings. Held by reference: the count of repeats copies its key a few times per answer, and a remembered
    /// answer's issue is the very one its first issuance was counted under, which `==` sees at once.
    struct TokenIssue: Hashable, Sendable {
        private final class Fields: Sendable {
            let clientId: String
            let scopes: String
            let account: String
            let source: String
            let hash: Int

            init(clientId: String, scopes: String, account: String, source: String) {
                self.clientId = clientId
                self.scopes = scopes
                self.account = account
                self.source = source
                var hasher = Hasher()
                for field in [clientId, scopes, account, source] { hasher.combine(field) }
                hash = hasher.finalize()
            }
        }

        private let fields: Fields

        var clientId: String { fields.clientId }
        var scopes: String { fields.scopes }
        var account: String { fields.account }
        var source: String { fields.source }

        static func == (left: TokenIssue, right: TokenIssue) -> Bool {
            let (left, right) = (left.fields, right.fields)
            return left === right
                || (left.hash == right.hash && left.clientId == right.clientId && left.scopes == right.scopes
                    && left.account == right.account && left.source == right.source)
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(fields.hash)
        }

        init(clientId: String, scopes: [String], account: Account, source: TokenSource) {
            fields = Fields(
                clientId: clientId,
                scopes: scopes.joined(separator: " "),
                account: account.username.isEmpty ? account.identifier : account.username,
                source: source.rawValue
            )
        }
    }

    func tokenIssued(
        to caller: Caller,
        clientId: String,
        scopes: [String],
        account: Account,
        source: TokenSource,
        correlationId: String
    ) {
        tokenIssued(
            TokenIssue(clientId: clientId, scopes: scopes, account: account, source: source),
            to: caller,
            correlationId: correlationId
        )
    }

    func tokenIssued(_ issue: TokenIssue, to caller: Caller, correlationId: String) {
        let issuance = Issuance(caller: caller, issue: issue)
        guard window > .zero else { return write(issuance, correlationId: correlationId, repeats: nil) }
        let instant = clock.elapsed
        let (isFirst, summaries) = state.withLock { state -> (Bool, [Issuance: Int]) in
            var summaries: [Issuance: Int] = [:]
            if instant - state.windowStart >= window {
                summaries = state.repeats.filter { $0.value > 0 }
                state.repeats.removeAll(keepingCapacity: true)
                state.windowStart = instant
            }
            // -1 for an issuance not seen in this window: its first becomes 0 repeats, and is written now.
            let repeats = { (count: inout Int) -> Int in
                count += 1
                return count
            }(&state.repeats[issuance, default: -1])
            return (repeats == 0, summaries)
        }
        for (repeated, count) in summaries { write(repeated, correlationId: nil, repeats: count) }
        if isFirst { write(issuance, correlationId: correlationId, repeats: nil) }
    }

    /// Waits until every line handed over so far has been written.
    public func written() async {
        await sink.written()
    }

    /// Writes the summary lines of the current window (at shutdown, or from a timer).
    public func flush() {
        let summaries = state.withLock { state -> [Issuance: Int] in
            let summaries = state.repeats.filter { $0.value > 0 }
            state.repeats.removeAll(keepingCapacity: true)
            state.windowStart = clock.elapsed
            return summaries
        }
        for (issuance, count) in summaries { write(issuance, correlationId: nil, repeats: count) }
    }

    private func write(_ issuance: Issuance, correlationId: String?, repeats: Int?) {
        var metadata = CallerFields(issuance.caller).metadata
        metadata["client_id"] = "\(issuance.issue.clientId)"
        metadata["scopes"] = "\(issuance.issue.scopes)"
        metadata["account"] = "\(issuance.issue.account)"
        metadata["source"] = "\(issuance.issue.source)"
        if let correlationId { metadata["correlation_id"] = "\(correlationId)" }
        if let repeats {
            metadata["repeats"] = "\(repeats)"
            sink.send("token issued again (repeats in the last audit window)", metadata)
        } else {
            sink.send("token issued", metadata)
        }
    }

    func cacheMoved(_ what: String, by caller: Caller, format: CacheFormat, counts: EntryCounts, correlationId: String)
    {
        sink.send(
            "cache \(what)",
            CallerFields(caller).metadata.merging([
                "format": "\(format.rawValue)",
                "entries": "\(counts.total)",
                "correlation_id": "\(correlationId)",
            ]) { _, new in new }
        )
    }

    func grantChanged(_ what: String, by caller: Caller, grant: GrantRecord, correlationId: String) {
        sink.send(
            "grant \(what)",
            CallerFields(caller).metadata.merging([
                "grant_id": "\(grant.id)",
                "grant_label": "\(grant.label)",
                "client_id": "\(grant.clientId)",
                "account": "\(grant.username ?? grant.accountIdentifier)",
                "scopes": "\((grant.resources + grant.scopes).joined(separator: " "))",
                "expires_at": "\(grant.expiresAt)",
                "listen": "\(grant.listen)",
                "correlation_id": "\(correlationId)",
            ]) { _, new in new }
        )
    }

    func cacheKeyChanged(_ what: String, by caller: Caller, store: String, correlationId: String?) {
        sink.send(
            "cache key \(what)",
            CallerFields(caller).metadata.merging([
                "key_store": "\(store)",
                "correlation_id": "\(correlationId ?? "none")",
            ]) { _, new in new }
        )
    }

    func accessTokenDiscarded(by caller: Caller, clientId: String, correlationId: String) {
        sink.send(
            "access token discarded",
            CallerFields(caller).metadata.merging([
                "client_id": "\(clientId)",
                "correlation_id": "\(correlationId)",
            ]) { _, new in new }
        )
    }

    func accountRemoved(by caller: Caller, account: String, clientId: String?, removed: Int, correlationId: String) {
        sink.send(
            "account removed",
            CallerFields(caller).metadata.merging([
                "account": "\(account)",
                "client_id": "\(clientId ?? "all")",
                "removed_credentials": "\(removed)",
                "correlation_id": "\(correlationId)",
            ]) { _, new in new }
        )
    }
}

/// Who the caller is, as every audit line names it.
struct CallerFields: Hashable {
    let pid: String
    let process: String
    let executable: String
    let via: Caller.FrontEnd
    let grant: String?
    let address: String?

    init(_ caller: Caller) {
        pid = caller.pidText
        process = caller.processID.map(String.init) ?? "unknown"
        executable = caller.executable ?? "unknown"
        via = caller.via
        grant = caller.grant
        address = caller.address
    }

    var metadata: Logger.Metadata {
        var metadata: Logger.Metadata = [
            "caller_pid": "\(pid)", "caller_process": "\(process)", "caller_exe": "\(executable)",
            "caller_via": "\(via.rawValue)",
        ]
        if let grant { metadata["caller_grant"] = "\(grant)" }
        if let address { metadata["caller_address"] = "\(address)" }
        return metadata
    }
}

/// Writes audit lines on a task of its own, in order; callers only append to a queue.
private final class AuditSink: Sendable {
    private struct Line {
        let message: Logger.Message
        let metadata: Logger.Metadata
    }

    private struct State {
        var lines: [Line] = []
        var draining = false
        var dropped = 0
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    /// Lines queued at most: beyond it (the journal stalled), lines are counted and the count is written instead.
    private static let capacity = 65_536
    private let logger: Logger
    private let state = Mutex(State())

    init(logger: Logger) {
        self.logger = logger
    }

    func send(_ message: Logger.Message, _ metadata: Logger.Metadata) {
        let startDrain = state.withLock { state -> Bool in
            if state.lines.count < Self.capacity {
                state.lines.append(Line(message: message, metadata: metadata))
            } else {
                state.dropped += 1
            }
            guard !state.draining else { return false }
            state.draining = true
            return true
        }
        if startDrain { Task.detached(priority: .utility) { self.drain() } }
    }

    func written() async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                guard state.draining else { return true }
                state.waiters.append(waiter)
                return false
            }
            if done { waiter.resume() }
        }
    }

    private func drain() {
        while true {
            let (lines, dropped, waiters) = state.withLock {
                state -> ([Line], Int, [CheckedContinuation<Void, Never>]) in
                let lines = state.lines
                let dropped = state.dropped
                state.lines.removeAll(keepingCapacity: true)
                state.dropped = 0
                guard lines.isEmpty, dropped == 0 else { return (lines, dropped, []) }
                state.draining = false
                defer { state.waiters.removeAll() }
                return ([], 0, state.waiters)
            }
            if lines.isEmpty, dropped == 0 {
                for waiter in waiters { waiter.resume() }
                return
            }
            for line in lines { logger.notice(line.message, metadata: line.metadata) }
            if dropped > 0 {
                logger.warning("audit lines dropped: the journal did not keep up", metadata: ["dropped": "\(dropped)"])
            }
        }
    }
}
