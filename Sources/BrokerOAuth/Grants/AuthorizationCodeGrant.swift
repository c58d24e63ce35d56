public import BrokerProtocol
public import Foundation

/// What an interactive sign-in asks the provider for.
public struct AuthorizationRequest: Sendable {
    /// The app's client id.
    public var clientId: String
    /// Where the provider sends the browser back: the loopback listener, or the app's own URI for embedded views.
    public var redirectURI: String
    /// Every scope to ask for, `openid profile offline_access` included.
    public var scopes: [String]
    /// `login`, `select_account`, `consent`, `none`, `create`.
    public var prompt: String?
    /// The username to pre-fill.
    public var loginHint: String?
    /// Entra ID's home-realm hint (`consumers`, `organizations`, a domain).
    public var domainHint: String?
    /// A claims request (JSON), such as a claims challenge.
    public var claims: String?
    /// More query parameters for the authorization URL; they may not replace one the broker sets.
    public var extraParameters: [String: String]
    /// Whether to ask Entra ID for `client_info` (the account's `uid.utid`).
    public var requestsClientInfo: Bool

    /// Creates a request.
    public init(
        clientId: String,
        redirectURI: String,
        scopes: [String],
        prompt: String? = nil,
        loginHint: String? = nil,
        domainHint: String? = nil,
        claims: String? = nil,
        extraParameters: [String: String] = [:],
        requestsClientInfo: Bool = false
    ) {
        self.clientId = clientId
        self.redirectURI = redirectURI
        self.scopes = scopes
        self.prompt = prompt
        self.loginHint = loginHint
        self.domainHint = domainHint
        self.claims = claims
        self.extraParameters = extraParameters
        self.requestsClientInfo = requestsClientInfo
    }

    /// The query parameters the broker sets itself; extra parameters may not name them.
    public static let reservedParameters: Set<String> = [
        "client_id", "response_type", "redirect_uri", "scope", "state", "nonce", "code_challenge",
        "code_challenge_method", "response_mode", "client_info", "prompt", "login_hint", "domain_hint", "claims",
    ]
}

/// The authorization code grant with PKCE S256 (RFC 6749 §4.1, RFC 7636): the URL to open, the check of the
/// redirect that comes back (`state`, errors), and the code's redemption.
///
/// `state`, `nonce` and the verifier are fresh for every grant; the verifier never leaves the broker except to the
/// token endpoint.
public struct AuthorizationCodeGrant: Sendable {
    /// What was asked.
    public let request: AuthorizationRequest
    /// The provider.
    public let metadata: ProviderMetadata
    /// The `state` sent; the redirect must carry it back.
    public let state: String
    /// The `nonce` sent; the id_token must carry it back.
    public let nonce: String
    private let pkce: PKCE
    /// The URL that starts the sign-in.
    ///
    /// It carries no secret: `state` and `nonce` are only unguessable.
    public let authorizationURL: URL

    /// Builds the grant; fails when an extra parameter would replace one the broker sets.
    public init(_ request: AuthorizationRequest, metadata: ProviderMetadata) throws(OAuthError) {
        if let reserved = request.extraParameters.keys.sorted().first(where: {
            AuthorizationRequest.reservedParameters.contains($0.lowercased())
        }) {
            throw OAuthError(.invalidRequest, "the extra query parameter \(reserved) is set by the broker itself")
        }
        self.request = request
        self.metadata = metadata
        state = RandomToken.make()
        nonce = RandomToken.make()
        pkce = PKCE()
        var query = FormBody()
        query.add("client_id", request.clientId)
        query.add("response_type", "code")
        query.add("redirect_uri", request.redirectURI)
        query.add("scope", request.scopes.joined(separator: " "))
        query.add("state", state)
        query.add("nonce", nonce)
        query.add("code_challenge", pkce.challenge)
        query.add("code_challenge_method", PKCE.method)
        query.add("response_mode", "query")
        if request.requestsClientInfo { query.add("client_info", "1") }
        query.add("prompt", request.prompt)
        query.add("login_hint", request.loginHint)
        query.add("domain_hint", request.domainHint)
        query.add("claims", request.claims)
        for (name, value) in request.extraParameters.sorted(by: { $0.key < $1.key }) { query.add(name, value) }
        var text = metadata.authorizationEndpoint.absoluteString
        text += (metadata.authorizationEndpoint.query == nil ? "?" : "&") + query.encodedString()
        guard let url = URL(string: text) else {
            throw OAuthError(.invalidRequest, "the authorization URL could not be built")
        }
        authorizationURL = url
    }

    /// Reads the redirect the browser or the app brought back.
    ///
    /// - Returns: the authorization code.
    /// - Throws: ``RedirectRejection`` when the redirect is not this grant's (another target, no or another
    ///   `state`): ignore it and keep waiting. ``OAuthError`` when it is, and carries an error instead of a code.
    public func code(from redirect: String) throws(RedirectOutcomeError) -> Secret {
        guard let components = URLComponents(string: redirect),
            let expected = URLComponents(string: request.redirectURI)
        else { throw .notOurs(RedirectRejection("the redirect is not a URL")) }
        guard components.scheme?.lowercased() == expected.scheme?.lowercased(),
            components.host?.lowercased() == expected.host?.lowercased(), components.port == expected.port,
            Self.path(components.path) == Self.path(expected.path)
        else { throw .notOurs(RedirectRejection("the redirect does not go to \(request.redirectURI)")) }
        guard let fields = FormBody.parse(components.percentEncodedQuery ?? "") else {
            throw .notOurs(RedirectRejection("the redirect's query is not well formed"))
        }
        let values = Dictionary(fields.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
        guard let returnedState = values["state"], Self.constantTimeEqual(returnedState, state) else {
            throw .notOurs(RedirectRejection("the redirect's state is not this sign-in's"))
        }
        if let error = values["error"] {
            let response = OAuthErrorResponse(
                error: String(error.prefix(100)),
                errorDescription: values["error_description"].map { String($0.prefix(500)) },
                suberror: values["suberror"]
            )
            let kind: OAuthError.Kind = error == "access_denied" ? .canceled : .rejected
            let reason = response.errorDescription.map { ": \($0)" } ?? ""
            throw .failed(OAuthError(kind, "the sign-in ended with \(error)\(reason)", response: response))
        }
        guard let code = values["code"], !code.isEmpty else {
            throw .failed(OAuthError(.invalidResponse, "the redirect carries neither a code nor an error"))
        }
        return Secret(code)
    }

    /// Redeems `code` at the token endpoint with the verifier.
    public func redeem(
        _ code: Secret,
        via endpoint: TokenEndpoint,
        correlationId: String
    ) async throws(OAuthError) -> TokenResponse {
        var form = FormBody()
        form.add("grant_type", "authorization_code")
        form.add("client_id", request.clientId)
        form.add("code", secret: code)
        form.add("redirect_uri", request.redirectURI)
        form.add("code_verifier", secret: pkce.verifier)
        form.add("scope", request.scopes.joined(separator: " "))
        if request.requestsClientInfo { form.add("client_info", "1") }
        form.add("claims", request.claims)
        // A code is single use: a retry after a broken exchange would only be refused, so none is made then.
        return try await endpoint.redeem(form, at: metadata.tokenEndpoint, correlationId: correlationId)
    }

    private static func path(_ path: String) -> String {
        path.isEmpty ? "/" : path
    }

    private static func constantTimeEqual(_ left: String, _ right: String) -> Bool {
        let a = Array(left.utf8)
        let b = Array(right.utf8)
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}

/// A redirect that does not belong to the sign-in: wrong target or `state`.
///
/// The sign-in keeps waiting.
public struct RedirectRejection: Error, Sendable, Hashable, CustomStringConvertible {
    /// Why; never the code.
    public var reason: String

    init(_ reason: String) {
        self.reason = reason
    }

    /// The reason.
    public var description: String {
        reason
    }
}

/// What a redirect that gives no code means.
public enum RedirectOutcomeError: Error, Sendable {
    /// Not this sign-in's redirect: refuse it, keep waiting.
    case notOurs(RedirectRejection)
    /// This sign-in's redirect, with an error: the sign-in is over.
    case failed(OAuthError)
}
