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
        var listeners: [String: @Sendable (ServerNotification) -> Void] = [:]
        var closedError: BrokerError?
    }

    private let state = Mutex(State())

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

    func complete(_ id: RequestID, with result: Result<any Sendable, BrokerError>) {
        guard let pending = state.withLock({ $0.calls.removeValue(forKey: id) }) else { return }
        switch result {
        case .success(let value): pending.promise.succeed(value)
        case .failure(let error): pending.promise.fail(error)
        }
    }

    /// Fails every waiting call and refuses new ones.
    func closeAll(_ error: BrokerError) {
        let calls = state.withLock { state -> [Pending] in
            if state.closedError == nil { state.closedError = error }
            defer { state.calls.removeAll() }
            return Array(state.calls.values)
        }
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
