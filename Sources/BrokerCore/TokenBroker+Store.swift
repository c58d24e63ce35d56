import BrokerCache
import BrokerOAuth
import BrokerProtocol
import BrokerTime
import Foundation

/// What a token response is stored for: the app, the authority, the scopes asked, and the account it refreshed
/// (nil after an interactive sign-in, which may bring a new account).
struct IssueContext: Sendable {
    let clientId: String
    let authority: Authority
    let requestedScopes: ScopeSet
    let account: AccountEntry?
}

/// The cache entries a token response becomes, written in one commit: the access token (replacing those of
/// overlapping scopes), the refresh token (replacing the app's previous one and the one redeemed, so a rotated
/// token never lingers), the id token, the account and the app's metadata (with its family, as MSAL writes it).
struct IssuedTokens {
    let changes: CacheChanges
    let account: AccountEntry
    let accessToken: AccessToken
    /// The access token's scopes, as its target holds them.
    let grantedScopes: [String]
    let idToken: IdToken?

    /// Builds the entries: one builder per kind, each from where the answer places the account.
    ///
    /// `claims` are the id_token's, already validated (nil when the response had none, or it is not kept);
    /// `redeemed` is the refresh token the response answered, removed when a new one replaces it.
    init(
        _ response: TokenResponse,
        for context: IssueContext,
        claims: [String: JSONValue]?,
        redeemed: CachedRefreshToken?,
        in contents: borrowing CacheContents,
        now: Int64
    ) throws(BrokerFailure) {
        let place = try Placement(response, context: context, claims: claims)
        // With their ids, worked out here once (CacheChanges.upsertIDs).
        var upserts: [(entry: CacheEntry, id: EntryID)] = []
        var deletions: [EntryID] = []

        let (account, accountID, accountChanged) = Self.account(
            at: place,
            response: response,
            claims: claims,
            in: contents
        )
        if accountChanged { upserts.append((.account(account), accountID)) }

        let granted = response.scope.map(Self.grantedScopes) ?? GrantedScopes(context.requestedScopes)
        let (accessToken, accessTokenID, replacedAccessTokens) = Self.accessToken(
            at: place,
            response: response,
            granted: granted,
            context: context,
            in: contents,
            now: now
        )
        deletions += replacedAccessTokens
        upserts.append((.accessToken(accessToken), accessTokenID))

        if let (refreshToken, refreshTokenID, replaced) = Self.refreshToken(
            at: place,
            response: response,
            granted: granted,
            context: context,
            redeemed: redeemed,
            in: contents,
            now: now
        ) {
            deletions += replaced
            upserts.append((.refreshToken(refreshToken), refreshTokenID))
        }

        // The id token, as it came (its claims were checked).
        let idToken = claims == nil ? nil : Self.idToken(at: place, response: response, clientId: context.clientId)
        let idTokenID = idToken?.id
        if let idToken, let idTokenID { upserts.append((.idToken(idToken), idTokenID)) }

        // The app's metadata: seen, and in the family only when the provider said so.
        let metadata = AppMetadata(
            clientId: context.clientId,
            environment: place.environment,
            familyId: response.familyId
        )
        upserts.append((.appMetadata(metadata), metadata.id))

        changes = CacheChanges(
            identified: upserts,
            deletions: deletions,
            idTokenClaims: idTokenID.flatMap { id in claims.map { [id.key: $0] } } ?? [:]
        )
        self.account = account
        self.accessToken = accessToken
        self.grantedScopes = granted.stored
        self.idToken = idToken
    }

    /// Where an answer's tokens go: whose they are, in which environment and tenant.
    struct Placement {
        let homeAccountId: String
        let environment: String
        let realm: String
        let authority: Authority
        let clientInfo: ClientInfo?
        /// The account the request was for, when the answer is about the same person.
        let existing: AccountEntry?

        init(_ response: TokenResponse, context: IssueContext, claims: [String: JSONValue]?) throws(BrokerFailure) {
            authority = context.authority
            clientInfo = response.clientInfo.flatMap(ClientInfo.init(encoded:))
            if authority.isEntra, let clientInfo {
                homeAccountId = clientInfo.homeAccountId
            } else if let existing = context.account {
                homeAccountId = existing.homeAccountId
            } else if let subject = claims?["sub"]?.stringValue, !subject.isEmpty {
                homeAccountId = subject
            } else {
                throw BrokerFailure(
                    .serverError,
                    "the identity provider's answer names no account (no client_info and no id_token)"
                )
            }
            let homeAccountId = homeAccountId
            existing = context.account.flatMap { $0.homeAccountId == homeAccountId ? $0 : nil }
            let authority = authority
            environment =
                existing.flatMap {
                    authority.environmentAliases.contains($0.environment.lowercased()) ? $0.environment : nil
                }
                ?? authority.environment
            if authority.isEntra {
                realm =
                    authority.fixedRealm ?? claims?["tid"]?.stringValue ?? clientInfo?.utid ?? existing?.realm ?? ""
            } else {
                realm = authority.fixedRealm ?? existing?.realm ?? ""
            }
        }

        /// A new account entry here.
        func newAccount(localAccountId: String) -> AccountEntry {
            AccountEntry(
                homeAccountId: homeAccountId,
                environment: environment,
                realm: realm,
                localAccountId: localAccountId,
                username: "",
                authorityType: authority.isEntra ? "MSSTS" : "Generic"
            )
        }
    }

    /// The account and its id: refreshed from the id_token when one came, else kept as it is; true when it must be
    /// written.
    private static func account(
        at place: Placement,
        response: TokenResponse,
        claims: [String: JSONValue]?,
        in contents: borrowing CacheContents
    ) -> (AccountEntry, id: EntryID, changed: Bool) {
        // Placed here, the account is keyed by where it is placed, whatever else it holds.
        let id = AccountEntry(
            homeAccountId: place.homeAccountId,
            environment: place.environment,
            realm: place.realm,
            localAccountId: "",
            username: ""
        ).id
        let previous = contents.accounts[id.key]
        guard let claims else {
            if let previous { return (previous, id, false) }
            var account = place.existing ?? place.newAccount(localAccountId: place.clientInfo?.uid ?? "")
            account.environment = place.environment
            account.realm = place.realm
            return (account, id, true)
        }
        var account = previous ?? place.newAccount(localAccountId: "")
        account.localAccountId =
            claims["oid"]?.stringValue ?? claims["sub"]?.stringValue ?? place.clientInfo?.uid ?? account.localAccountId
        account.username =
            claims["preferred_username"]?.stringValue ?? claims["upn"]?.stringValue ?? claims["email"]?.stringValue
            ?? place.existing?.username ?? account.username
        account.name = claims["name"]?.stringValue ?? account.name
        account.givenName = claims["given_name"]?.stringValue ?? account.givenName
        account.familyName = claims["family_name"]?.stringValue ?? account.familyName
        if let encoded = response.clientInfo { account.clientInfo = encoded }
        return (account, id, true)
    }

    /// The scopes a token is granted, with the two forms its entries keep them in.
    struct GrantedScopes: Sendable {
        let set: ScopeSet
        /// ``ScopeSet/target``: the access token's.
        let target: String
        /// ``ScopeSet/storedScopes``: the answer's.
        let stored: [String]

        init(_ set: ScopeSet) {
            self.set = set
            target = set.target
            stored = set.storedScopes
        }
    }

    /// The granted scopes of a provider's `scope`.
    ///
    /// The refreshes of a token answer with the same `scope`: the last one is parsed, sorted and joined once (it
    /// was 20,000 instructions of each refresh, callgrind).
    private static func grantedScopes(_ scope: String) -> GrantedScopes {
        lastGranted.value(of: scope) { GrantedScopes(ScopeSet(target: $0)) }
    }

    private static let lastGranted = LastDecoded<String, GrantedScopes>()

    /// The access token, and the app's tokens it replaces: those whose scopes overlap (MSAL does the same).
    private static func accessToken(
        at place: Placement,
        response: TokenResponse,
        granted: GrantedScopes,
        context: IssueContext,
        in contents: borrowing CacheContents,
        now: Int64
    ) -> (AccessToken, id: EntryID, replaced: [EntryID]) {
        let refreshIn = response.refreshIn ?? (response.expiresIn > 7200 ? response.expiresIn / 2 : nil)
        let token = AccessToken(
            homeAccountId: place.homeAccountId,
            environment: place.environment,
            clientId: context.clientId,
            realm: place.realm,
            target: granted.target,
            secret: response.accessToken,
            tokenType: response.tokenType,
            cachedAt: now,
            expiresOn: now + response.expiresIn,
            extendedExpiresOn: response.extendedExpiresIn.map { now + $0 },
            refreshOn: refreshIn.map { now + $0 }
        )
        let id = token.id
        let replaced = contents.accessTokenIDs(
            homeAccountId: place.homeAccountId,
            clientId: context.clientId,
            realm: place.realm,
            environments: place.authority.environmentAliases
        ).lazy.filter { old, scopes in old != id && scopes.overlaps(granted.set) }.map(\.id)
        return (token, id, Array(replaced))
    }

    /// The refresh token, when one came, and those it replaces: one per app and account; the redeemed one goes when
    /// the provider rotated it.
    private static func refreshToken(
        at place: Placement,
        response: TokenResponse,
        granted: GrantedScopes,
        context: IssueContext,
        redeemed: CachedRefreshToken?,
        in contents: borrowing CacheContents,
        now: Int64
    ) -> (RefreshToken, id: EntryID, replaced: [EntryID])? {
        guard let secret = response.refreshToken else { return nil }
        // The grant's scopes: kept across refreshes (a refresh does not widen or narrow the grant), set by a
        // sign-in. Generic providers refuse a refresh that asks for more than the grant had. A multi-resource
        // refresh token (from ADAL, without a target) stays one.
        let grantScopes: String? =
            if let redeemed { redeemed.token.target } else {
                ScopeSet(granted.set.scopes + (response.scope == nil ? Array(ScopeSet.reserved) : [])).target
            }
        let token = RefreshToken(
            homeAccountId: place.homeAccountId,
            environment: place.environment,
            clientId: context.clientId,
            target: grantScopes,
            secret: secret,
            familyId: response.familyId,
            lastModificationTime: now
        )
        let id = token.id
        let redeemedId = redeemed?.id
        let clientId = context.clientId.lowercased()
        let replaced = contents.identifiedRefreshTokens(
            homeAccountId: place.homeAccountId,
            environments: place.authority.environmentAliases
        ).lazy.filter { old in
            old.id != id && (old.token.clientId.lowercased() == clientId || old.id == redeemedId)
        }.map(\.id)
        return (token, id, Array(replaced))
    }

    /// The id token, when one came.
    private static func idToken(at place: Placement, response: TokenResponse, clientId: String) -> IdToken? {
        response.idToken.map { secret in
            IdToken(
                homeAccountId: place.homeAccountId,
                environment: place.environment,
                realm: place.realm,
                clientId: clientId,
                secret: secret
            )
        }
    }
}

extension TokenBroker {
    /// Writes issued tokens durably and builds the result the caller gets.
    func store(
        _ issued: IssuedTokens,
        clientInfo: String?,
        correlationId: String
    ) async throws(BrokerFailure) -> TokenResult {
        do {
            try await cache.commit(issued.changes)
        } catch {
            throw BrokerFailure(.internalError, "the cache could not be written", underlying: error)
        }
        return try result(of: issued, clientInfo: clientInfo, correlationId: correlationId)
    }

    /// Keeps a refresh's tokens once memory holds them (their write follows in line), provided the cache still holds
    /// the refresh token it redeemed, and builds the result the caller gets; nil, keeping nothing, when it does not.
    ///
    /// A sign-out while the provider answered removed that token, and the account stays signed out; a sign-in
    /// replaced it, and its tokens are newer than this answer's.
    func storeRefreshed(
        _ issued: IssuedTokens,
        redeemed: CachedRefreshToken,
        clientInfo: String?,
        correlationId: String
    ) async throws(BrokerFailure) -> TokenResult? {
        let kept: Bool
        do {
            kept = try await cache.commitInMemory(issued.changes, provided: redeemed.isCached)
        } catch {
            throw BrokerFailure(.internalError, "the cache could not be written", underlying: error)
        }
        guard kept else { return nil }
        return try result(of: issued, clientInfo: clientInfo, correlationId: correlationId)
    }

    /// The result the caller gets for stored tokens.
    private func result(
        of issued: IssuedTokens,
        clientInfo: String?,
        correlationId: String
    ) throws(BrokerFailure) -> TokenResult {
        let account = issued.account
        let token = issued.accessToken
        return try cache.read { contents in
            let idToken = contents.idToken(
                homeAccountId: account.homeAccountId,
                clientId: token.clientId,
                realm: token.realm,
                environments: [token.environment.lowercased()]
            )
            return TokenResult(
                accessToken: token.secret,
                accessTokenType: token.tokenType,
                expiresOn: token.expiresOn * 1000,
                extendedExpiresOn: token.extendedExpiresOn.map { $0 * 1000 },
                refreshOn: token.refreshOn.map { $0 * 1000 },
                grantedScopes: issued.grantedScopes,
                idToken: issued.idToken?.secret ?? idToken?.token.secret,
                clientInfo: clientInfo ?? contents.clientInfo(of: account),
                account: contents.wireAccount(account, idToken: idToken),
                tokenSource: .identityProvider,
                correlationId: correlationId
            )
        }
    }
}
