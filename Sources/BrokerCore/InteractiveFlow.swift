import BrokerOAuth
public import BrokerProtocol
import Synchronization

/// The connection an interactive request came on: where its notifications go, and whose close cancels it.
public struct FlowOwner: Sendable {
    /// Identifies the connection (unique while the server runs).
    public let connection: UInt64
    /// Sends a notification to the caller; returns once it is written (or the connection is gone), so
    /// notifications keep their order and come before the response.
    public let notify: @Sendable (ServerNotification) async -> Void

    /// Creates an owner.
    public init(connection: UInt64, notify: @escaping @Sendable (ServerNotification) async -> Void) {
        self.connection = connection
        self.notify = notify
    }

    /// No connection: for callers that take no notifications (a request made inside the broker, a front end
    /// without them).
    public static let none = FlowOwner(connection: 0) { _ in }
}

/// Why an interactive sign-in was stopped before it finished.
public enum FlowCancellation: Sendable, Hashable {
    /// The app canceled it (`cancelInteractiveFlow`), or its connection closed: answered `user_canceled`.
    case byClient
    /// The broker is stopping: answered `broker_stopping`, so the app retries rather than think the user said no.
    case brokerStopping
}

/// One running interactive sign-in, as `completeInteractiveFlow` and `cancelInteractiveFlow` find it.
final class InteractiveFlow: Sendable {
    let correlationId: String
    let owner: FlowOwner
    let webviewType: WebviewType
    private let state = Mutex<State>(State())
    /// For `embedded`: the redirect URL the app hands back.
    private let responses: AsyncStream<Secret>
    private let responseSink: AsyncStream<Secret>.Continuation

    private struct State {
        var grant: AuthorizationCodeGrant?
        var completed = false
        var canceled: FlowCancellation?
        var cancel: (@Sendable () -> Void)?
        var notified = false
    }

    init(correlationId: String, owner: FlowOwner, webviewType: WebviewType) {
        self.correlationId = correlationId
        self.owner = owner
        self.webviewType = webviewType
        (responses, responseSink) = AsyncStream.makeStream(of: Secret.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Sends a notification to the owner; remembers that one went out (failures then also notify).
    func notify(_ notification: ServerNotification) async {
        state.withLock { $0.notified = true }
        await owner.notify(notification)
    }

    /// Whether any notification was sent.
    var hasNotified: Bool {
        state.withLock { $0.notified }
    }

    /// The authorization code grant the flow waits on (browser and embedded types).
    func attach(_ grant: AuthorizationCodeGrant) {
        state.withLock { $0.grant = grant }
    }

    /// Whether a redirect that reached the loopback listener is this flow's.
    func judge(redirect url: String) -> RedirectVerdict {
        guard let grant = state.withLock({ $0.grant }) else { return .reject("the sign-in is not ready") }
        do throws(RedirectOutcomeError) {
            _ = try grant.code(from: url)
            return .accept(succeeded: true)
        } catch {
            switch error {
            case .notOurs(let rejection): return .reject(rejection.reason)
            case .failed: return .accept(succeeded: false)
            }
        }
    }

    /// How to stop the flow's task.
    func onCancel(_ cancel: @escaping @Sendable () -> Void) {
        let canceledAlready = state.withLock { state -> Bool in
            state.cancel = cancel
            return state.canceled != nil
        }
        if canceledAlready { cancel() }
    }

    /// Stops the flow; false when it had already finished.
    @discardableResult
    func cancel(_ reason: FlowCancellation = .byClient) -> Bool {
        let cancel = state.withLock { state -> (@Sendable () -> Void)?? in
            guard !state.completed, state.canceled == nil else { return nil }
            state.canceled = reason
            return .some(state.cancel)
        }
        guard let cancel else { return false }
        cancel?()
        responseSink.finish()
        return true
    }

    /// Why `cancel()` was called, if it was.
    var cancellation: FlowCancellation? {
        state.withLock { $0.canceled }
    }

    /// `completeInteractiveFlow`: takes the app's redirect URL.
    ///
    /// - Returns: false when the flow is not `embedded` or no longer waits.
    /// - Throws: `invalid_params` when the URL is not this flow's redirect (other target, wrong `state`); the flow
    ///   keeps waiting.
    func complete(with responseUrl: Secret) throws(BrokerFailure) -> Bool {
        try state.withLock { state throws(BrokerFailure) -> Bool in
            guard webviewType == .embedded, let grant = state.grant, !state.completed, state.canceled == nil else {
                return false
            }
            do throws(RedirectOutcomeError) {
                _ = try grant.code(from: responseUrl.reveal())
            } catch {
                if case .notOurs(let rejection) = error {
                    throw BrokerFailure.invalidParams(
                        ParamField(CompleteInteractiveFlowParams.CodingKeys.responseUrl),
                        "\(rejection.reason); the flow keeps waiting"
                    )
                }
            }
            state.completed = true
            responseSink.yield(responseUrl)
            responseSink.finish()
            return true
        }
    }

    /// Marks the flow done: `completeInteractiveFlow` and `cancelInteractiveFlow` no longer find work.
    func finish() {
        state.withLock { $0.completed = true }
        responseSink.finish()
    }

    /// Waits for the URL handed to ``complete(with:)``; nil when canceled.
    func embeddedResponse() async -> Secret? {
        var iterator = responses.makeAsyncIterator()
        return await iterator.next()
    }
}

/// The interactive sign-ins running now, by correlation id.
final class FlowRegistry: Sendable {
    private let flows = Mutex<[String: InteractiveFlow]>([:])

    /// Records `flow`; refuses a second flow with the same correlation id.
    func register(_ flow: InteractiveFlow) throws(BrokerFailure) {
        let taken = flows.withLock { flows -> Bool in
            guard flows[flow.correlationId] == nil else { return true }
            flows[flow.correlationId] = flow
            return false
        }
        if taken {
            throw BrokerFailure.invalidParams(
                ParamField(AcquireTokenInteractivelyParams.CodingKeys.correlationId),
                "an interactive sign-in with this id is running"
            )
        }
    }

    /// Forgets `flow` (not a newer flow of the same id).
    func unregister(_ flow: InteractiveFlow) {
        flows.withLock { flows in
            if flows[flow.correlationId] === flow { flows[flow.correlationId] = nil }
        }
    }

    /// The flow with this correlation id, if it runs.
    func flow(_ correlationId: String) -> InteractiveFlow? {
        flows.withLock { $0[correlationId] }
    }

    /// The flows a connection started.
    func flows(ownedBy connection: UInt64) -> [InteractiveFlow] {
        flows.withLock { $0.values.filter { $0.owner.connection == connection } }
    }

    /// How many run.
    var count: Int {
        flows.withLock { $0.count }
    }
}
