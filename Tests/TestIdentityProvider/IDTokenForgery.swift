/// A queued forgery (`/_test/forge-id-tokens`): the next v2.0 id tokens are signed with a key the JWKS does not hold,
/// under the provider's own `kid`, and may name someone else.
struct IDTokenForgery: Sendable {
    /// How many more v2.0 token requests this forgery applies to (each admitted request takes one, answered with an
    /// id token or not).
    var remaining: Int

    /// The forger's key.
    let key: SigningKey

    /// The `oid` and `sub` the forged tokens name instead of the user's, if any.
    let objectID: String?
}
