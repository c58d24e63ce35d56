import Foundation

/// A device authorization (RFC 8628): the codes, the client, and what the user did with it.
struct DeviceAuthorization: Sendable {
    /// Where the authorization stands.
    enum State: Sendable {
        /// The user has not answered yet.
        case pending

        /// The user signed in; the next poll gets tokens.
        case approved(User)

        /// The user declined.
        case denied

        /// Tokens were issued; the device code is spent.
        case redeemed
    }

    let deviceCode: String
    let userCode: String
    let clientID: String
    let scopes: [String]
    let expiresAt: Date

    /// When the client last polled, to answer `slow_down` to polls closer than the interval.
    var lastPoll: Date?

    var state: State = .pending
}
