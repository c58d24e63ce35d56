public import BrokerProtocol
public import Foundation

/// The refresh token grant (RFC 6749 §6): a refresh token, the app's own or a family one, for new tokens.
///
/// When the answer carries a new refresh token, the old one is rotated out: the caller must replace it.
public struct RefreshTokenGrant: Sendable {
    /// The client redeeming the token (with a family refresh token, the app asking, not the one that got it).
    public var clientId: String
    /// The refresh token.
    public var refreshToken: Secret
    /// Every scope to ask for, `openid profile offline_access` included.
    public var scopes: [String]
    /// A claims request (JSON), such as a claims challenge.
    public var claims: String?
    /// Whether to ask Entra ID for `client_info`.
    public var requestsClientInfo: Bool
    /// Entra ID's routing hint `Oid:<uid>@<utid>` (`X-AnchorMailbox`).
    public var anchorMailbox: String?

    /// Creates a grant.
    public init(
        clientId: String,
        refreshToken: Secret,
        scopes: [String],
        claims: String? = nil,
        requestsClientInfo: Bool = false,
        anchorMailbox: String? = nil
    ) {
        self.clientId = clientId
        self.refreshToken = refreshToken
        self.scopes = scopes
        self.claims = claims
        self.requestsClientInfo = requestsClientInfo
        self.anchorMailbox = anchorMailbox
    }

    /// Redeems the refresh token at `tokenEndpoint`.
    ///
    /// Identical requests that just failed are answered from the endpoint's throttle.
    public func redeem(
        at tokenEndpoint: URL,
        via endpoint: TokenEndpoint,
        correlationId: String
    ) async throws(OAuthError) -> TokenResponse {
        var form = FormBody()
        form.add("grant_type", "refresh_token")
        form.add("client_id", clientId)
        form.add("refresh_token", secret: refreshToken)
        form.add("scope", scopes.joined(separator: " "))
        if requestsClientInfo { form.add("client_info", "1") }
        form.add("claims", claims)
        let key = ThrottleKey(
            [
                tokenEndpoint.absoluteString, "refresh_token", clientId, scopes.sorted().joined(separator: " "),
                claims ?? "",
            ],
            secret: refreshToken
        )
        return try await endpoint.redeem(
            form,
            at: tokenEndpoint,
            correlationId: correlationId,
            headers: anchorMailbox.map { [("X-AnchorMailbox", $0)] } ?? [],
            throttleKey: key
        )
    }
}
