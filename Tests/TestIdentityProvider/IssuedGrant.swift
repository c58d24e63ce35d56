/// What a successful grant decided: who, for which client and scopes, and the refresh token it recorded.
///
/// The actor decides and records; turning this into signed tokens happens outside it, so that RSA signing does not
/// serialize concurrent requests.
struct IssuedGrant: Sendable {
    /// The signed-in user.
    let user: User

    /// The client the tokens are for (`aud` of the id token).
    let clientID: String

    /// The granted scopes, reserved ones included.
    let scopes: [String]

    /// The `nonce` of the authorization request (authorization code grant only).
    let nonce: String?

    /// The refresh token to return.
    let refreshToken: String

    /// Whether the client is a family client, so the answer carries `foci`.
    let isFamily: Bool
}
