import BrokerCache
import BrokerOAuth
public import BrokerProtocol
import BrokerTime
import Foundation

extension TokenBroker {
    /// `acquireTokenSilently`, answered as far as memory allows: a fresh cached token now; otherwise the refresh
    /// (or the `interaction_required` failure) later, continuing from the validated request and what the cache
    /// held, without validating or looking up again.
    ///
    /// Safe to call from an event loop: it only reads memory under the cache's short lock; the audit line goes to
    /// an asynchronous sink. Bad params and unknown accounts fail at once.
    public func answerSilently(
        _ params: AcquireTokenSilentlyParams,
        caller: Caller
    ) throws(BrokerFailure) -> Answer<AcquireTokenResult> {
        try answerSilently(params, caller: caller, entitled: nil)
    }

    /// ``answerSilently(_:caller:)`` for a caller whose right to the token can end while a refresh is under way (a
    /// grant's holder): `entitled` is asked again once a refresh (or a read of the token from the store) ended,
    /// before the token is handed out or audited, and a caller no longer entitled gets `permission_denied`.
    func answerSilently(
        _ params: AcquireTokenSilentlyParams,
        caller: Caller,
        entitled: (@Sendable () -> Bool)?
    ) throws(BrokerFailure) -> Answer<AcquireTokenResult> {
        let request = try SilentRequest(params.authParameters, broker: self)
        let cache = try cache
        let now = nowSeconds
        let (found, generation) = try cache.read { contents throws(BrokerFailure) in
            (try request.lookUp(in: contents, now: now), cache.generation)
        }
        let correlationId = params.effectiveCorrelationId
        guard let token = found.accessToken, found.freshness == .fresh, !request.bypassesCache else {
            return .later { _ throws(BrokerFailure) in
                try await self.refreshed(
                    request,
                    found: found,
                    correlationId: correlationId,
                    caller: caller,
                    entitled: entitled
                )
            }
        }
        if let secret = cache.secretInMemory(of: token) {
            var token = token
            token.secret = secret
            let result = issue(token, from: found, request: request, correlationId: correlationId, caller: caller)
            remember(result, for: params.authParameters, seconds: found.answerHolds, generation: generation)
            return .now(result)
        }
        // A token whose secret the contents left in the store: read from it off the event loop (once a generation:
        // the answer and the secret are remembered). One a commit replaced or removed since the lookup goes the way
        // of a miss.
        return .later { _ throws(BrokerFailure) in
            guard let secret = try await self.secret(of: token) else {
                return try await self.refreshed(
                    request,
                    found: found,
                    correlationId: correlationId,
                    caller: caller,
                    entitled: entitled
                )
            }
            try self.checkEntitled(entitled, correlationId: correlationId)
            var token = token
            token.secret = secret
            let result = self.issue(token, from: found, request: request, correlationId: correlationId, caller: caller)
            self.remember(result, for: params.authParameters, seconds: found.answerHolds, generation: generation)
            return result
        }
    }

    /// Throws `permission_denied` when a caller's right to a token (a grant's) ended while its answer was worked out.
    private func checkEntitled(_ entitled: (@Sendable () -> Bool)?, correlationId: String) throws(BrokerFailure) {
        guard entitled?() ?? true else {
            throw BrokerFailure(
                .permissionDenied,
                "the caller's grant ended while its token was worked out",
                details: .init(correlationId: correlationId)
            )
        }
    }

    /// The secret of an access token from the cache's contents (see ``TokenCache/secret(of:)``), read from the store
    /// off the caller's thread when memory does not hold it; nil when it is gone.
    func secret(of token: AccessToken) async throws(BrokerFailure) -> Secret? {
        do {
            return try await cache.secret(of: token)
        } catch {
            throw BrokerFailure(.internalError, "the cache could not be read", underlying: error)
        }
    }

    /// The silent request's answer when the cache alone gives it: a fresh token.
    ///
    /// Nil when it needs a refresh.
    public func cachedToken(
        _ params: AcquireTokenSilentlyParams,
        caller: Caller
    ) throws(BrokerFailure) -> AcquireTokenResult? {
        guard case .now(let result) = try answerSilently(params, caller: caller) else { return nil }
        return result
    }

    /// `acquireTokenSilently`: a fresh token from the cache; else one refreshed at the identity provider with the app's
    /// or the family's refresh token (concurrent identical requests share one refresh); else `interaction_required`.
    ///
    /// While the provider is down, a cached token that is still valid is handed out.
    public func acquireTokenSilently(
        _ params: AcquireTokenSilentlyParams,
        caller: Caller
    ) async throws(BrokerFailure) -> AcquireTokenResult {
        switch try answerSilently(params, caller: caller) {
        case .now(let result): return result
        case .later(let refresh): return try await refresh(FlowOwner.none)
        }
    }

    /// The refresh a cache miss needs, shared with identical requests under way, and its audit line.
    private func refreshed(
        _ request: SilentRequest,
        found: CacheLookup,
        correlationId: String,
        caller: Caller,
        entitled: (@Sendable () -> Bool)?
    ) async throws(BrokerFailure) -> AcquireTokenResult {
        let key = RefreshKey(request: request, lookup: found)
        var result = try await refreshes.run(key) { () async throws(BrokerFailure) -> TokenResult in
            try await self.refresh(request, found: found, correlationId: correlationId)
        }
        try checkEntitled(entitled, correlationId: correlationId)
        result.correlationId = correlationId
        audit.tokenIssued(
            to: caller,
            clientId: request.clientId,
            scopes: result.grantedScopes,
            account: result.account,
            source: result.tokenSource,
            correlationId: correlationId
        )
        return AcquireTokenResult(brokerTokenResponse: result)
    }

    /// Keeps a cached token's answer encoded for the requests that ask the same (see ``CachedAnswers``).
    private func remember(
        _ result: AcquireTokenResult,
        for parameters: AuthParameters,
        seconds: Range<Int64>?,
        generation: UInt64
    ) {
        // Once per request and cache generation: the general path answers again while the remembered one holds
        // (the bus and the endpoint ask through it), and encoding the template costs more than the lookup.
        guard let seconds, !seconds.isEmpty else { return }
        let key = HashedAuthParameters(parameters)
        guard cachedAnswers.answer(for: key, generation: generation, now: seconds.lowerBound) == nil else { return }
        var blank = result
        blank.brokerTokenResponse.correlationId = ""
        guard let template = ResponseTemplate(blank) else { return }
        let response = result.brokerTokenResponse
        cachedAnswers.remember(
            CachedAnswers.Answer(
                generation: generation,
                seconds: seconds,
                template: template,
                issue: AuditLog.TokenIssue(
                    clientId: parameters.clientId,
                    scopes: response.grantedScopes,
                    account: response.account,
                    source: .cache
                )
            ),
            for: key
        )
    }

    /// Hands a cached token out: the result, and its audit line.
    private func issue(
        _ token: AccessToken,
        from found: CacheLookup,
        request: SilentRequest,
        correlationId: String,
        caller: Caller
    ) -> AcquireTokenResult {
        let result = found.tokenResult(token, source: .cache, correlationId: correlationId)
        audit.tokenIssued(
            to: caller,
            clientId: request.clientId,
            scopes: result.grantedScopes,
            account: result.account,
            source: .cache,
            correlationId: correlationId
        )
        return AcquireTokenResult(brokerTokenResponse: result)
    }
}

/// A validated silent request: who asks, for what, at which authority.
struct SilentRequest: Sendable {
    let clientId: String
    let authority: Authority
    let scopes: ScopeSet
    let account: AccountSelector?
    let minimumValidity: Duration
    /// A claims request (a claims challenge), sent to the provider as is.
    let claims: String?
    let forceRefresh: Bool
    /// Whether the cached access tokens are skipped: `forceRefresh`, or a claims challenge.
    let bypassesCache: Bool

    /// Validates `parameters`; `broker` parses (and remembers) the authority URL.
    init(_ parameters: AuthParameters, broker: TokenBroker) throws(BrokerFailure) {
        let clientId = parameters.clientId
        guard !clientId.isEmpty, !clientId.utf8.contains(where: { $0 <= 0x20 }) else {
            throw BrokerFailure.invalidParams(.authParameters(.clientId), "must be a non-empty id without spaces")
        }
        self.clientId = clientId
        authority = try broker.authority(parameters.authority)
        var scopes = parameters.requestedScopes ?? []
        if let resource = parameters.resource, !resource.isEmpty {
            scopes.append(ScopeSet.defaultScope(forResource: resource))
        }
        // Split on the bytes: by characters, each compared as a string, this cost a request 4,000 instructions.
        self.scopes = ScopeSet(
            scopes.flatMap { $0.utf8.split(separator: UInt8(ascii: " ")).map { String(Substring($0)) } }
        )
        guard !self.scopes.scopes.isEmpty else {
            throw BrokerFailure.invalidParams(.authParameters(.requestedScopes), "give scopes or a resource")
        }
        if authority.isEntra, self.scopes.isEmpty {
            // MSAL's rule: Entra ID adds openid, profile and offline_access to every request; alone they name no
            // access token there. Another OpenID Connect provider issues one for them (its userinfo token).
            throw BrokerFailure.invalidParams(
                .authParameters(.requestedScopes),
                "ask Entra ID for at least one scope besides openid, profile and offline_access"
            )
        }
        guard !self.scopes.matched.isEmpty else {
            throw BrokerFailure.invalidParams(
                .authParameters(.requestedScopes),
                "offline_access alone names no token; ask for openid (or another scope) too"
            )
        }
        account = parameters.accountSelector
        let seconds = parameters.minimumValiditySeconds ?? 0
        guard seconds >= 0 else {
            throw BrokerFailure.invalidParams(.authParameters(.minimumValiditySeconds), "must not be negative")
        }
        minimumValidity = .seconds(seconds)
        claims = parameters.decodedClaims.flatMap { $0.isEmpty ? nil : $0 }
        forceRefresh = parameters.forceRefresh == true
        bypassesCache = forceRefresh || claims != nil
    }

    /// The account this request is for, and the best cached access token for it, if any.
    func lookUp(in contents: borrowing CacheContents, now: Int64) throws(BrokerFailure) -> CacheLookup {
        let account = try resolveAccount(in: contents)
        let realm = authority.fixedRealm ?? account.homeTenant ?? account.realm
        let environments = authority.environmentAliases
        let candidates = contents.accessTokens(
            homeAccountId: account.homeAccountId,
            clientId: clientId,
            realm: realm,
            environments: environments
        )
        var best: (token: AccessToken, scopes: ScopeSet, freshness: Freshness)?
        var fallback: (token: AccessToken, scopes: ScopeSet)?
        for (token, stored) in candidates where scopes.isSatisfied(by: stored) {
            if token.expiresOn - now >= max(1, minimumValidity.components.seconds),
                token.expiresOn > fallback?.token.expiresOn ?? .min
            {
                fallback = (token, stored)
            }
            let freshness = Freshness.of(token, now: now, minimumValidity: minimumValidity)
            guard freshness != .expired else { continue }
            if let current = best, (current.freshness, current.token.expiresOn) >= (freshness, token.expiresOn) {
                continue
            }
            best = (token, stored, freshness)
        }
        var answerHolds: Range<Int64>?
        if let best, best.freshness == .fresh {
            // The same token is the answer until it stops being fresh, or another one becomes fresh (only one cached
            // "in the future" can, as time goes on).
            var end = Freshness.freshSeconds(of: best.token, minimumValidity: minimumValidity).upperBound
            for (token, stored) in candidates where scopes.isSatisfied(by: stored) {
                let window = Freshness.freshSeconds(of: token, minimumValidity: minimumValidity)
                if !window.isEmpty, window.lowerBound > now { end = min(end, window.lowerBound) }
            }
            answerHolds = now..<max(now, end)
        }
        let idToken =
            contents.idToken(
                homeAccountId: account.homeAccountId,
                clientId: clientId,
                realm: realm,
                environments: environments
            )
        return CacheLookup(
            cacheAccount: account,
            realm: realm,
            account: contents.wireAccount(account, idToken: idToken),
            accessToken: best?.token,
            grantedScopes: best?.scopes.scopes ?? [],
            freshness: best?.freshness,
            answerHolds: answerHolds,
            fallback: fallback,
            idToken: idToken?.token.secret,
            clientInfo: contents.clientInfo(of: account)
        )
    }

    private func resolveAccount(in contents: borrowing CacheContents) throws(BrokerFailure) -> AccountEntry {
        let environments = authority.environmentAliases
        if let account {
            let candidates = contents.accounts(matching: account).filter {
                environments.contains($0.environment.lowercased())
            }
            guard let chosen = candidates.preferred(realm: authority.fixedRealm) else {
                throw BrokerFailure(
                    .noAccount,
                    "no account at \(authority.environment) matches \(account.described)"
                )
            }
            return chosen
        }
        let all = contents.accounts.values.filter { environments.contains($0.environment.lowercased()) }
        let people = Set(all.map { $0.homeAccountId.lowercased() })
        guard people.count == 1 else {
            if people.isEmpty {
                throw BrokerFailure(.noAccount, "no account is signed in at \(authority.environment)")
            }
            throw BrokerFailure.invalidParams(
                .authParameters(.account),
                "\(people.count) accounts are signed in at \(authority.environment); name one"
            )
        }
        guard let chosen = Array(all).preferred(realm: authority.fixedRealm) else {
            throw BrokerFailure(.noAccount, "no account is signed in at \(authority.environment)")
        }
        return chosen
    }
}

/// What the cache holds for a request.
struct CacheLookup: Sendable {
    /// The account entry the request resolved to.
    let cacheAccount: AccountEntry
    /// The tenant the request's tokens live in.
    let realm: String
    let account: Account
    let accessToken: AccessToken?
    let grantedScopes: [String]
    let freshness: Freshness?
    /// When the lookup was for a fresh token: the seconds in which the same lookup gives the same answer.
    let answerHolds: Range<Int64>?
    /// The cached token that still serves while the provider is down: unexpired, with the caller's
    /// minimum validity, even inside the 5-minute buffer.
    let fallback: (token: AccessToken, scopes: ScopeSet)?
    let idToken: Secret?
    let clientInfo: String?

    func tokenResult(
        _ token: AccessToken,
        scopes: [String]? = nil,
        source: TokenSource,
        correlationId: String
    ) -> TokenResult {
        TokenResult(
            accessToken: token.secret,
            accessTokenType: token.tokenType,
            expiresOn: token.expiresOn * 1000,
            extendedExpiresOn: token.extendedExpiresOn.map { $0 * 1000 },
            refreshOn: token.refreshOn.map { $0 * 1000 },
            grantedScopes: scopes ?? grantedScopes,
            idToken: idToken,
            clientInfo: clientInfo,
            account: account,
            tokenSource: source,
            correlationId: correlationId
        )
    }
}
