/// `POST /_test/fail-next`: queue a fault for the next token endpoint requests.
struct FailNextRequest: Decodable {
    let count: Int?
    let status: Int?
    let error: String?
    let suberror: String?
    let errorDescription: String?
    let errorCode: Int?
    let retryAfter: Int?
    let grantType: String?
    let delayMs: Int?
}

/// `POST /_test/forge-id-tokens`: sign the id tokens of the next `count` v2.0 token requests with a key the JWKS does
/// not hold, naming `objectId` (as `oid` and `sub`) when given.
struct ForgeIDTokensRequest: Decodable {
    let count: Int?
    let objectId: String?
}

/// `POST /_test/delay`: delay every token endpoint answer.
struct DelayRequest: Decodable {
    let ms: Int
}

/// `POST /_test/revoke` and `POST /_test/expire-refresh-tokens`: the user whose refresh tokens are affected.
struct UserRequest: Decodable {
    let username: String
}

/// `POST /_test/device`: approve or deny a device code as the device login page does.
struct DeviceDecisionRequest: Decodable {
    let userCode: String
    let username: String?
    let action: String?
}

/// `GET /_test/stats`: what the provider has been asked so far.
struct ProviderStats: Encodable {
    /// Requests to the v2.0 token endpoint, counted before faults are applied.
    let tokenRequests: Int

    /// The time the v2.0 token endpoint spent working out its answers, in microseconds (from the request handed to
    /// it to the response built).
    let tokenAnswerMicroseconds: Int

    /// The time the v2.0 token endpoint's answers took at the server's edge, in microseconds (``ServedTime``).
    ///
    /// From the request's head read off the connection to the response's last byte written to it: what a benchmark
    /// subtracts to find the broker's own share of a refresh.
    let tokenServedMicroseconds: Int

    /// The delay every token answer waits now (`/_test/delay`; 0 after `/_test/reset`), in milliseconds.
    let tokenDelayMs: Int

    /// The most token answers (v2.0 and v1) that waited out a delay at the same time, since the start or the last
    /// `/_test/reset`: more than one shows that delays do not hold each other up.
    let peakDelayedAnswers: Int

    /// The token answers held now (`/_test/hold`), each worked out already, until `/_test/release`.
    let heldAnswers: Int

    /// Requests to the v2.0 token endpoint by `grant_type`.
    let byGrant: [String: Int]

    /// Requests to the v1 token endpoint (`oauth2/token`), counted before faults are applied.
    let v1TokenRequests: Int

    /// Requests to the v1 token endpoint by `grant_type`.
    let v1ByGrant: [String: Int]

    /// `GET` requests to the authorization endpoint.
    let authorizeRequests: Int

    /// Requests to the device authorization endpoint.
    let deviceCodeRequests: Int

    /// How many requests the queued faults still apply to.
    let faultsLeft: Int
}

/// The answer of a test control call that changed something.
struct ControlResult: Encodable {
    let ok: Bool
    let count: Int?
    let faultsLeft: Int?
}

/// A JSON error of the test control API and of unknown paths.
struct ControlError: Encodable {
    let error: String
    let message: String
}
