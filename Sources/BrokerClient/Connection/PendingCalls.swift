import BrokerProtocol
import NIOCore
import Synchronization

/// Calls waiting for their responses, and listeners for notifications; shared by callers and the channel.
final class PendingCalls: Sendable {
    private struct Pending: Sendable {
        let resultType: any (Decodable & Sendable).Type
        let promise: EventLoopPromise<any Sendable>
    }

    private struct State {
        var nextID: Int64 = 1
        var calls: [RequestID: Pending] = [:]
        /// Calls whose caller stopped waiting while the broker still works on them: each holds its slot until the
        /// broker's answer (or the connection's end) comes.
        var abandoned: Set<RequestID> = []
        var listeners: [String: @Sendable (ServerNotification) -> Void] = [:]
        var closedError: BrokerError?
    }

    private let state = Mutex(State())
    /// The requests the broker takes at once on this connection: a slot is taken before a call is registered and
    /// given back when the broker is done with it, not when its caller stops waiting.
    let slots = CallSlots(WireProtocol.maximumRequestsInFlight)

    /// Registers a call; nil once the connection is closed (with the reason).
    func register(
        resultType: any (Decodable & Sendable).Type,
        promise: EventLoopPromise<any Sendable>
    ) -> Result<RequestID, BrokerError> {
        state.withLock { state in
            if let error = state.closedError { return .failure(error) }
            let id = RequestID.number(state.nextID)
            state.nextID += 1
            state.calls[id] = Pending(resultType: resultType, promise: promise)
            return .success(id)
        }
    }

    func resultType(for id: RequestID) -> (any (Decodable & Sendable).Type)? {
        state.withLock { $0.calls[id]?.resultType }
    }

    /// The broker's answer to `id` (or why it will never come): the caller gets it, and the call's slot is free.
    func complete(_ id: RequestID, with result: Result<any Sendable, BrokerError>) {
        let (pending, wasAbandoned) = state.withLock { state in
            (state.calls.removeValue(forKey: id), state.abandoned.remove(id) != nil)
        }
        if pending != nil || wasAbandoned { slots.release() }
        guard let pending else { return }
        switch result {
        case .success(let value): pending.promise.succeed(value)
        case .failure(let error): pending.promise.fail(error)
        }
    }

    /// The caller of `id` stops waiting (its task was cancelled) and gets `error`; the broker may still be working on
    /// the request, so its slot stays taken until the answer comes.
    func abandon(_ id: RequestID, with error: BrokerError) {
        let pending = state.withLock { state -> Pending? in
            guard let pending = state.calls.removeValue(forKey: id) else { return nil }
            state.abandoned.insert(id)
            return pending
        }
        pending?.promise.fail(error)
    }

    /// Fails every waiting call and refuses new ones; every slot is free.
    func closeAll(_ error: BrokerError) {
        let (calls, held) = state.withLock { state -> ([Pending], Int) in
            if state.closedError == nil { state.closedError = error }
            defer {
                state.calls.removeAll()
                state.abandoned.removeAll()
            }
            return (Array(state.calls.values), state.calls.count + state.abandoned.count)
        }
        for _ in 0..<held { slots.release() }
        for call in calls { call.promise.fail(error) }
    }

    func listen(to correlationId: String, _ listener: @escaping @Sendable (ServerNotification) -> Void) {
        state.withLock { $0.listeners[correlationId] = listener }
    }

    func stopListening(to correlationId: String) {
        state.withLock { _ = $0.listeners.removeValue(forKey: correlationId) }
    }

    func deliver(_ notification: ServerNotification) {
        guard let correlationId = notification.correlationId,
            let listener = state.withLock({ $0.listeners[correlationId] })
        else { return }
        listener(notification)
    }
}
