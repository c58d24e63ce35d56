import Foundation

extension IdentityProvider {
    /// Why a user's answer to a device code was not taken.
    enum DeviceDecisionProblem: Error {
        /// No device authorization has this user code.
        case unknownCode

        /// The device code has expired.
        case expired

        /// The user already answered.
        case alreadyDecided

        /// An approval without a username.
        case missingUsername
    }

    /// Starts a device authorization (RFC 8628) for `clientID`.
    func startDeviceAuthorization(clientID: String, scopes: [String], now: Date) -> DeviceAuthorization {
        var userCode = Random.userCode(length: 8)
        while deviceCodesByUserCode[userCode] != nil { userCode = Random.userCode(length: 8) }
        let authorization = DeviceAuthorization(
            deviceCode: "DAQABIQEAAAB" + Random.token(bytes: 48),
            userCode: userCode,
            clientID: clientID,
            scopes: scopes,
            expiresAt: now.addingTimeInterval(TimeInterval(configuration.deviceCodeLifetime))
        )
        deviceAuthorizations[authorization.deviceCode] = authorization
        deviceCodesByUserCode[userCode] = authorization.deviceCode
        return authorization
    }

    /// Counts a request to the device authorization endpoint.
    func countDeviceCodeRequest() {
        deviceCodeRequests += 1
    }

    /// The user's answer to a device code, from the device login page or the test API.
    func decideDeviceCode(
        userCode: String,
        username: String?,
        approve: Bool,
        now: Date
    ) -> Result<Void, DeviceDecisionProblem> {
        let normalized = userCode.uppercased().filter { $0 != "-" && $0 != " " }
        guard let deviceCode = deviceCodesByUserCode[normalized],
            let authorization = deviceAuthorizations[deviceCode]
        else { return .failure(.unknownCode) }
        guard now < authorization.expiresAt else { return .failure(.expired) }
        guard case .pending = authorization.state else { return .failure(.alreadyDecided) }
        if approve {
            let user = User(username: username ?? "")
            guard !user.username.isEmpty else { return .failure(.missingUsername) }
            deviceAuthorizations[deviceCode]?.state = .approved(user)
        } else {
            deviceAuthorizations[deviceCode]?.state = .denied
        }
        return .success(())
    }

    /// The device code grant: pending, slow down, declined, expired, or tokens.
    ///
    /// `slow_down` is a variant of `authorization_pending` (RFC 8628 §3.5): it answers a poll that comes sooner than
    /// the interval after the previous one while the user has not answered yet. A decided authorization is reported
    /// at once.
    func redeemDeviceCode(
        _ form: [String: String],
        clientID: String,
        now: Date
    ) -> Result<IssuedGrant, EntraError> {
        guard let deviceCode = form["device_code"], !deviceCode.isEmpty else {
            return .failure(.missing("device_code"))
        }
        guard let authorization = deviceAuthorizations[deviceCode] else {
            return .failure(EntraError("invalid_grant", code: 70000, "The provided device code is not valid."))
        }
        guard authorization.clientID == clientID else {
            return .failure(
                EntraError("invalid_grant", code: 70000, "The device code was issued to another client.")
            )
        }
        guard now < authorization.expiresAt else {
            return .failure(
                EntraError(
                    "expired_token",
                    code: 70020,
                    "The provided value for the input parameter 'device_code' is not valid. "
                        + "This device code has expired."
                )
            )
        }
        let previousPoll = authorization.lastPoll
        deviceAuthorizations[deviceCode]?.lastPoll = now
        switch authorization.state {
        case .pending:
            if let previousPoll, now.timeIntervalSince(previousPoll) < TimeInterval(configuration.deviceCodeInterval) {
                return .failure(
                    EntraError(
                        "slow_down",
                        code: 70016,
                        "OAuth 2.0 device flow error. Polling too fast: wait at least the interval between polls."
                    )
                )
            }
            return .failure(
                EntraError(
                    "authorization_pending",
                    code: 70016,
                    "OAuth 2.0 device flow error. Authorization is pending. Continue polling."
                )
            )
        case .denied:
            return .failure(EntraError("access_denied", code: 65004, "The user declined the sign-in request."))
        case .redeemed:
            return .failure(EntraError("invalid_grant", code: 54005, "The device code was already redeemed."))
        case .approved(let user):
            deviceAuthorizations[deviceCode]?.state = .redeemed
            let scopes = Scopes.granted(authorization.scopes)
            return .success(
                IssuedGrant(
                    user: user,
                    clientID: clientID,
                    scopes: scopes,
                    nonce: nil,
                    refreshToken: issueRefreshToken(user: user, clientID: clientID, scopes: scopes, now: now),
                    isFamily: configuration.isFamilyClient(clientID)
                )
            )
        }
    }
}
