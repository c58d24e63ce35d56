import Foundation

/// An issued authorization code and what it was issued for; single use, valid for ten minutes.
struct AuthorizationCode: Sendable {
    /// How long a code can be redeemed.
    static let lifetime: TimeInterval = 600

    let request: AuthorizationRequest
    let user: User
    let expiresAt: Date
    var redeemed = false
}
