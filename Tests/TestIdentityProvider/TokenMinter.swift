import BrokerProtocol
import Foundation

/// Turns a decided grant into the token endpoint's JSON answer: access token, id token, `client_info`, `foci`.
struct TokenMinter: Sendable {
    /// The key that signs id tokens and access tokens.
    let key: SigningKey

    /// Lifetimes, tenant and issuer.
    let configuration: ProviderConfiguration

    /// The success body for `grant`, with `client_info` when the request asked for it.
    func body(for grant: IssuedGrant, includeClientInfo: Bool, now: Date) throws -> TokenResponseBody {
        let issuedAt = Int64(now.timeIntervalSince1970)
        let expiresAt = issuedAt + Int64(configuration.tokenLifetime)
        let idToken = try key.signedJWT(
            IDTokenClaims(
                aud: grant.clientID,
                iss: configuration.issuer,
                iat: issuedAt,
                nbf: issuedAt,
                exp: expiresAt,
                name: grant.user.displayName,
                nonce: grant.nonce,
                oid: grant.user.objectID,
                preferredUsername: grant.user.username,
                sub: grant.user.subject(for: grant.clientID),
                tid: configuration.tenantID,
                ver: "2.0"
            )
        )
        let accessToken = try key.signedJWT(
            AccessTokenClaims(
                aud: Scopes.audience(of: grant.scopes),
                iss: configuration.issuer,
                iat: issuedAt,
                nbf: issuedAt,
                exp: expiresAt,
                appid: grant.clientID,
                name: grant.user.displayName,
                oid: grant.user.objectID,
                preferredUsername: grant.user.username,
                scp: Scopes.scopeClaim(of: grant.scopes),
                sub: grant.user.subject(for: grant.clientID),
                tid: configuration.tenantID,
                ver: "2.0",
                jti: Random.token(bytes: 16)
            )
        )
        let clientInfo =
            try includeClientInfo
            ? Base64URL.encode(WireEncoder().encode(ClientInfo(uid: grant.user.objectID, utid: configuration.tenantID)))
            : nil
        return TokenResponseBody(
            tokenType: "Bearer",
            scope: grant.scopes.joined(separator: " "),
            expiresIn: configuration.tokenLifetime,
            extExpiresIn: 2 * configuration.tokenLifetime,
            refreshIn: configuration.refreshIn,
            accessToken: accessToken,
            refreshToken: grant.refreshToken,
            idToken: idToken,
            clientInfo: clientInfo,
            foci: grant.isFamily ? "1" : nil
        )
    }
}
