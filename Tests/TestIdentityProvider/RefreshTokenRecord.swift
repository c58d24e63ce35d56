import Foundation

/// What the provider remembers about one refresh token it issued.
struct RefreshTokenRecord: Sendable {
    /// Where the token is in its life.
    enum Status: Sendable {
        /// Redeemable.
        case active

        /// Redeemed and replaced by a new one (rotation); presenting it again is reuse.
        case rotated

        /// Revoked (by the test API or by reuse detection).
        case revoked

        /// Expired on request of the test API.
        case expired
    }

    /// The user the token signs in.
    let user: User

    /// The client it was issued to.
    let clientID: String

    /// Whether it is a family refresh token (issued to a family client).
    let isFamily: Bool

    /// The scopes granted with it, used when a refresh asks for none.
    let scopes: [String]

    /// When it stops being redeemable, if refresh tokens have a lifetime.
    let expiresAt: Date?

    /// Its status.
    var status: Status = .active
}
