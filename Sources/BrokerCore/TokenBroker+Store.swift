import BrokerCache
import BrokerOAuth
import BrokerProtocol
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
    let idToken: IdToken?

    /// Builds the entries.
    ///
    /// `claims` are the id_token's, already validated (nil when the response had none, or it is not kept);
    /// `redeemed` is the refresh token the response answered, removed when a new one replaces it.
    init(
        _ response: TokenResponse,
        for context: IssueContext,
        claims: [String: JSONValue]?,
        redeemed: RefreshToken?,
        in contents: borrowing CacheContents,
        now: Int64
    ) throws(BrokerFailure) {
        let authority = context.authority
        let clientInfo = response.clientInfo.flatMap(ClientInfo.init(encoded:))
        let homeAccountId: String
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
        let existing =
            context.account.flatMap { $0.homeAccountId == homeAccountId ? $0 : nil }
        let environment =
            existing.flatMap {
                authority.environmentAliases.contains($0.environment.lowercased()) ? $0.environment : nil
            }
            ?? authority.environment
        let realm: String
        if authority.isEntra {
            realm =
                authority.fixedRealm ?? claims?["tid"]?.stringValue ?? clientInfo?.utid ?? existing?.realm ?? ""
        } else {
            realm = authority.fixedRealm ?? existing?.realm ?? ""
        }

        var upserts: [CacheEntry] = []
        var deletions: [EntryID] = []

        // The account: refreshed from the id_token when one came, else kept as it is.
        let accountEntry: AccountEntry
        let previous = contents.accounts[
            AccountEntry(
                homeAccountId: homeAccountId,
                environment: environment,
                realm: realm,
                localAccountId: "",
                username: ""
            ).id.key
        ]
        if let claims {
            var account =
                previous
                ?? AccountEntry(
                    homeAccountId: homeAccountId,
                    environment: environment,
                    realm: realm,
                    localAccountId: "",
                    username: "",
                    authorityType: authority.isEntra ? "MSSTS" : "Generic"
                )
            account.localAccountId =
                claims["oid"]?.stringValue ?? claims["sub"]?.stringValue ?? clientInfo?.uid ?? account.localAccountId
            account.username =
                claims["preferred_username"]?.stringValue ?? claims["upn"]?.stringValue
                ?? claims["email"]?.stringValue ?? existing?.username ?? account.username
            account.name = claims["name"]?.stringValue ?? account.name
            account.givenName = claims["given_name"]?.stringValue ?? account.givenName
            account.familyName = claims["family_name"]?.stringValue ?? account.familyName
            if let encoded = response.clientInfo { account.clientInfo = encoded }
            upserts.append(.account(account))
            accountEntry = account
        } else if let previous {
            accountEntry = previous
        } else {
            var account =
                existing
                ?? AccountEntry(
                    homeAccountId: homeAccountId,
                    environment: environment,
                    realm: realm,
                    localAccountId: clientInfo?.uid ?? "",
                    username: "",
                    authorityType: authority.isEntra ? "MSSTS" : "Generic"
                )
            account.environment = environment
            account.realm = realm
            upserts.append(.account(account))
            accountEntry = account
        }

        // The access token, replacing the app's tokens whose scopes overlap (MSAL does the same).
        let granted = response.scope.map { ScopeSet(target: $0) } ?? context.requestedScopes
        let refreshIn = response.refreshIn ?? (response.expiresIn > 7200 ? response.expiresIn / 2 : nil)
        let accessToken = AccessToken(
            homeAccountId: homeAccountId,
            environment: environment,
            clientId: context.clientId,
            realm: realm,
            target: granted.target,
            secret: response.accessToken,
            tokenType: response.tokenType,
            cachedAt: now,
            expiresOn: now + response.expiresIn,
            extendedExpiresOn: response.extendedExpiresIn.map { now + $0 },
            refreshOn: refreshIn.map { now + $0 }
        )
        for (old, scopes) in contents.accessTokens(
            homeAccountId: homeAccountId,
            clientId: context.clientId,
            realm: realm,
            environments: authority.environmentAliases
        ) where scopes.overlaps(granted) && old.id != accessToken.id {
            deletions.append(old.id)
        }
        upserts.append(.accessToken(accessToken))

        // The refresh token: one per app and account. The redeemed one goes when the provider rotated it.
        if let secret = response.refreshToken {
            // The grant's scopes: kept across refreshes (a refresh does not widen or narrow the grant), set by a
            // sign-in. Generic providers refuse a refresh that asks for more than the grant had. A multi-resource
            // refresh token (from ADAL, without a target) stays one.
            let grantScopes: String? =
                if let redeemed { redeemed.target } else {
                    ScopeSet(granted.scopes + (response.scope == nil ? Array(ScopeSet.reserved) : [])).target
                }
            let refreshToken = RefreshToken(
                homeAccountId: homeAccountId,
                environment: environment,
                clientId: context.clientId,
                target: grantScopes,
                secret: secret,
                familyId: response.familyId,
                lastModificationTime: now
            )
            for old in contents.refreshTokens(homeAccountId: homeAccountId, environments: authority.environmentAliases)
            where old.id != refreshToken.id
                && (old.clientId.lowercased() == context.clientId.lowercased() || old.id == redeemed?.id)
            {
                deletions.append(old.id)
            }
            upserts.append(.refreshToken(refreshToken))
        }

        // The id token, as it came (its claims were checked).
        var idToken: IdToken?
        if claims != nil, let secret = response.idToken {
            let entry = IdToken(
                homeAccountId: homeAccountId,
                environment: environment,
                realm: realm,
                clientId: context.clientId,
                secret: secret
            )
            upserts.append(.idToken(entry))
            idToken = entry
        }

        // The app's metadata: seen, and in the family only when the provider said so.
        upserts.append(
            .appMetadata(AppMetadata(clientId: context.clientId, environment: environment, familyId: response.familyId))
        )

        changes = CacheChanges(upserts: upserts, deletions: deletions)
        account = accountEntry
        self.accessToken = accessToken
        self.idToken = idToken
    }
}

extension TokenBroker {
    /// Writes issued tokens and builds the result the caller gets.
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
        let account = issued.account
        let token = issued.accessToken
        return cache.read { contents in
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
                grantedScopes: token.scopes.scopes,
                idToken: issued.idToken?.secret ?? idToken?.token.secret,
                clientInfo: clientInfo ?? contents.clientInfo(of: account),
                account: contents.wireAccount(account, idToken: idToken),
                tokenSource: .identityProvider,
                correlationId: correlationId
            )
        }
    }
}
