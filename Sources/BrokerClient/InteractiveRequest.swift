public import BrokerProtocol
import Glibc

/// An interactive token request: what MSAL calls `MSALInteractiveTokenParameters`.
public struct InteractiveRequest: Sendable, Hashable {
    /// The app's client id.
    public var clientId: String
    /// The scopes wanted (`openid profile offline_access` are added by the broker).
    public var scopes: [String]
    /// An ADAL v1 resource, asked for as `<resource>/.default`.
    public var resource: String?
    /// The authority; default `https://login.microsoftonline.com/common`.
    public var authority: String?
    /// How the sign-in is shown (MSAL's `webviewType`).
    public var webviewType: WebviewType
    /// For ``WebviewType/customBrowser``: the name of a browser profile of the user's configuration.
    ///
    /// Profiles are `browser.<name> = <command>` lines in `tokenbrokerd.conf`; an app never names a program for the
    /// broker to run.
    public var browserProfile: String?
    /// The account to sign in again; when its tokens already answer, no sign-in is shown.
    public var account: AccountSelector?
    /// `login`, `select_account`, `consent`, `none`, `create`.
    public var prompt: String?
    /// The username to pre-fill.
    public var loginHint: String?
    /// Entra ID's home-realm hint.
    public var domainHint: String?
    /// More query parameters for the authorization URL.
    public var extraQueryParameters: [String: String]
    /// The app's redirect URI: required for ``WebviewType/embedded``; for the browser types, a loopback URI
    /// (`http://localhost/…`) whose host and path the broker's listener then uses.
    public var redirectUri: String?
    /// A claims request (JSON).
    public var claims: String?
    /// Give up after this long (the broker's default is 5 minutes).
    public var timeout: Duration?
    /// The graphical-session variables the browser needs; by default this process's.
    public var environment: [String: String]
    /// Names the flow in notifications, `complete` and `cancel`.
    public var correlationId: String

    /// Creates a request; a correlation id is generated, and this process's session variables are forwarded.
    public init(
        clientId: String,
        scopes: [String],
        resource: String? = nil,
        authority: String? = nil,
        webviewType: WebviewType = .default,
        browserProfile: String? = nil,
        account: AccountSelector? = nil,
        prompt: String? = nil,
        loginHint: String? = nil,
        domainHint: String? = nil,
        extraQueryParameters: [String: String] = [:],
        redirectUri: String? = nil,
        claims: String? = nil,
        timeout: Duration? = nil,
        environment: [String: String] = InteractiveRequest.sessionEnvironment(),
        correlationId: String = WireProtocol.newCorrelationId()
    ) {
        self.clientId = clientId
        self.scopes = scopes
        self.resource = resource
        self.authority = authority
        self.webviewType = webviewType
        self.browserProfile = browserProfile
        self.account = account
        self.prompt = prompt
        self.loginHint = loginHint
        self.domainHint = domainHint
        self.extraQueryParameters = extraQueryParameters
        self.redirectUri = redirectUri
        self.claims = claims
        self.timeout = timeout
        self.environment = environment
        self.correlationId = correlationId
    }

    /// The variables of this process that say where its display is, so the browser appears there: the broker
    /// takes these and nothing else from a client.
    public static let sessionVariables = [
        "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_SESSION_TYPE", "XDG_CURRENT_DESKTOP",
    ]

    /// This process's values of ``sessionVariables``.
    public static func sessionEnvironment() -> [String: String] {
        var environment: [String: String] = [:]
        for name in sessionVariables {
            if let value = getenv(name).map({ String(cString: $0) }) { environment[name] = value }
        }
        return environment
    }

    /// The wire form.
    var params: AcquireTokenInteractivelyParams {
        AcquireTokenInteractivelyParams(
            authParameters: AuthParameters(
                clientId: clientId,
                authority: authority,
                requestedScopes: scopes.isEmpty ? nil : scopes,
                resource: resource,
                account: account,
                redirectUri: redirectUri,
                decodedClaims: claims,
                prompt: prompt,
                loginHint: loginHint,
                domainHint: domainHint,
                additionalQueryParametersForAuthorization: extraQueryParameters.isEmpty ? nil : extraQueryParameters
            ),
            webviewType: webviewType,
            browserProfile: browserProfile,
            environment: environment,
            timeoutSeconds: timeout.map { max(1, Int($0.components.seconds)) },
            correlationId: correlationId
        )
    }
}

/// What happens during an interactive sign-in, in order (the broker's notifications).
public enum InteractiveEvent: Sendable, Hashable {
    /// The sign-in page is about to load; for ``WebviewType/embedded``, load `url` in the app's web view.
    case didStartLoad(url: String)
    /// The browser was started with the URL.
    case didFinishLoad(url: String)
    /// The sign-in failed; the result throws the same error.
    case didFail(BrokerError)
    /// The redirect came back; the tokens are being fetched.
    case didComplete
    /// Show the user this device code and where to enter it.
    case deviceCode(DeviceCodeNotification)

    init?(_ notification: ServerNotification) {
        switch notification {
        case .webAuthDidStartLoad(let params): self = .didStartLoad(url: params.url)
        case .webAuthDidFinishLoad(let params): self = .didFinishLoad(url: params.url)
        case .webAuthDidFail(let params): self = .didFail(BrokerError(params.error))
        case .webAuthDidComplete: self = .didComplete
        case .deviceCodePrompt(let params): self = .deviceCode(params)
        case .unknown: return nil
        }
    }
}

/// A running interactive sign-in: its events as they come, and its result.
///
/// ```swift
/// let signIn = broker.acquireToken(InteractiveRequest(clientId: appID, scopes: ["User.Read"]))
/// for await event in signIn.events {
///     if case .deviceCode(let prompt) = event { print(prompt.message) }
/// }
/// let token = try await signIn.result()
/// ```
public final class InteractiveSignIn: Sendable {
    /// The flow's correlation id.
    public let correlationId: String
    /// The events, in order; the stream ends when the sign-in does.
    public let events: AsyncStream<InteractiveEvent>
    private let task: Task<Result<TokenResult, BrokerError>, Never>
    private let broker: Broker

    init(
        correlationId: String,
        events: AsyncStream<InteractiveEvent>,
        task: Task<Result<TokenResult, BrokerError>, Never>,
        broker: Broker
    ) {
        self.correlationId = correlationId
        self.events = events
        self.task = task
        self.broker = broker
    }

    /// The token, once the user signed in; or the reason they did not.
    public func result() async throws(BrokerError) -> TokenResult {
        try await task.value.get()
    }

    /// For ``WebviewType/embedded``: hands the broker the URL the web view was redirected to.
    ///
    /// Returns false when the flow no longer waits; throws ``BrokerError/Code/invalidRequest`` when the URL is not
    /// this flow's redirect (the flow keeps waiting).
    public func complete(responseUrl: Secret) async throws(BrokerError) -> Bool {
        try await broker.completeInteractiveFlow(correlationId: correlationId, responseUrl: responseUrl)
    }

    /// Stops the sign-in; ``result()`` then throws ``BrokerError/Code/userCanceled``.
    @discardableResult
    public func cancel() async throws(BrokerError) -> Bool {
        try await broker.cancelInteractiveFlow(correlationId: correlationId)
    }
}

extension Broker {
    /// Signs the user in as `request.webviewType` says; `onEvent` sees each step as it happens.
    ///
    /// When `request.account` already has tokens that answer, the broker returns them without showing anything.
    public func acquireToken(
        _ request: InteractiveRequest,
        onEvent: @escaping @Sendable (InteractiveEvent) -> Void
    ) async throws(BrokerError) -> TokenResult {
        let correlationId = request.correlationId
        transport.listen(to: correlationId) { notification in
            if let event = InteractiveEvent(notification) { onEvent(event) }
        }
        defer { transport.stopListening(to: correlationId) }
        return try await transport.call(Methods.AcquireTokenInteractively.self, request.params)
            .brokerTokenResponse
    }

    /// Starts an interactive sign-in; follow it through ``InteractiveSignIn/events``, end it with
    /// ``InteractiveSignIn/result()``.
    public func acquireToken(_ request: InteractiveRequest) -> InteractiveSignIn {
        let (events, sink) = AsyncStream.makeStream(of: InteractiveEvent.self)
        let task = Task { () -> Result<TokenResult, BrokerError> in
            defer { sink.finish() }
            do throws(BrokerError) {
                return .success(try await self.acquireToken(request) { sink.yield($0) })
            } catch {
                return .failure(error)
            }
        }
        return InteractiveSignIn(correlationId: request.correlationId, events: events, task: task, broker: self)
    }

    /// Hands over the redirect URL an ``WebviewType/embedded`` flow's web view reached.
    public func completeInteractiveFlow(correlationId: String, responseUrl: Secret) async throws(BrokerError) -> Bool {
        try await transport.call(
            Methods.CompleteInteractiveFlow.self,
            CompleteInteractiveFlowParams(correlationId: correlationId, responseUrl: responseUrl)
        ).accepted
    }

    /// Stops a running interactive sign-in.
    public func cancelInteractiveFlow(correlationId: String) async throws(BrokerError) -> Bool {
        try await transport.call(
            Methods.CancelInteractiveFlow.self,
            CancelInteractiveFlowParams(correlationId: correlationId)
        ).accepted
    }
}
