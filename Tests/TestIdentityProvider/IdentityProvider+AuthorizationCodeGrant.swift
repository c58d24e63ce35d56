import BrokerProtocol
import Crypto
import Foundation

extension IdentityProvider {
    /// Issues a single-use authorization code for a signed-in user.
    func issueAuthorizationCode(for request: AuthorizationRequest, user: User, now: Date) -> String {
        let code = "0.AQ" + Random.token(bytes: 48)
        codes[code] = AuthorizationCode(
            request: request,
            user: user,
            expiresAt: now.addingTimeInterval(AuthorizationCode.lifetime)
        )
        return code
    }

    /// The authorization code grant: checks code, client, redirect URI and PKCE verifier, then issues tokens.
    ///
    /// Only a successful redemption spends the code; a refused attempt leaves it redeemable.
    func redeemAuthorizationCode(
        _ form: [String: String],
        clientID: String,
        now: Date
    ) -> Result<IssuedGrant, EntraError> {
        guard let code = form["code"], !code.isEmpty else { return .failure(.missing("code")) }
        guard let redirectURI = form["redirect_uri"], !redirectURI.isEmpty else {
            return .failure(.missing("redirect_uri"))
        }
        guard let verifier = form["code_verifier"], !verifier.isEmpty else {
            return .failure(.missing("code_verifier"))
        }
        guard let issued = codes[code] else {
            return .failure(EntraError("invalid_grant", code: 9_002_313, "Invalid request. The code is not valid."))
        }
        guard !issued.redeemed else {
            return .failure(EntraError("invalid_grant", code: 54005, "OAuth2 Authorization code was already redeemed."))
        }
        guard now < issued.expiresAt else {
            return .failure(
                EntraError(
                    "invalid_grant",
                    code: 70008,
                    "The provided authorization code or refresh token has expired due to inactivity."
                )
            )
        }
        guard issued.request.clientID == clientID else {
            return .failure(
                EntraError("invalid_grant", code: 70000, "The authorization code was issued to another client.")
            )
        }
        guard issued.request.redirectURI == redirectURI else {
            return .failure(
                EntraError(
                    "invalid_grant",
                    code: 500_112,
                    "The reply address '\(redirectURI)' does not match the reply address "
                        + "'\(issued.request.redirectURI)' provided when requesting Authorization code."
                )
            )
        }
        let computed = Base64URL.encode(Array(SHA256.hash(data: Array(verifier.utf8))))
        guard computed == issued.request.codeChallenge else {
            return .failure(
                EntraError(
                    "invalid_grant",
                    code: 501_481,
                    "The Code_Verifier does not match the code_challenge supplied in the authorization request."
                )
            )
        }
        codes[code]?.redeemed = true
        let requested = Scopes.parse(form["scope"])
        let scopes = Scopes.granted(requested.isEmpty ? issued.request.scopes : requested)
        return .success(
            IssuedGrant(
                user: issued.user,
                clientID: clientID,
                scopes: scopes,
                nonce: issued.request.nonce,
                refreshToken: issueRefreshToken(user: issued.user, clientID: clientID, scopes: scopes, now: now),
                isFamily: configuration.isFamilyClient(clientID)
            )
        )
    }
}
