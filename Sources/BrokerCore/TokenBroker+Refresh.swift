import BrokerCache
import BrokerOAuth
import BrokerProtocol
import BrokerTime
import Foundation
import Logging

/// What makes two silent requests need the same refresh: same app, account, tenant, scopes and claims.
///
/// A class that hashes its parts once: the single flight copies, hashes and compares its key a dozen times a
/// refresh, and as a struct of seven strings and a set it was retained seven times a copy and hashed a scope at a
/// time; its hashing and the flight's bookkeeping cost 16,700 instructions a refresh, now 5,000 (callgrind).
final class RefreshKey: Hashable, Sendable {
    let clientId: String
    let homeAccountId: String
    let environment: String
    let realm: String
    let scopes: Set<String>
    let claims: String?
    let forceRefresh: Bool
    private let hash: Int

    init(request: SilentRequest, lookup: CacheLookup) {
        clientId = request.clientId.lowercased()
        homeAccountId = lookup.cacheAccount.homeAccountId.lowercased()
        environment = request.authority.environment
        realm = lookup.realm.lowercased()
        scopes = request.scopes.matched
        claims = request.claims
        forceRefresh = request.forceRefresh
        var hasher = Hasher()
        hasher.combine(clientId)
        hasher.combine(homeAccountId)
        hasher.combine(environment)
        hasher.combine(realm)
        hasher.combine(scopes)
        hasher.combine(claims)
        hasher.combine(forceRefresh)
        hash = hasher.finalize()
    }

    static func == (left: RefreshKey, right: RefreshKey) -> Bool {
        left === right
            || (left.hash == right.hash && left.clientId == right.clientId && left.homeAccountId == right.homeAccountId
                && left.environment == right.environment && left.realm == right.realm && left.scopes == right.scopes
                && left.claims == right.claims && left.forceRefresh == right.forceRefresh)
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(hash)
    }
}

extension TokenBroker {
    /// Refreshes started; silent requests that waited for one already under way instead of starting their own; and
    /// refreshes that waited for another one's redemption of the same refresh token to end.
    public var refreshCounts: (started: Int, joined: Int, waitedForToken: Int) {
        let (started, joined) = refreshes.counts
        return (started, joined, redemptions.waited)
    }

    /// Whether anything is under way that must not be cut off: a refresh or a write in line (a rotated token must
    /// be stored), or an interactive sign-in.
    public var isBusy: Bool {
        !refreshes.isIdle || vault.cache?.isWriting == true || !flows.isEmpty
    }

    /// Waits for the refreshes under way and the writes in line; call before the process exits, so no rotated
    /// refresh token is lost.
    public func finishRefreshes() async {
        await refreshes.waitForRunning()
        await vault.cache?.finishWrites()
    }

    /// The refresh a silent request needs, in MSAL's order (`msal-and-broker.md` §3): an app the broker has not
    /// seen tries the family refresh tokens, and learns from `client_mismatch` that it is not in the family; a
    /// family app uses them; then the app's own refresh tokens, newest first.
    ///
    /// A refresh token is redeemed by one request at a time (``redemptions``): requests for other scopes, or other
    /// apps of the family, that need the same token wait for the one under way, then use the token it rotated in.
    /// Presented again, the token it rotated out would make a provider that detects reuse revoke the sign-in.
    ///
    /// When the provider cannot be reached, a cached access token that is still valid is the answer.
    func refresh(
        _ request: SilentRequest,
        found: CacheLookup,
        correlationId: String
    ) async throws(BrokerFailure) -> TokenResult {
        let account = found.cacheAccount
        var candidates = try refreshCandidates(for: request, account: account)
        guard !candidates.isEmpty else {
            throw BrokerFailure(
                .interactionRequired,
                "no refresh token of this app or its family is cached for \(account.displayName); sign in "
                    + "interactively",
                details: .init(correlationId: correlationId)
            )
        }
        let metadata: ProviderMetadata
        do {
            metadata = try await identityProviders.metadata(for: request.authority, correlationId: correlationId)
        } catch {
            return try await fallback(found, request: request, failure: error, correlationId: correlationId)
        }
        let context = IssueContext(
            clientId: request.clientId,
            authority: request.authority,
            requestedScopes: request.scopes,
            account: account
        )
        var attempt = RefreshAttempt()
        var next = 0
        while next < candidates.count {
            let candidate = candidates[next]
            next += 1
            guard attempt.shouldTry(candidate, for: request.clientId) else { continue }
            let outcome = try await redemptions.withLock(candidate.token.secret) {
                logger.debug(
                    "another request is redeeming this refresh token: waiting for its turn",
                    metadata: ["correlation_id": "\(correlationId)", "client_id": "\(request.clientId)"]
                )
            } _: { () async throws(BrokerFailure) -> Redemption in
                // The turn may have come after another request's redemption of this token ended: it rotated the
                // token, or found it dead. Then this one starts again from what the cache holds now.
                guard try cache.read(candidate.isCached) else { return .stale }
                return try await redeem(
                    candidate,
                    for: request,
                    found: found,
                    context: context,
                    metadata: metadata,
                    correlationId: correlationId
                )
            }
            switch outcome {
            case .answered(let result):
                return result
            case .failed(let failure, let outsideFamily):
                attempt.failed(candidate, failure, outsideFamily: outsideFamily)
            case .stale:
                // Another redemption, a sign-in or a sign-out changed the tokens meanwhile: start again from the
                // current ones.
                candidates = try refreshCandidates(for: request, account: account)
                next = 0
                guard !candidates.isEmpty else {
                    throw BrokerFailure(
                        .interactionRequired,
                        "the refresh tokens of \(account.displayName) were removed while this request refreshed (a "
                            + "sign-out, or the provider refused them); sign in interactively",
                        details: .init(correlationId: correlationId)
                    )
                }
            }
        }
        throw attempt.lastFailure
            ?? BrokerFailure(
                .interactionRequired,
                "sign in interactively",
                details: .init(correlationId: correlationId)
            )
    }

    /// The refresh tokens a request may redeem, in the order to try them.
    private func refreshCandidates(
        for request: SilentRequest,
        account: AccountEntry
    ) throws(BrokerFailure) -> [CachedRefreshToken] {
        let environments = request.authority.environmentAliases
        return try cache.read { contents in
            contents.refreshCandidates(for: request.clientId, account: account, environments: environments)
        }
    }

    /// What one refresh token's turn came to.
    private enum Redemption {
        /// The caller's answer: new tokens, or the cached one while the provider is down.
        case answered(TokenResult)
        /// The provider refused the token; `outsideFamily` when it said the app is not in the token's family.
        case failed(BrokerFailure, outsideFamily: Bool)
        /// The cache no longer holds the token as it was: another redemption rotated or removed it while this one
        /// waited, or a sign-out removed it (or a sign-in replaced it) while the provider answered; nothing was kept.
        case stale
    }

    /// The refresh tokens a request tried, and why the last one failed.
    private struct RefreshAttempt {
        private var tried: Set<Secret> = []
        private var familyRefused = false
        private(set) var lastFailure: BrokerFailure?

        /// Whether `candidate` is worth a try: not tried already (before a restart), and not a family token once
        /// the provider said the app is outside the family.
        func shouldTry(_ candidate: CachedRefreshToken, for clientId: String) -> Bool {
            !tried.contains(candidate.token.secret)
                && !(familyRefused && candidate.token.clientId.lowercased() != clientId.lowercased())
        }

        mutating func failed(_ candidate: CachedRefreshToken, _ failure: BrokerFailure, outsideFamily: Bool) {
            tried.insert(candidate.token.secret)
            familyRefused = familyRefused || outsideFamily
            lastFailure = failure
        }
    }

    /// Redeems `candidate` and stores what the provider answered, during the token's turn; the failures the next
    /// candidate may mend are returned, the rest thrown.
    private func redeem(
        _ candidate: CachedRefreshToken,
        for request: SilentRequest,
        found: CacheLookup,
        context: IssueContext,
        metadata: ProviderMetadata,
        correlationId: String
    ) async throws(BrokerFailure) -> Redemption {
        let redeemed: (response: TokenResponse, claims: [String: JSONValue]?)
        do {
            redeemed = try await redeem(
                candidate,
                for: request,
                context: context,
                metadata: metadata,
                correlationId: correlationId
            )
        } catch {
            let failure = BrokerFailure(oauth: error, correlationId: correlationId)
            switch error.kind {
            case .rejected where error.suberror == "client_mismatch":
                // The app is not in the family: remember it, as MSAL does, and use its own tokens.
                await markOutsideFamily(request.clientId, environment: found.cacheAccount.environment)
                return .failed(failure, outsideFamily: true)
            case .rejected where error.suberror == "bad_token":
                // The provider says this refresh token is dead (revoked, or replayed): keeping it helps no one. A
                // sign-in that replaced it meanwhile brought a live one: try that.
                guard await forget(candidate) else { return .stale }
                return .failed(failure, outsideFamily: false)
            case .rejected where error.requiresInteraction:
                return .failed(failure, outsideFamily: false)
            case .rejected where error.error == "invalid_scope":
                // Scopes beyond what the user granted: only a sign-in can grant them.
                let interaction = BrokerFailure(
                    .interactionRequired,
                    "the sign-in did not grant these scopes; sign in interactively to ask for them",
                    details: failure.details
                )
                return .failed(interaction, outsideFamily: false)
            case .unavailable, .throttled, .invalidResponse, .canceled, .expired:
                return .answered(
                    try await fallback(found, request: request, failure: failure, correlationId: correlationId)
                )
            case .rejected, .invalidRequest:
                throw failure
            }
        }
        let now = nowSeconds
        let issued = try cache.read { contents throws(BrokerFailure) in
            try IssuedTokens(
                redeemed.response,
                for: context,
                claims: redeemed.claims,
                redeemed: candidate,
                in: contents,
                now: now
            )
        }
        // The answer does not wait for the disk: the write is in line before anyone can ask again, and memory
        // already answers with the new tokens (the next turn never redeems the rotated-out token).
        let stored = try await storeRefreshed(
            issued,
            redeemed: candidate,
            clientInfo: redeemed.response.clientInfo,
            correlationId: correlationId
        )
        return stored.map(Redemption.answered) ?? .stale
    }

    /// Redeems one refresh token: the response and its id_token's checked claims.
    private func redeem(
        _ candidate: CachedRefreshToken,
        for request: SilentRequest,
        context: IssueContext,
        metadata: ProviderMetadata,
        correlationId: String
    ) async throws(OAuthError) -> (response: TokenResponse, claims: [String: JSONValue]?) {
        let refreshToken = candidate.token
        let grant = RefreshTokenGrant(
            clientId: request.clientId,
            refreshToken: refreshToken.secret,
            scopes: request.refreshScopes(for: refreshToken),
            claims: request.claims,
            requestsClientInfo: request.authority.isEntra,
            anchorMailbox: request.authority.isEntra
                ? context.account.flatMap { $0.anchorMailbox } : nil
        )
        let response = try await grant.redeem(
            at: metadata.tokenEndpoint,
            via: identityProviders.endpoint,
            correlationId: correlationId
        )
        logger.debug(
            "refreshed",
            metadata: [
                "correlation_id": "\(correlationId)", "client_id": "\(request.clientId)",
                "family": "\(refreshToken.isFamilyToken)", "response": "\(response)",
            ]
        )
        let now = nowSeconds
        do {
            let claims = try await identityProviders.validatedClaims(
                of: response,
                metadata: metadata,
                clientId: request.clientId,
                nonce: nil,
                now: now,
                knownSubject: context.account?.localAccountId
            )
            return (response, claims)
        } catch {
            // Untrusted answer: hand nothing out, but keep a rotated refresh token, or the sign-in is lost.
            await keepRotatedRefreshToken(response, context: context, redeemed: candidate, now: now)
            throw OAuthError(.invalidResponse, "the identity provider's id_token was refused: \(error)")
        }
    }

    private func keepRotatedRefreshToken(
        _ response: TokenResponse,
        context: IssueContext,
        redeemed: CachedRefreshToken,
        now: Int64
    ) async {
        guard response.refreshToken != nil,
            let issued = try? cache.read({ contents throws(BrokerFailure) in
                try IssuedTokens(response, for: context, claims: nil, redeemed: redeemed, in: contents, now: now)
            })
        else { return }
        let changes = CacheChanges(
            identified: issued.changes.identifiedUpserts.filter { _, id in id.section == .refreshToken }
                .map { entry, id in (entry, id) },
            deletions: issued.changes.deletions.filter { $0.section == .refreshToken }
        )
        // Unless a sign-out removed the redeemed token meanwhile, or a sign-in replaced it.
        do {
            _ = try await cache.commitInMemory(changes, provided: redeemed.isCached)
        } catch {
            logger.error("a rotated refresh token could not be stored", metadata: ["error": "\(error)"])
        }
    }

    /// A cached token while the provider is down, or the failure.
    private func fallback(
        _ found: CacheLookup,
        request: SilentRequest,
        failure: BrokerFailure,
        correlationId: String
    ) async throws(BrokerFailure) -> TokenResult {
        guard !request.bypassesCache, var fallback = found.fallback,
            let secret = try await secret(of: fallback.token)
        else {
            throw failure
        }
        fallback.token.secret = secret
        logger.notice(
            "identity provider unavailable; handing out the cached token",
            metadata: ["correlation_id": "\(correlationId)", "reason": "\(failure.message)"]
        )
        return found.tokenResult(
            fallback.token,
            scopes: fallback.scopes.scopes,
            source: .cache,
            correlationId: correlationId
        )
    }

    private func markOutsideFamily(_ clientId: String, environment: String) async {
        let metadata = AppMetadata(clientId: clientId, environment: environment, familyId: nil)
        do {
            try await cache.commit(CacheChanges(upserts: [.appMetadata(metadata)]))
        } catch {
            logger.error("the app's metadata could not be written", metadata: ["error": "\(error)"])
        }
    }

    /// Removes a refresh token the provider called dead, unless the cache holds another one in its place by then (a
    /// sign-in's, even one still on its way to the disk); false when it does.
    private func forget(_ refreshToken: CachedRefreshToken) async -> Bool {
        do {
            return try await cache.commitInMemory(
                CacheChanges(deletions: [refreshToken.id]),
                provided: refreshToken.isCached
            )
        } catch {
            logger.error("a dead refresh token could not be removed", metadata: ["error": "\(error)"])
            return true
        }
    }
}
