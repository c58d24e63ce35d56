import Foundation

extension IdentityProvider {
    /// The refresh token grant, with family refresh tokens, rotation, reuse detection and expiry.
    ///
    /// A family refresh token may be redeemed by any family client; any other mismatch between the token's client and
    /// the caller is `client_mismatch`. With rotation, the presented token is retired and a new one returned;
    /// presenting a retired token again revokes every refresh token of its user.
    func redeemRefreshToken(
        _ form: [String: String],
        clientID: String,
        now: Date
    ) -> Result<IssuedGrant, EntraError> {
        guard let token = form["refresh_token"], !token.isEmpty else { return .failure(.missing("refresh_token")) }
        guard let record = refreshTokens[token] else {
            return .failure(
                EntraError(
                    "invalid_grant",
                    code: 9_002_313,
                    "Invalid request. The refresh token is malformed or invalid."
                )
            )
        }
        let callerIsFamily = configuration.isFamilyClient(clientID)
        guard record.isFamily ? callerIsFamily : record.clientID == clientID else {
            return .failure(
                EntraError(
                    "invalid_grant",
                    code: 70000,
                    "The provided value for the 'refresh_token' is not valid: it was issued to another client "
                        + "('\(record.clientID)'), and the client '\(clientID)' cannot redeem it.",
                    suberror: "client_mismatch"
                )
            )
        }
        switch record.status {
        case .active:
            break
        case .rotated:
            let revoked = setActiveRefreshTokens(ofUserWithKey: record.user.key, to: .revoked)
            Log.info("refresh token reuse detected: revoked \(revoked) refresh token(s) of the user")
            return .failure(
                EntraError(
                    "invalid_grant",
                    code: 70000,
                    "The refresh token has already been used (refresh token reuse detected); every refresh token of "
                        + "this user has been revoked.",
                    suberror: "bad_token"
                )
            )
        case .revoked:
            return .failure(
                EntraError(
                    "invalid_grant",
                    code: 50173,
                    "The provided grant has expired due to it being revoked, a fresh auth token is needed."
                )
            )
        case .expired:
            return .failure(Self.expiredRefreshToken)
        }
        if let expiresAt = record.expiresAt, now >= expiresAt {
            refreshTokens[token]?.status = .expired
            return .failure(Self.expiredRefreshToken)
        }
        let requested = Scopes.parse(form["scope"])
        let scopes = Scopes.granted(requested.isEmpty ? record.scopes : requested)
        let returned: String
        if configuration.rotatesRefreshTokens {
            refreshTokens[token]?.status = .rotated
            returned = issueRefreshToken(user: record.user, clientID: clientID, scopes: scopes, now: now)
        } else {
            returned = token
        }
        return .success(
            IssuedGrant(
                user: record.user,
                clientID: clientID,
                scopes: scopes,
                nonce: nil,
                refreshToken: returned,
                isFamily: callerIsFamily
            )
        )
    }

    private static var expiredRefreshToken: EntraError {
        EntraError(
            "invalid_grant",
            code: 700_082,
            "The refresh token has expired due to inactivity.",
            suberror: "token_expired"
        )
    }
}
