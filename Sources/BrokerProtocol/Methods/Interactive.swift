/// How an interactive sign-in is shown: the Linux mirror of MSAL's `MSALWebviewType`.
public enum WebviewType: String, Sendable, Hashable, Codable, CaseIterable {
    /// `systemBrowser` when the caller has a graphical session (`DISPLAY` or `WAYLAND_DISPLAY`), else
    /// `deviceCode`.
    case `default`
    /// The user's browser (the configuration's `system-browser`, the broker's `$BROWSER`, else `xdg-open`), with a
    /// loopback redirect; fails if no browser starts.
    case systemBrowser
    /// A browser profile of the user's configuration, named by `browserProfile` (a private window, a kiosk, another
    /// browser): `browser.<name> = <command>` in `tokenbrokerd.conf`.
    case customBrowser
    /// The caller shows the page in its own web view and returns the redirect with `completeInteractiveFlow`.
    case embedded
    /// RFC 8628: the user signs in on another device with a code.
    case deviceCode

    /// Decodes a wire name; an unknown one is refused, naming the values allowed (Protocol/ §4.2).
    public init(from decoder: any Decoder) throws {
        self = try Self.decodeWireName(from: decoder)
    }
}

/// Params of `acquireTokenInteractively`.
public struct AcquireTokenInteractivelyParams: Sendable, Hashable, Codable {
    /// What is asked for; `prompt`, `loginHint`, `domainHint` and the extra query parameters apply here.
    public var authParameters: AuthParameters
    /// How the sign-in is shown.
    ///
    /// Default: `default`.
    public var webviewType: WebviewType?
    /// For `customBrowser`: the name of a browser profile of the user's configuration.
    ///
    /// Profiles are `browser.<name>` lines in `tokenbrokerd.conf`; a client never names a program itself.
    public var browserProfile: String?
    /// Refused since protocol 1.1 (a client could make the broker run any program): name a profile in
    /// ``browserProfile`` instead.
    public var browserCommand: [String]?
    /// The caller's display, so that the browser appears in the caller's session.
    ///
    /// `DISPLAY`, `WAYLAND_DISPLAY`, `XAUTHORITY`, `XDG_SESSION_TYPE`, `XDG_CURRENT_DESKTOP`; other variables are
    /// ignored.
    public var environment: [String: String]?
    /// Give up after this many seconds (default 300).
    public var timeoutSeconds: Int?
    /// See ``AcquireTokenSilentlyParams/correlationId``; it also names the flow for `complete`/`cancel`.
    public var correlationId: String?

    package enum CodingKeys: String, CodingKey {
        case authParameters, webviewType, browserProfile, browserCommand, environment, timeoutSeconds, correlationId
    }

    /// Creates the params.
    public init(
        authParameters: AuthParameters,
        webviewType: WebviewType? = nil,
        browserProfile: String? = nil,
        browserCommand: [String]? = nil,
        environment: [String: String]? = nil,
        timeoutSeconds: Int? = nil,
        correlationId: String? = nil
    ) {
        self.authParameters = authParameters
        self.webviewType = webviewType
        self.browserProfile = browserProfile
        self.browserCommand = browserCommand
        self.environment = environment
        self.timeoutSeconds = timeoutSeconds
        self.correlationId = correlationId
    }
}

/// Params of `completeInteractiveFlow`.
public struct CompleteInteractiveFlowParams: Sendable, Hashable, Codable {
    /// The correlation id of the running `embedded` request.
    public var correlationId: String
    /// The URL the web view was redirected to (the app's redirect URI with `code` and `state`, or `error`).
    public var responseUrl: Secret

    package enum CodingKeys: String, CodingKey {
        case correlationId, responseUrl
    }

    /// Creates the params.
    public init(correlationId: String, responseUrl: Secret) {
        self.correlationId = correlationId
        self.responseUrl = responseUrl
    }
}

/// Params of `cancelInteractiveFlow`.
public struct CancelInteractiveFlowParams: Sendable, Hashable, Codable {
    /// The correlation id of the running interactive request.
    public var correlationId: String

    /// Creates the params.
    public init(correlationId: String) {
        self.correlationId = correlationId
    }
}

/// Result of `completeInteractiveFlow` and `cancelInteractiveFlow`.
public struct FlowControlResult: Sendable, Hashable, Codable {
    /// Whether a running flow with that correlation id was found and acted on.
    public var accepted: Bool

    /// Creates the result.
    public init(accepted: Bool) {
        self.accepted = accepted
    }
}

/// Params of `webAuth/didStartLoad` and `webAuth/didFinishLoad`.
public struct WebAuthLoadNotification: Sendable, Hashable, Codable {
    /// The interactive request this is about.
    public var correlationId: String
    /// The authorization URL (it carries no secret: PKCE sends only the challenge).
    public var url: String

    /// Creates the notification.
    public init(correlationId: String, url: String) {
        self.correlationId = correlationId
        self.url = url
    }
}

/// Params of `webAuth/didFail`.
public struct WebAuthFailNotification: Sendable, Hashable, Codable {
    /// The interactive request this is about.
    public var correlationId: String
    /// What failed; the request's response carries the same error.
    public var error: ErrorObject

    /// Creates the notification.
    public init(correlationId: String, error: ErrorObject) {
        self.correlationId = correlationId
        self.error = error
    }
}

/// Params of `webAuth/didComplete`.
public struct WebAuthCompleteNotification: Sendable, Hashable, Codable {
    /// The interactive request this is about.
    public var correlationId: String

    /// Creates the notification.
    public init(correlationId: String) {
        self.correlationId = correlationId
    }
}

/// Params of `deviceCode/prompt`.
public struct DeviceCodeNotification: Sendable, Hashable, Codable {
    /// The interactive request this is about.
    public var correlationId: String
    /// The code the user types at `verificationUri`.
    public var userCode: String
    /// Where the user goes to sign in.
    public var verificationUri: String
    /// The same URI with the code filled in, when the provider gives one.
    public var verificationUriComplete: String?
    /// The provider's instruction text, or the broker's.
    public var message: String
    /// Seconds until the code expires.
    public var expiresIn: Int

    /// Creates the notification.
    public init(
        correlationId: String,
        userCode: String,
        verificationUri: String,
        verificationUriComplete: String? = nil,
        message: String,
        expiresIn: Int
    ) {
        self.correlationId = correlationId
        self.userCode = userCode
        self.verificationUri = verificationUri
        self.verificationUriComplete = verificationUriComplete
        self.message = message
        self.expiresIn = expiresIn
    }
}
