import BrokerCache
import BrokerOAuth
public import BrokerProtocol
import BrokerTime
import Foundation
import Logging

/// A validated interactive request.
struct SignInRequest: Sendable {
    let silent: SilentRequest
    let webviewType: WebviewType
    /// For `customBrowser`: the profile's command, from the user's configuration.
    let browserProfile: [String]
    /// The browsers the user configured, read once for a sign-in in a browser.
    let browsers: BrowserSettings
    /// The caller's display variables, and nothing else of its environment.
    let display: [String: String]
    let timeout: Duration
    let prompt: String?
    let loginHint: String?
    let domainHint: String?
    let extraParameters: [String: String]
    let redirectUri: String?
    let correlationId: String

    init(_ params: AcquireTokenInteractivelyParams, broker: TokenBroker) throws(BrokerFailure) {
        let parameters = params.authParameters
        silent = try SilentRequest(parameters, broker: broker)
        if params.browserCommand != nil {
            throw BrokerFailure.invalidParams(
                ParamField(AcquireTokenInteractivelyParams.CodingKeys.browserCommand),
                "a client may not name a program for the broker to run; name a browser profile of the user's "
                    + "configuration in browserProfile (browser.<name> = <command> in tokenbrokerd.conf)"
            )
        }
        display = (params.environment ?? [:]).filter { BrowserLauncher.displayVariables.contains($0.key) }
        let graphical = [display["DISPLAY"], display["WAYLAND_DISPLAY"]].contains { !($0 ?? "").isEmpty }
        switch params.webviewType ?? .default {
        case .default: webviewType = graphical ? .systemBrowser : .deviceCode
        case let chosen: webviewType = chosen
        }
        let usesBrowser = webviewType == .systemBrowser || webviewType == .customBrowser
        browsers = usesBrowser ? broker.configuration.browsers() : BrowserSettings()
        if webviewType == .customBrowser {
            let settings = browsers
            guard let name = params.browserProfile, !name.isEmpty else {
                throw BrokerFailure.invalidParams(
                    ParamField(AcquireTokenInteractivelyParams.CodingKeys.browserProfile),
                    "customBrowser needs the name of a browser profile of \(settings.configurationPath)"
                )
            }
            guard let command = settings.profiles[name] else {
                throw BrokerFailure.invalidParams(
                    ParamField(AcquireTokenInteractivelyParams.CodingKeys.browserProfile),
                    "no browser profile \(name.shortenedForMessages) in \(settings.configurationPath); add "
                        + "browser.\(name.shortenedForMessages) = <command> there"
                )
            }
            browserProfile = command
        } else {
            browserProfile = []
        }
        redirectUri = parameters.redirectUri.flatMap { $0.isEmpty ? nil : $0 }
        if webviewType == .embedded {
            guard let redirectUri, URLComponents(string: redirectUri)?.scheme != nil else {
                throw BrokerFailure.invalidParams(
                    .authParameters(.redirectUri),
                    "embedded needs the app's redirect URI, which its web view watches for"
                )
            }
        }
        let seconds = params.timeoutSeconds ?? Int(broker.configuration.interactiveTimeout.components.seconds)
        guard seconds >= 1 else {
            throw BrokerFailure.invalidParams(
                ParamField(AcquireTokenInteractivelyParams.CodingKeys.timeoutSeconds),
                "must be at least 1"
            )
        }
        timeout = .seconds(min(seconds, 3600))
        prompt = parameters.prompt.flatMap { $0.isEmpty ? nil : $0 }
        loginHint = parameters.loginHint.flatMap { $0.isEmpty ? nil : $0 }
        domainHint = parameters.domainHint.flatMap { $0.isEmpty ? nil : $0 }
        extraParameters = parameters.additionalQueryParametersForAuthorization ?? [:]
        if let reserved = extraParameters.keys.sorted().first(where: {
            AuthorizationRequest.reservedParameters.contains($0.lowercased())
        }) {
            throw BrokerFailure.invalidParams(
                .authParameters(.additionalQueryParametersForAuthorization),
                "\(reserved.shortenedForMessages) is set by the broker itself"
            )
        }
        correlationId = params.effectiveCorrelationId
    }

    /// Whether the cache may answer first: the request names an account and does not ask the user for anything.
    var maySucceedSilently: Bool {
        guard silent.account != nil || loginHint != nil, silent.claims == nil else { return false }
        return !["login", "select_account", "consent", "create"].contains(prompt?.lowercased() ?? "")
    }

    /// The authorization request for a redirect URI.
    func authorizationRequest(redirectURI: String) -> AuthorizationRequest {
        AuthorizationRequest(
            clientId: silent.clientId,
            redirectURI: redirectURI,
            scopes: silent.scopes.inRequest,
            prompt: prompt,
            loginHint: loginHint,
            domainHint: domainHint,
            claims: silent.claims,
            extraParameters: extraParameters,
            requestsClientInfo: silent.authority.isEntra
        )
    }

    /// Where the loopback listener listens: the host, port and path of the app's loopback redirect URI when it
    /// gave one (`http://localhost/…`), else `http://127.0.0.1:<ephemeral>/`.
    var loopback: (host: String, port: Int, path: String) {
        guard let redirectUri, let components = URLComponents(string: redirectUri),
            components.scheme?.lowercased() == "http", let host = components.host?.lowercased(),
            host == "localhost" || host == "127.0.0.1"
        else { return ("127.0.0.1", 0, "/") }
        return (host, components.port ?? 0, components.path.isEmpty ? "/" : components.path)
    }
}

extension TokenBroker {
    /// `acquireTokenInteractively`: signs the user in through the web view the app chose, sending the
    /// notifications of Protocol/ §10 to `owner`, and stores what the provider gives.
    ///
    /// When the request names an account whose tokens already answer it, the cache (or a refresh) answers and no
    /// sign-in is shown.
    public func acquireTokenInteractively(
        _ params: AcquireTokenInteractivelyParams,
        caller: Caller,
        owner: FlowOwner
    ) async throws(BrokerFailure) -> AcquireTokenResult {
        let request = try SignInRequest(params, broker: self)
        // A locked cache could not keep what the sign-in brings: say so before the user signs in.
        _ = try cache
        if request.maySucceedSilently, let result = await silentFirst(request, caller: caller) { return result }

        let flow = InteractiveFlow(correlationId: request.correlationId, owner: owner, webviewType: request.webviewType)
        try flows.register(flow)
        logger.info(
            "interactive sign-in started",
            metadata: [
                "correlation_id": "\(request.correlationId)", "client_id": "\(request.silent.clientId)",
                "webview_type": "\(request.webviewType.rawValue)", "caller": "\(caller)",
            ]
        )
        let outcome = await flows.run(flow) {
            await .capturing { () async throws(BrokerFailure) in try await self.run(flow, request) }
        }
        flow.finish()
        flows.unregister(flow)
        switch outcome {
        case .success(var result):
            result.correlationId = request.correlationId
            audit.tokenIssued(
                to: caller,
                clientId: request.silent.clientId,
                scopes: result.grantedScopes,
                account: result.account,
                source: result.tokenSource,
                correlationId: request.correlationId
            )
            logger.info("interactive sign-in completed", metadata: ["correlation_id": "\(request.correlationId)"])
            return AcquireTokenResult(brokerTokenResponse: result)
        case .failure(var failure):
            switch flow.cancellation {
            case .byClient? where failure.code != .timeout:
                failure = BrokerFailure(.userCanceled, "the sign-in was canceled", underlying: failure)
            case .brokerStopping? where failure.code != .timeout:
                failure = BrokerFailure(
                    .brokerStopping,
                    "the broker stopped before the sign-in finished; start it again",
                    underlying: failure
                )
            default: break
            }
            logger.info(
                "interactive sign-in failed",
                metadata: ["correlation_id": "\(request.correlationId)", "error": "\(failure)"]
            )
            if flow.hasNotified {
                let error = failure.errorObject(correlationId: request.correlationId)
                await owner.notify(
                    .webAuthDidFail(WebAuthFailNotification(correlationId: request.correlationId, error: error))
                )
            }
            throw failure
        }
    }

    /// `completeInteractiveFlow`: the redirect URL an app's own web view reached; the sign-in goes on (and says
    /// `webAuth/didComplete`) once `answer` opens.
    public func completeInteractiveFlow(
        _ params: CompleteInteractiveFlowParams,
        answer: AnswerGate = .opened
    ) throws(BrokerFailure) -> FlowControlResult {
        guard let flow = flows.flow(params.correlationId) else { return FlowControlResult(accepted: false) }
        return FlowControlResult(accepted: try flow.complete(with: params.responseUrl, after: answer))
    }

    /// `cancelInteractiveFlow`: stops a running sign-in; its request ends with `user_canceled`.
    public func cancelInteractiveFlow(_ params: CancelInteractiveFlowParams) -> FlowControlResult {
        guard let flow = flows.flow(params.correlationId) else { return FlowControlResult(accepted: false) }
        return FlowControlResult(accepted: flow.cancel())
    }

    /// Cancels the sign-ins a connection started: it closed, and nobody is left to finish them, or the broker is
    /// stopping (`reason`).
    public func cancelFlows(ownedBy connection: UInt64, because reason: FlowCancellation) {
        for flow in flows.flows(ownedBy: connection) { flow.cancel(reason) }
    }

    /// The silent answer, when there is one.
    private func silentFirst(_ request: SignInRequest, caller: Caller) async -> AcquireTokenResult? {
        var parameters = AuthParameters(clientId: request.silent.clientId)
        parameters.authority = request.silent.authority.url.absoluteString
        parameters.requestedScopes = request.silent.scopes.scopes
        parameters.account = request.silent.account ?? AccountSelector(username: request.loginHint)
        let params = AcquireTokenSilentlyParams(authParameters: parameters, correlationId: request.correlationId)
        do {
            return try await acquireTokenSilently(params, caller: caller)
        } catch {
            logger.debug(
                "no silent answer; signing in interactively",
                metadata: ["correlation_id": "\(request.correlationId)", "reason": "\(error.code)"]
            )
            return nil
        }
    }

    /// The flow itself: one race of the sign-in, the browser's exit, the timeout and a cancel.
    ///
    /// The sign-in ends at the redirect, the app's URL or the device code's answer; whichever event comes first
    /// decides, and the others are cancelled. A cancel comes only before the redirect (``InteractiveFlow/cancel(_:)``).
    private func run(
        _ flow: InteractiveFlow,
        _ request: SignInRequest
    ) async throws(BrokerFailure)
        -> TokenResult
    {
        let timeout = request.timeout
        let outcome = await withTaskGroup(of: Result<TokenResult, BrokerFailure>?.self) { group in
            group.addTask {
                await Result.capturing { () async throws(BrokerFailure) in try await self.signIn(flow, request) }
            }
            group.addTask {
                guard let browser = await flow.launchedBrowser(), let status = await browser.exitStatus(), status != 0
                else { return nil }
                return .failure(
                    BrokerFailure.invalidParams(
                        ParamField(AcquireTokenInteractivelyParams.CodingKeys.webviewType),
                        "\(browser.name) exited with status \(status) before the sign-in completed"
                    )
                )
            }
            group.addTask {
                do {
                    try await self.clock.sleep(for: timeout)
                } catch {
                    return nil
                }
                return .failure(
                    BrokerFailure(
                        .timeout,
                        "the sign-in did not complete within \(timeout.components.seconds) s",
                        details: .init(correlationId: request.correlationId)
                    )
                )
            }
            group.addTask {
                guard await flow.canceled() != nil else { return nil }
                return .failure(BrokerFailure(.userCanceled, "the sign-in was canceled"))
            }
            var decided: Result<TokenResult, BrokerFailure>?
            for await result in group {
                if let result {
                    decided = result
                    break
                }
            }
            group.cancelAll()
            return decided
        }
        guard let outcome else {
            throw BrokerFailure(.userCanceled, "the sign-in was canceled")
        }
        return try outcome.get()
    }

    private func signIn(
        _ flow: InteractiveFlow,
        _ request: SignInRequest
    ) async throws(BrokerFailure)
        -> TokenResult
    {
        let correlationId = request.correlationId
        let metadata = try await identityProviders.metadata(for: request.silent.authority, correlationId: correlationId)
        switch request.webviewType {
        case .deviceCode:
            return try await deviceCodeSignIn(flow, request, metadata: metadata)
        case .embedded:
            return try await embeddedSignIn(flow, request, metadata: metadata)
        case .systemBrowser, .customBrowser, .default:
            return try await browserSignIn(flow, request, metadata: metadata)
        }
    }

    private func browserSignIn(
        _ flow: InteractiveFlow,
        _ request: SignInRequest,
        metadata: ProviderMetadata
    ) async throws(BrokerFailure) -> TokenResult {
        let correlationId = request.correlationId
        let loopback = request.loopback
        let settings = request.browsers
        let receiver: LoopbackRedirectReceiver
        do {
            receiver = try await LoopbackRedirectReceiver.start(
                host: loopback.host,
                port: loopback.port,
                path: loopback.path
            ) { url in flow.judge(redirect: url) }
        } catch {
            throw BrokerFailure(
                .internalError,
                "the loopback redirect listener could not start on 127.0.0.1:\(loopback.port)",
                underlying: error
            )
        }
        do throws(BrokerFailure) {
            let grant = try makeGrant(request, redirectURI: receiver.redirectURI, metadata: metadata)
            flow.attach(grant)
            let url = grant.authorizationURL.absoluteString
            await flow.notify(.webAuthDidStartLoad(WebAuthLoadNotification(correlationId: correlationId, url: url)))
            // The browser gets the listener's one-time start page, never the authorization URL itself: a command
            // line is readable by every local user, and the URL's state would let one complete this sign-in.
            let start = receiver.startPage(redirectingTo: grant.authorizationURL)
            let browser: LaunchedBrowser
            do {
                browser =
                    request.webviewType == .customBrowser
                    ? try await BrowserLauncher.open(
                        start,
                        profile: request.browserProfile,
                        settings: settings,
                        display: request.display,
                        clock: clock
                    )
                    : try await BrowserLauncher.openSystemBrowser(
                        start,
                        settings: settings,
                        display: request.display,
                        clock: clock
                    )
            } catch {
                throw BrokerFailure.invalidParams(
                    ParamField(AcquireTokenInteractivelyParams.CodingKeys.webviewType),
                    error.reason
                )
            }
            flow.launched(browser)
            await flow.notify(.webAuthDidFinishLoad(WebAuthLoadNotification(correlationId: correlationId, url: url)))
            guard await receiver.redirect() != nil else {
                throw BrokerFailure(.userCanceled, "the sign-in was canceled")
            }
            await receiver.close()
            let code = try flow.acceptedCode()
            await flow.notify(.webAuthDidComplete(WebAuthCompleteNotification(correlationId: correlationId)))
            return try await redeem(code, grant: grant, request: request, metadata: metadata)
        } catch {
            await receiver.close()
            throw error
        }
    }

    private func embeddedSignIn(
        _ flow: InteractiveFlow,
        _ request: SignInRequest,
        metadata: ProviderMetadata
    ) async throws(BrokerFailure) -> TokenResult {
        let correlationId = request.correlationId
        let grant = try makeGrant(request, redirectURI: request.redirectUri ?? "", metadata: metadata)
        flow.attach(grant)
        let url = grant.authorizationURL.absoluteString
        await flow.notify(.webAuthDidStartLoad(WebAuthLoadNotification(correlationId: correlationId, url: url)))
        guard await flow.embeddedResponse() else { throw BrokerFailure(.userCanceled, "the sign-in was canceled") }
        let code = try flow.acceptedCode()
        await flow.notify(.webAuthDidComplete(WebAuthCompleteNotification(correlationId: correlationId)))
        return try await redeem(code, grant: grant, request: request, metadata: metadata)
    }

    private func deviceCodeSignIn(
        _ flow: InteractiveFlow,
        _ request: SignInRequest,
        metadata: ProviderMetadata
    ) async throws(BrokerFailure) -> TokenResult {
        let correlationId = request.correlationId
        let grant = DeviceCodeGrant(
            clientId: request.silent.clientId,
            scopes: request.silent.scopes.inRequest,
            claims: request.silent.claims,
            requestsClientInfo: request.silent.authority.isEntra
        )
        let response: TokenResponse
        do throws(OAuthError) {
            let authorization = try await grant.start(
                metadata: metadata,
                via: identityProviders.endpoint,
                correlationId: correlationId
            )
            await flow.notify(
                .deviceCodePrompt(
                    DeviceCodeNotification(
                        correlationId: correlationId,
                        userCode: authorization.userCode,
                        verificationUri: authorization.verificationURI,
                        verificationUriComplete: authorization.verificationURIComplete,
                        message: authorization.prompt,
                        expiresIn: Int(authorization.expiresIn)
                    )
                )
            )
            response = try await grant.poll(
                authorization,
                metadata: metadata,
                via: identityProviders.endpoint,
                correlationId: correlationId,
                clock: clock
            )
        } catch {
            throw BrokerFailure(oauth: error, correlationId: correlationId)
        }
        return try await store(response, request: request, metadata: metadata, nonce: nil)
    }

    private func makeGrant(
        _ request: SignInRequest,
        redirectURI: String,
        metadata: ProviderMetadata
    ) throws(BrokerFailure) -> AuthorizationCodeGrant {
        do {
            return try AuthorizationCodeGrant(
                request.authorizationRequest(redirectURI: redirectURI),
                metadata: metadata
            )
        } catch {
            throw BrokerFailure(oauth: error, correlationId: request.correlationId)
        }
    }

    /// Redeems the code and stores the tokens.
    private func redeem(
        _ code: Secret,
        grant: AuthorizationCodeGrant,
        request: SignInRequest,
        metadata: ProviderMetadata
    ) async throws(BrokerFailure) -> TokenResult {
        let correlationId = request.correlationId
        let response: TokenResponse
        do {
            response = try await grant.redeem(code, via: identityProviders.endpoint, correlationId: correlationId)
        } catch {
            throw BrokerFailure(oauth: error, correlationId: correlationId)
        }
        return try await store(response, request: request, metadata: metadata, nonce: grant.nonce)
    }

    /// Checks the id_token (with the nonce sent, for the code flow) and stores the tokens of a sign-in.
    private func store(
        _ response: TokenResponse,
        request: SignInRequest,
        metadata: ProviderMetadata,
        nonce: String?
    ) async throws(BrokerFailure) -> TokenResult {
        let correlationId = request.correlationId
        let now = nowSeconds
        let claims: [String: JSONValue]?
        do {
            claims = try await identityProviders.validatedClaims(
                of: response,
                metadata: metadata,
                clientId: request.silent.clientId,
                nonce: nonce,
                now: now
            )
        } catch {
            throw BrokerFailure(
                .serverError,
                "the identity provider's id_token was refused: \(error)",
                details: .init(correlationId: correlationId)
            )
        }
        let context = IssueContext(
            clientId: request.silent.clientId,
            authority: request.silent.authority,
            requestedScopes: request.silent.scopes,
            account: nil
        )
        let issued = try cache.read { contents throws(BrokerFailure) in
            try IssuedTokens(response, for: context, claims: claims, redeemed: nil, in: contents, now: now)
        }
        return try await store(issued, clientInfo: response.clientInfo, correlationId: correlationId)
    }
}
