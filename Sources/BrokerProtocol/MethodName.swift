/// The methods a client may call.
///
/// The names mirror Microsoft's Linux broker (`com.microsoft.identity.Broker1`).
public enum MethodName: String, Sendable, Hashable, Codable, CaseIterable {
    /// Broker and protocol versions, for negotiation.
    case getLinuxBrokerVersion
    /// Every account, optionally filtered by client id or authority.
    case getAccounts
    /// One account, by identifier or else by username.
    case getAccount
    /// A token from the cache or by refresh; never shows UI.
    case acquireTokenSilently
    /// A token through an interactive sign-in, shown the way `webviewType` says.
    case acquireTokenInteractively
    /// Hands back the final redirect URL of an `embedded` sign-in.
    case completeInteractiveFlow
    /// Cancels a running interactive sign-in.
    case cancelInteractiveFlow
    /// Signs an account out of the broker, or out of one client id.
    case removeAccount
    /// Imports an MSAL or ADAL cache.
    case importCache
    /// Exports the cache as MSAL or ADAL JSON.
    case exportCache
    /// Uptime, counts and recent errors.
    case getStatus
    /// Creates a grant of the managed-identity endpoint.
    case createGrant
    /// The grants of the managed-identity endpoint.
    case listGrants
    /// Revokes a grant of the managed-identity endpoint.
    case revokeGrant
    /// Drops an access token its audience refused from the cache.
    case discardAccessToken
    /// Where the cache key is kept, and why the cache is locked.
    case getKeyStatus
    /// Opens a cache locked by a passphrase or a locked keyring.
    case unlockCache
    /// Keeps the cache key in another store.
    case moveCacheKey
}

/// The notifications the broker sends while an interactive request runs (JSON-RPC messages without `id`).
public enum NotificationName: String, Sendable, Hashable, Codable, CaseIterable {
    /// The sign-in page is being loaded; `params.url` is the authorization URL.
    case webAuthDidStartLoad = "webAuth/didStartLoad"
    /// The page was handed to the browser or web view (`params.url`).
    case webAuthDidFinishLoad = "webAuth/didFinishLoad"
    /// The sign-in failed (`params.error`).
    case webAuthDidFail = "webAuth/didFail"
    /// The redirect came back; the token request follows.
    case webAuthDidComplete = "webAuth/didComplete"
    /// Show the user this device code.
    case deviceCodePrompt = "deviceCode/prompt"
}

extension RawRepresentable where Self: CaseIterable, RawValue == String {
    /// The value of a closed enumeration named on the wire; an unknown name is a `dataCorrupted` error that lists
    /// the names allowed and never repeats the one sent.
    static func decodeWireName(from decoder: any Decoder) throws -> Self {
        let name = try decoder.singleValueContainer().decode(String.self)
        guard let value = Self(rawValue: name) else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(
                    codingPath: decoder.codingPath,
                    debugDescription: "expected one of " + allCases.map(\.rawValue).joined(separator: ", ")
                )
            )
        }
        return value
    }
}
