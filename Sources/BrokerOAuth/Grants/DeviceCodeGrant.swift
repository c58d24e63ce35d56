public import BrokerProtocol
public import BrokerTime

/// What the device authorization endpoint answered (RFC 8628 §3.2): the code the user types and where.
public struct DeviceAuthorization: Sendable, CustomStringConvertible {
    /// The code the broker polls with.
    ///
    /// Secret.
    public var deviceCode: Secret
    /// The code the user types.
    public var userCode: String
    /// Where the user types it.
    public var verificationURI: String
    /// The same, with the code filled in, when the provider offers one.
    public var verificationURIComplete: String?
    /// Seconds until the codes expire.
    public var expiresIn: Int64
    /// Seconds between polls.
    public var interval: Int64
    /// The provider's sentence for the user, when it gives one (Entra ID does).
    public var message: String?

    /// Creates an authorization.
    public init(
        deviceCode: Secret,
        userCode: String,
        verificationURI: String,
        verificationURIComplete: String? = nil,
        expiresIn: Int64,
        interval: Int64 = 5,
        message: String? = nil
    ) {
        self.deviceCode = deviceCode
        self.userCode = userCode
        self.verificationURI = verificationURI
        self.verificationURIComplete = verificationURIComplete
        self.expiresIn = expiresIn
        self.interval = interval
        self.message = message
    }

    /// The user code and where to type it (the user code is meant to be shown).
    public var description: String {
        "DeviceAuthorization(\(userCode) at \(verificationURI), \(expiresIn) s)"
    }

    /// The sentence to show: the provider's, or one made from the code and the URI.
    public var prompt: String {
        message ?? "To sign in, open \(verificationURI) and enter the code \(userCode)."
    }
}

/// The device authorization grant (RFC 8628): codes from the device authorization endpoint, then polling the token
/// endpoint until the user has signed in elsewhere, declined, or the codes expired.
public struct DeviceCodeGrant: Sendable {
    /// The RFC 8628 grant type.
    public static let grantType = "urn:ietf:params:oauth:grant-type:device_code"

    /// The app's client id.
    public var clientId: String
    /// Every scope to ask for, `openid profile offline_access` included.
    public var scopes: [String]
    /// A claims request (JSON).
    public var claims: String?
    /// Whether to ask Entra ID for `client_info`.
    public var requestsClientInfo: Bool

    /// Creates a grant.
    public init(clientId: String, scopes: [String], claims: String? = nil, requestsClientInfo: Bool = false) {
        self.clientId = clientId
        self.scopes = scopes
        self.claims = claims
        self.requestsClientInfo = requestsClientInfo
    }

    /// Asks for a device code and a user code.
    public func start(
        metadata: ProviderMetadata,
        via endpoint: TokenEndpoint,
        correlationId: String
    ) async throws(OAuthError) -> DeviceAuthorization {
        guard let url = metadata.deviceAuthorizationEndpoint else {
            throw OAuthError(.invalidRequest, "the identity provider offers no device code sign-in")
        }
        var form = FormBody()
        form.add("client_id", clientId)
        form.add("scope", scopes.joined(separator: " "))
        form.add("claims", claims)
        let body = try await endpoint.post(
            form,
            to: url,
            endpoint: "device authorization",
            correlationId: correlationId
        )
        guard let object = try? JSONValue.parse(body).objectValue,
            let deviceCode = object["device_code"]?.stringValue, !deviceCode.isEmpty,
            let userCode = object["user_code"]?.stringValue, !userCode.isEmpty,
            // Entra ID's v1 endpoint and Google spell it verification_url.
            let verification = (object["verification_uri"] ?? object["verification_url"])?.stringValue,
            !verification.isEmpty,
            let expiresIn = Self.seconds(object["expires_in"]), expiresIn > 0
        else {
            throw OAuthError(.invalidResponse, "the device authorization answer lacks a code, a URI or expires_in")
        }
        return DeviceAuthorization(
            deviceCode: Secret(deviceCode),
            userCode: String(userCode.prefix(100)),
            verificationURI: String(verification.prefix(2000)),
            verificationURIComplete: object["verification_uri_complete"]?.stringValue,
            expiresIn: min(expiresIn, 3600),
            interval: min(max(Self.seconds(object["interval"]) ?? 5, 1), 60),
            message: object["message"]?.stringValue.map { String($0.prefix(1000)) }
        )
    }

    /// Polls the token endpoint at the provider's interval (longer after `slow_down`) until the user signs in.
    ///
    /// A provider briefly down does not end the wait; the codes expiring, the user declining, or any other error
    /// does. Cancel the task to stop polling.
    public func poll(
        _ authorization: DeviceAuthorization,
        metadata: ProviderMetadata,
        via endpoint: TokenEndpoint,
        correlationId: String,
        clock: any BrokerClock
    ) async throws(OAuthError) -> TokenResponse {
        var interval = Duration.seconds(authorization.interval)
        let deadline = clock.elapsed + .seconds(authorization.expiresIn)
        var form = FormBody()
        form.add("grant_type", Self.grantType)
        form.add("client_id", clientId)
        form.add("device_code", secret: authorization.deviceCode)
        if requestsClientInfo { form.add("client_info", "1") }
        while true {
            do {
                try await clock.sleep(for: interval)
            } catch {
                throw OAuthError(.canceled, "the device code sign-in was canceled")
            }
            guard clock.elapsed < deadline else {
                throw OAuthError(.expired, "the device code expired before the user signed in")
            }
            do {
                return try await endpoint.redeem(form, at: metadata.tokenEndpoint, correlationId: correlationId)
            } catch {
                switch (error.kind, error.error) {
                case (.rejected, "authorization_pending"?):
                    continue
                case (.rejected, "slow_down"?):
                    interval += .seconds(5)
                case (.rejected, "expired_token"?), (.rejected, "code_expired"?):
                    throw OAuthError(
                        .expired,
                        "the device code expired before the user signed in",
                        response: error.response
                    )
                case (.rejected, "access_denied"?), (.rejected, "authorization_declined"?):
                    throw OAuthError(.canceled, "the user declined the sign-in", response: error.response)
                case (.unavailable, _), (.throttled, _):
                    // Keep polling: the user may be signing in right now.
                    if let retryAfter = error.retryAfter, retryAfter > interval { interval = retryAfter }
                case (.canceled, _):
                    throw error
                default:
                    throw error
                }
            }
        }
    }

    private static func seconds(_ value: JSONValue?) -> Int64? {
        value?.integerValue ?? value?.stringValue.flatMap { Int64($0) }
    }
}
