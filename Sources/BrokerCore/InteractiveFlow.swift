import BrokerOAuth
public import BrokerProtocol
import BrokerTime
import Synchronization

/// The connection a request came on: where the notifications of its sign-in go, whose close cancels it, and
/// when its own answer is on its way.
public struct FlowOwner: Sendable {
    /// Identifies the connection (unique while the server runs).
    public let connection: UInt64
    /// Sends a notification to the caller; returns once it is written (or the connection is gone), so
    /// notifications keep their order and come before the response.
    public let notify: @Sendable (ServerNotification) async -> Void
    /// Opens once this request's answer is queued on the connection: what the caller must see after the answer
    /// waits for it.
    public let answer: AnswerGate

    /// Creates an owner whose requests' answers need no ordering (``AnswerGate/opened``).
    public init(connection: UInt64, notify: @escaping @Sendable (ServerNotification) async -> Void) {
        self.init(connection: connection, notify: notify, answer: .opened)
    }

    private init(connection: UInt64, notify: @escaping @Sendable (ServerNotification) async -> Void, answer: AnswerGate)
    {
        self.connection = connection
        self.notify = notify
        self.answer = answer
    }

    /// The same connection, for one request whose answer opens `gate`.
    public func answering(through gate: AnswerGate) -> FlowOwner {
        FlowOwner(connection: connection, notify: notify, answer: gate)
    }

    /// No connection: for callers that take no notifications (a request made inside the broker, a front end
    /// without them).
    public static let none = FlowOwner(connection: 0) { _ in }
}

/// Work held back until a request's answer is queued on its connection.
///
/// `completeInteractiveFlow` resumes a sign-in that at once notifies `webAuth/didComplete` on the connection it
/// came on; Protocol §10.3 step 4 puts the answer first. The resumption waits here until the front end has queued
/// the answer, so the two writes cannot race.
public final class AnswerGate: Sendable {
    private let state: Mutex<(isOpen: Bool, held: [@Sendable () -> Void])>

    /// A closed gate, for one request.
    public convenience init() {
        self.init(isOpen: false)
    }

    private init(isOpen: Bool) {
        state = Mutex((isOpen, []))
    }

    /// Always open: for front ends whose answers and notifications do not share one ordered stream.
    public static let opened = AnswerGate(isOpen: true)

    /// Runs `work` once the gate opens (at once when it is open).
    func afterAnswer(_ work: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { state -> Bool in
            if !state.isOpen { state.held.append(work) }
            return state.isOpen
        }
        if runNow { work() }
    }

    /// The answer is queued (or there is none): runs the work held back, in order.
    public func open() {
        let held = state.withLock { state -> [@Sendable () -> Void] in
            state.isOpen = true
            defer { state.held = [] }
            return state.held
        }
        for work in held { work() }
    }

    /// How many pieces of work wait for the answer.
    var heldCount: Int {
        state.withLock { $0.held.count }
    }
}

/// Why an interactive sign-in was stopped before it finished.
public enum FlowCancellation: Sendable, Hashable {
    /// The app canceled it (`cancelInteractiveFlow`), or its connection closed: answered `user_canceled`.
    case byClient
    /// The broker is stopping: answered `broker_stopping`, so the app retries rather than think the user said no.
    case brokerStopping
}

/// One running interactive sign-in, as `completeInteractiveFlow` and `cancelInteractiveFlow` find it.
///
/// A state machine: ``Phase`` says where the sign-in is, and every event (the grant made, a redirect, the app's
/// URL, a cancel, the end) moves it under one lock. The redirect is judged once, when it arrives; the sign-in then
/// redeems the code that judgement kept.
final class InteractiveFlow: Sendable {
    /// Where a sign-in is.
    enum Phase {
        /// Started: discovery, the loopback listener; no authorization request yet.
        case starting
        /// The authorization request is out: waiting for the provider's redirect to this grant.
        case waitingForRedirect(AuthorizationCodeGrant)
        /// The redirect came and is this flow's: its code (or the provider's error), redeemed now.
        case completing(Result<Secret, OAuthError>)
        /// Over: answered or failed.
        case done
        /// Stopped before a redirect came.
        case canceled(FlowCancellation)
    }

    let correlationId: String
    let owner: FlowOwner
    let webviewType: WebviewType
    private let state = Mutex<State>(State())
    /// For `embedded`: signals that the app handed back this flow's redirect.
    private let responses: AsyncStream<Void>
    private let responseSink: AsyncStream<Void>.Continuation
    /// The browser the sign-in started, once it did; finished without one when the flow shows no browser or ends.
    private let browsers: AsyncStream<LaunchedBrowser>
    private let browserSink: AsyncStream<LaunchedBrowser>.Continuation
    /// The cancel, when it comes before a redirect: one of the events the sign-in races.
    private let cancellations: AsyncStream<FlowCancellation>
    private let cancellationSink: AsyncStream<FlowCancellation>.Continuation

    private struct State {
        var phase = Phase.starting
        var notified = false
    }

    init(correlationId: String, owner: FlowOwner, webviewType: WebviewType) {
        self.correlationId = correlationId
        self.owner = owner
        self.webviewType = webviewType
        (responses, responseSink) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        (browsers, browserSink) = AsyncStream.makeStream(of: LaunchedBrowser.self, bufferingPolicy: .bufferingNewest(1))
        (cancellations, cancellationSink) = AsyncStream.makeStream(
            of: FlowCancellation.self,
            bufferingPolicy: .bufferingNewest(1)
        )
        switch webviewType {
        case .systemBrowser, .customBrowser, .default: break
        case .embedded, .deviceCode: browserSink.finish()
        }
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

    /// The authorization request is out: the flow now waits for the redirect to `grant`.
    func attach(_ grant: AuthorizationCodeGrant) {
        state.withLock { state in
            if case .starting = state.phase { state.phase = .waitingForRedirect(grant) }
        }
    }

    /// Judges a redirect that reached the loopback listener: this flow's (kept, with its code or error) or not.
    func judge(redirect url: String) -> RedirectVerdict {
        state.withLock { state in
            switch Self.accept(url, in: &state) {
            case .accepted(let outcome): .accept(succeeded: (try? outcome.get()) != nil)
            case .notOurs(let reason): .reject(reason)
            }
        }
    }

    /// `completeInteractiveFlow`: takes the app's redirect URL; the sign-in resumes once `answer` opens.
    ///
    /// - Returns: false when the flow is not `embedded` or no longer waits.
    /// - Throws: `invalid_params` when the URL is not this flow's redirect (other target, wrong `state`); the flow
    ///   keeps waiting.
    func complete(with responseUrl: Secret, after answer: AnswerGate) throws(BrokerFailure) -> Bool {
        let verdict = state.withLock { state -> Acceptance? in
            guard webviewType == .embedded, case .waitingForRedirect = state.phase else { return nil }
            return Self.accept(responseUrl.reveal(), in: &state)
        }
        switch verdict {
        case nil:
            return false
        case .notOurs(let reason)?:
            throw BrokerFailure.invalidParams(
                ParamField(CompleteInteractiveFlowParams.CodingKeys.responseUrl),
                "\(reason); the flow keeps waiting"
            )
        case .accepted?:
            let sink = responseSink
            answer.afterAnswer {
                sink.yield()
                sink.finish()
            }
            return true
        }
    }

    private enum Acceptance {
        case accepted(Result<Secret, OAuthError>)
        case notOurs(String)
    }

    /// The one judgement of a redirect: while waiting, a redirect of this grant moves the flow to completing.
    private static func accept(_ url: String, in state: inout State) -> Acceptance {
        guard case .waitingForRedirect(let grant) = state.phase else {
            if case .starting = state.phase { return .notOurs("the sign-in is not ready") }
            return .notOurs("the sign-in is no longer waiting for a redirect")
        }
        let outcome: Result<Secret, OAuthError>
        do throws(RedirectOutcomeError) {
            outcome = .success(try grant.code(from: url))
        } catch {
            switch error {
            case .notOurs(let rejection): return .notOurs(rejection.reason)
            case .failed(let failure): outcome = .failure(failure)
            }
        }
        state.phase = .completing(outcome)
        return .accepted(outcome)
    }

    /// The code the accepted redirect carried; the provider's error when it carried one instead.
    func acceptedCode() throws(BrokerFailure) -> Secret {
        let phase = state.withLock { $0.phase }
        guard case .completing(let outcome) = phase else {
            throw BrokerFailure(.userCanceled, "the sign-in was canceled")
        }
        do throws(OAuthError) {
            return try outcome.get()
        } catch {
            throw BrokerFailure(oauth: error, correlationId: correlationId)
        }
    }

    /// Stops the flow while it waits (the sign-in's race hears it, ``canceled()``); false once a redirect came (its
    /// code is redeemed and stored whatever happens to the request) or the flow ended.
    @discardableResult
    func cancel(_ reason: FlowCancellation = .byClient) -> Bool {
        let canceled = state.withLock { state -> Bool in
            switch state.phase {
            case .starting, .waitingForRedirect:
                state.phase = .canceled(reason)
                return true
            case .completing, .done, .canceled:
                return false
            }
        }
        guard canceled else { return false }
        cancellationSink.yield(reason)
        cancellationSink.finish()
        responseSink.finish()
        browserSink.finish()
        return true
    }

    /// Waits for ``cancel(_:)``: its reason; nil when the flow ended without one.
    func canceled() async -> FlowCancellation? {
        var iterator = cancellations.makeAsyncIterator()
        return await iterator.next()
    }

    /// Why `cancel()` was called, if it was.
    var cancellation: FlowCancellation? {
        state.withLock { state in
            if case .canceled(let reason) = state.phase { return reason }
            return nil
        }
    }

    /// Marks the flow done: `completeInteractiveFlow` and `cancelInteractiveFlow` no longer find work.
    func finish() {
        state.withLock { state in
            if case .canceled = state.phase { return }
            state.phase = .done
        }
        responseSink.finish()
        browserSink.finish()
        cancellationSink.finish()
    }

    /// The sign-in started `browser`: its exit is now one of the events the flow races.
    func launched(_ browser: LaunchedBrowser) {
        browserSink.yield(browser)
        browserSink.finish()
    }

    /// Waits for the browser the sign-in starts; nil when it starts none (or the flow ends first).
    func launchedBrowser() async -> LaunchedBrowser? {
        var iterator = browsers.makeAsyncIterator()
        return await iterator.next()
    }

    /// Waits until the app hands back this flow's redirect (``complete(with:after:)``); false when canceled.
    func embeddedResponse() async -> Bool {
        var iterator = responses.makeAsyncIterator()
        return await iterator.next() != nil
    }
}

/// The interactive sign-ins running now, by correlation id.
final class FlowRegistry: Sendable {
    private let flows = Mutex<[String: InteractiveFlow]>([:])
    /// Each sign-in runs in a task of its own: the request that started it may go away (its connection closed),
    /// but once the redirect came, the code is redeemed and the tokens stored all the same.
    private let running = SingleFlight<String, Result<TokenResult, BrokerFailure>, Never>()

    /// Runs `signIn` for `flow` to its end, whatever happens to the caller's task; a cancel of the caller cancels
    /// the flow (which its sign-in's race hears), not the task.
    func run(
        _ flow: InteractiveFlow,
        _ signIn: @escaping @Sendable () async -> Result<TokenResult, BrokerFailure>
    ) async -> Result<TokenResult, BrokerFailure> {
        await withTaskCancellationHandler {
            await running.run(flow.correlationId, signIn)
        } onCancel: {
            flow.cancel()
        }
    }

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

    /// Whether none runs.
    var isEmpty: Bool {
        flows.withLock { $0.isEmpty }
    }
}
