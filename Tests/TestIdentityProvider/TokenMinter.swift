import BrokerProtocol
import Foundation

/// Turns a decided grant into the token endpoint's JSON answer: access token, id token, `client_info`, `foci`.
struct TokenMinter: Sendable {
    /// The key that signs id tokens and access tokens.
    let key: SigningKey

    /// Lifetimes, tenant and issuer.
    let configuration: ProviderConfiguration

    /// The v2.0 success body for `grant`, with `client_info` when the request asked for it; its id token made by
    /// `forgery` when one is given.
    func body(
        for grant: IssuedGrant,
        includeClientInfo: Bool,
        forgery: IDTokenForgery? = nil,
        now: Date
    ) throws -> TokenResponseBody {
        let issuedAt = Int64(now.timeIntervalSince1970)
        let expiresAt = issuedAt + Int64(configuration.tokenLifetime)
        let idToken = try (forgery?.key ?? key).signedJWT(
            IDTokenClaims(
                aud: grant.clientID,
                iss: configuration.issuer,
                iat: issuedAt,
                nbf: issuedAt,
                exp: expiresAt,
                name: grant.user.displayName,
                nonce: grant.nonce,
                oid: forgery?.objectID ?? grant.user.objectID,
                preferredUsername: grant.user.username,
                sub: forgery?.objectID ?? grant.user.subject(for: grant.clientID),
                tid: configuration.tenantID,
                ver: "2.0"
            )
        )
        return TokenResponseBody(
            tokenType: "Bearer",
            scope: grant.scopes.joined(separator: " "),
            expiresIn: configuration.tokenLifetime,
            extExpiresIn: 2 * configuration.tokenLifetime,
            refreshIn: configuration.refreshIn,
            accessToken: try accessToken(
                for: grant,
                audience: Scopes.audience(of: grant.scopes),
                issuedAt: issuedAt,
                expiresAt: expiresAt
            ),
            refreshToken: grant.refreshToken,
            idToken: idToken,
            clientInfo: try includeClientInfo ? clientInfo(of: grant) : nil,
            foci: grant.isFamily ? "1" : nil
        )
    }

    /// The v1 (`oauth2/token`) success body for `grant`: lifetimes as strings, `resource` echoed, the access token's
    /// `aud` the resource, and an unsigned v1 id token.
    func v1Body(
        for grant: IssuedGrant,
        resource: String,
        includeClientInfo: Bool,
        now: Date
    ) throws -> V1TokenResponseBody {
        let issuedAt = Int64(now.timeIntervalSince1970)
        let expiresAt = issuedAt + Int64(configuration.tokenLifetime)
        let idToken = try UnsecuredJWT.encode(
            V1IDTokenClaims(
                aud: grant.clientID,
                iss: configuration.v1Issuer,
                iat: issuedAt,
                nbf: issuedAt,
                exp: expiresAt,
                familyName: V1IDTokenClaims.familyName,
                givenName: grant.user.displayName,
                name: grant.user.displayName,
                oid: grant.user.objectID,
                sub: grant.user.subject(for: grant.clientID),
                tid: configuration.tenantID,
                uniqueName: grant.user.username,
                upn: grant.user.username,
                ver: "1.0"
            )
        )
        return V1TokenResponseBody(
            tokenType: "Bearer",
            scope: "user_impersonation",
            expiresIn: String(configuration.tokenLifetime),
            extExpiresIn: String(2 * configuration.tokenLifetime),
            expiresOn: String(expiresAt),
            notBefore: String(issuedAt),
            resource: resource,
            accessToken: try accessToken(for: grant, audience: resource, issuedAt: issuedAt, expiresAt: expiresAt),
            refreshToken: grant.refreshToken,
            idToken: idToken,
            clientInfo: try includeClientInfo ? clientInfo(of: grant) : nil,
            foci: grant.isFamily ? "1" : nil
        )
    }

    /// An RS256 access token for `audience`; the random `jti` makes every one unique.
    private func accessToken(
        for grant: IssuedGrant,
        audience: String,
        issuedAt: Int64,
        expiresAt: Int64
    ) throws -> String {
        try key.signedJWT(
            AccessTokenClaims(
                aud: audience,
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
    }

    /// The `client_info` value: base64url of `{"uid":oid,"utid":tenantId}`.
    private func clientInfo(of grant: IssuedGrant) throws -> String {
        Base64URL.encode(try WireEncoder().encode(ClientInfo(uid: grant.user.objectID, utid: configuration.tenantID)))
    }
}
