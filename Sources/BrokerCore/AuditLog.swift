import BrokerProtocol
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
public final class AuditLog: Sendable {
    private let logger: Logger
    private let window: Duration
    private let now: @Sendable () -> ContinuousClock.Instant
    private let state: Mutex<State>

    private struct State {
        var windowStart: ContinuousClock.Instant
        var repeats: [Issuance: Int] = [:]
    }

    /// Who got what: everything an audit line says.
    struct Issuance: Hashable {
        let pid: String
        let process: String
        let executable: String
        let clientId: String
        let scopes: String
        let account: String
        let source: String
    }

    /// An audit log writing to `logger`, coalescing repeats within `window`.
    public init(
        logger: Logger,
        window: Duration = .seconds(60),
        now: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }
    ) {
        self.logger = logger
        self.window = window
        self.now = now
        self.state = Mutex(State(windowStart: now()))
    }

    func tokenIssued(
        to caller: Caller,
        clientId: String,
        scopes: [String],
        account: Account,
        source: TokenSource,
        correlationId: String
    ) {
        let issuance = Issuance(
            pid: caller.pidText,
            process: caller.processID.map(String.init) ?? "unknown",
            executable: caller.executable ?? "unknown",
            clientId: clientId,
            scopes: scopes.joined(separator: " "),
            account: account.username.isEmpty ? account.identifier : account.username,
            source: source.rawValue
        )
        guard window > .zero else { return write(issuance, correlationId: correlationId, repeats: nil) }
        let instant = now()
        let (isFirst, summaries) = state.withLock { state -> (Bool, [Issuance: Int]) in
            var summaries: [Issuance: Int] = [:]
            if instant - state.windowStart >= window {
                summaries = state.repeats.filter { $0.value > 0 }
                state.repeats.removeAll(keepingCapacity: true)
                state.windowStart = instant
            }
            if let count = state.repeats[issuance] {
                state.repeats[issuance] = count + 1
                return (false, summaries)
            }
            state.repeats[issuance] = 0
            return (true, summaries)
        }
        for (repeated, count) in summaries { write(repeated, correlationId: nil, repeats: count) }
        if isFirst { write(issuance, correlationId: correlationId, repeats: nil) }
    }

    /// Writes the summary lines of the current window (at shutdown, or from a timer).
    public func flush() {
        let summaries = state.withLock { state -> [Issuance: Int] in
            let summaries = state.repeats.filter { $0.value > 0 }
            state.repeats.removeAll(keepingCapacity: true)
            state.windowStart = now()
            return summaries
        }
        for (issuance, count) in summaries { write(issuance, correlationId: nil, repeats: count) }
    }

    private func write(_ issuance: Issuance, correlationId: String?, repeats: Int?) {
        var metadata: Logger.Metadata = [
            "caller_pid": "\(issuance.pid)",
            "caller_process": "\(issuance.process)",
            "caller_exe": "\(issuance.executable)",
            "client_id": "\(issuance.clientId)",
            "scopes": "\(issuance.scopes)",
            "account": "\(issuance.account)",
            "source": "\(issuance.source)",
        ]
        if let correlationId { metadata["correlation_id"] = "\(correlationId)" }
        if let repeats {
            metadata["repeats"] = "\(repeats)"
            logger.notice("token issued again (repeats in the last audit window)", metadata: metadata)
        } else {
            logger.notice("token issued", metadata: metadata)
        }
    }

    func cacheMoved(_ what: String, by caller: Caller, format: CacheFormat, counts: EntryCounts, correlationId: String)
    {
        logger.notice(
            "cache \(what)",
            metadata: [
                "caller_pid": "\(caller.pidText)",
                "caller_process": "\(caller.processID.map(String.init) ?? "unknown")",
                "caller_exe": "\(caller.executable ?? "unknown")",
                "format": "\(format.rawValue)",
                "entries": "\(counts.total)",
                "correlation_id": "\(correlationId)",
            ]
        )
    }

    func accountRemoved(by caller: Caller, account: String, clientId: String?, removed: Int, correlationId: String) {
        logger.notice(
            "account removed",
            metadata: [
                "caller_pid": "\(caller.pidText)",
                "caller_process": "\(caller.processID.map(String.init) ?? "unknown")",
                "caller_exe": "\(caller.executable ?? "unknown")",
                "account": "\(account)",
                "client_id": "\(clientId ?? "all")",
                "removed_credentials": "\(removed)",
                "correlation_id": "\(correlationId)",
            ]
        )
    }
}
