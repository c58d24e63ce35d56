import Foundation

/// The provider's shared state: codes, refresh tokens, device authorizations, faults and counters.
///
/// One actor guards it all; the grants live in extensions, one per file. The actor decides and records, and returns
/// plain values: signing tokens and waiting out delays happen outside it, in each connection's task.
actor IdentityProvider {
    /// What a token endpoint request meets before its grant is looked at.
    struct Admission: Sendable {
        /// The fault to apply, if one matched.
        let fault: Fault?

        /// How long the answer waits: the global delay plus the fault's.
        let delay: Duration

        /// The forgery the answer's id token is made with, if one is queued (v2.0 only).
        let forgery: IDTokenForgery?
    }

    /// Tenant, clients and lifetimes.
    let configuration: ProviderConfiguration

    var codes: [String: AuthorizationCode] = [:]
    var refreshTokens: [String: RefreshTokenRecord] = [:]
    var deviceAuthorizations: [String: DeviceAuthorization] = [:]
    /// Device codes by user code.
    var deviceCodesByUserCode: [String: String] = [:]

    private var faults = FaultQueue()
    private var forgeries: [IDTokenForgery] = []
    private var tokenDelay: Duration = .zero
    private var tokenRequests = 0
    private var tokenAnswerTime: Duration = .zero
    private var tokenRequestsByGrant = [
        "authorization_code": 0,
        "refresh_token": 0,
        "urn:ietf:params:oauth:grant-type:device_code": 0,
    ]
    private var v1TokenRequests = 0
    private var v1TokenRequestsByGrant = [
        "authorization_code": 0,
        "refresh_token": 0,
    ]
    private var authorizeRequests = 0
    private var delayedAnswers = 0
    private var peakDelayedAnswers = 0
    /// Whether token answers are held until `/_test/release`, and the answers held now.
    private var holding = false
    private var held: [CheckedContinuation<Void, Never>] = []
    var deviceCodeRequests = 0

    /// The token endpoint's answers timed at the server's edge.
    private let served: ServedTime

    /// Creates a provider with no codes or tokens issued yet; its server times token answers in `served`.
    init(configuration: ProviderConfiguration, served: ServedTime = ServedTime()) {
        self.configuration = configuration
        self.served = served
    }

    // MARK: Token endpoint admission

    /// Counts a request to the token endpoint of `version` and takes the fault that applies to it, if any.
    ///
    /// Each endpoint has its own counters; faults and the delay apply to both.
    func admitTokenRequest(grantType: String?, version: TokenEndpoint.Version) -> Admission {
        switch version {
        case .v2:
            tokenRequests += 1
            if let grantType { tokenRequestsByGrant[grantType, default: 0] += 1 }
        case .v1:
            v1TokenRequests += 1
            if let grantType { v1TokenRequestsByGrant[grantType, default: 0] += 1 }
        }
        let fault = faults.take(grantType: grantType)
        var forgery: IDTokenForgery?
        if version == .v2, !forgeries.isEmpty {
            forgery = forgeries[0]
            forgeries[0].remaining -= 1
            if forgeries[0].remaining == 0 { forgeries.removeFirst() }
        }
        return Admission(fault: fault, delay: tokenDelay + (fault?.delay ?? .zero), forgery: forgery)
    }

    /// Adds the time the v2.0 token endpoint took to work out one answer (its delay and faults' delays not included).
    func recordTokenAnswer(took duration: Duration) {
        tokenAnswerTime += duration
    }

    /// Counts a `GET` of the authorization endpoint.
    func countAuthorizeRequest() {
        authorizeRequests += 1
    }

    // MARK: Refresh tokens

    /// Records and returns a new refresh token for `user` issued to `clientID`.
    func issueRefreshToken(user: User, clientID: String, scopes: [String], now: Date) -> String {
        let token = "1.AQ" + Random.token(bytes: 48)
        refreshTokens[token] = RefreshTokenRecord(
            user: user,
            clientID: clientID,
            isFamily: configuration.isFamilyClient(clientID),
            scopes: scopes,
            expiresAt: configuration.refreshTokenLifetime.map { now.addingTimeInterval(TimeInterval($0)) }
        )
        return token
    }

    /// Sets every active refresh token of the user with `key` to `status`; returns how many changed.
    @discardableResult
    func setActiveRefreshTokens(ofUserWithKey key: String, to status: RefreshTokenRecord.Status) -> Int {
        var changed = 0
        for (token, record) in refreshTokens where record.user.key == key && record.status == .active {
            refreshTokens[token]?.status = status
            changed += 1
        }
        return changed
    }

    // MARK: Test control

    /// Queues a fault; returns how many requests the queued faults now apply to.
    func queueFault(_ fault: Fault) -> Int {
        faults.append(fault)
        return faults.left
    }

    /// Queues a forgery for the next v2.0 token requests; returns how many requests the queued forgeries now apply
    /// to.
    func queueForgery(_ forgery: IDTokenForgery) -> Int {
        forgeries.append(forgery)
        return forgeries.reduce(0) { $0 + $1.remaining }
    }

    /// A token answer began waiting out its delay.
    func delayStarted() {
        delayedAnswers += 1
        peakDelayedAnswers = max(peakDelayedAnswers, delayedAnswers)
    }

    /// A token answer's delay is over.
    func delayEnded() {
        delayedAnswers -= 1
    }

    /// Holds a token answer, worked out already, until `/_test/release` while answers are held; at once otherwise.
    func holdIfHeld() async {
        guard holding else { return }
        await withCheckedContinuation { held.append($0) }
    }

    /// Holds every later token answer (`true`) until released (`false`, which lets the held ones go).
    func setHolding(_ hold: Bool) {
        holding = hold
        guard !hold else { return }
        let waiting = held
        held = []
        for answer in waiting { answer.resume() }
    }

    /// Delays every token endpoint answer by `delay` until reset.
    func setTokenDelay(_ delay: Duration) {
        tokenDelay = delay
    }

    /// Clears faults, forgeries, the delay and the peak of delayed answers, and lets held answers go; issued codes
    /// and tokens stay.
    func reset() {
        faults.removeAll()
        forgeries.removeAll()
        tokenDelay = .zero
        peakDelayedAnswers = delayedAnswers
        setHolding(false)
    }

    /// The counters.
    func stats() -> ProviderStats {
        ProviderStats(
            tokenRequests: tokenRequests,
            tokenAnswerMicroseconds: Int(tokenAnswerTime / .microseconds(1)),
            tokenServedMicroseconds: served.microseconds,
            tokenDelayMs: Int(tokenDelay / .milliseconds(1)),
            peakDelayedAnswers: peakDelayedAnswers,
            heldAnswers: held.count,
            byGrant: tokenRequestsByGrant,
            v1TokenRequests: v1TokenRequests,
            v1ByGrant: v1TokenRequestsByGrant,
            authorizeRequests: authorizeRequests,
            deviceCodeRequests: deviceCodeRequests,
            faultsLeft: faults.left
        )
    }
}
