import BrokerCache
public import BrokerProtocol
import Foundation

/// A grant checked and its account resolved, before its endpoint is bound.
public struct GrantPlan: Sendable {
    let clientId: String
    let authority: String?
    let resources: [String]
    let scopes: [String]
    let accountIdentifier: String
    let username: String?
    let lifetimeSeconds: Int64
    let label: String?
    /// Where the endpoint is to listen (port 0: any).
    public let listen: ListenAddress
}

extension TokenBroker {
    /// The longest a grant may last: 30 days.
    static let longestGrant = 2_592_000
    /// A grant's lifetime when the caller does not say: 8 hours.
    static let defaultGrantLifetime = 28_800

    /// `createGrant`, first half: checks the params and resolves the account the way `acquireTokenSilently` does
    /// (the only account, or the one named), so that a grant never names an account the broker does not hold.
    public func planGrant(_ params: CreateGrantParams) throws(BrokerFailure) -> GrantPlan {
        typealias Field = CreateGrantParams.CodingKeys
        let resources = params.resources ?? []
        let scopes = params.scopes ?? []
        guard !resources.isEmpty || !scopes.isEmpty else {
            throw BrokerFailure.invalidParams(ParamField(Field.resources), "give at least one resource or scope")
        }
        guard resources.count + scopes.count <= 32 else {
            throw BrokerFailure.invalidParams(ParamField(Field.scopes), "at most 32 resources and scopes")
        }
        for (field, value) in resources.map({ (Field.resources, $0) }) + scopes.map({ (Field.scopes, $0) }) {
            guard !value.isEmpty, value.utf8.count <= 512, !value.unicodeScalars.contains(where: { $0.value <= 0x20 })
            else {
                throw BrokerFailure.invalidParams(ParamField(field), "each must be 1 to 512 bytes without spaces")
            }
        }
        let lifetime = params.lifetimeSeconds ?? Self.defaultGrantLifetime
        guard (1...Self.longestGrant).contains(lifetime) else {
            throw BrokerFailure.invalidParams(
                ParamField(Field.lifetimeSeconds),
                "must be from 1 second to 30 days (2592000)"
            )
        }
        if let label = params.label {
            guard !label.isEmpty, label.unicodeScalars.count <= 64,
                !label.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f })
            else {
                throw BrokerFailure.invalidParams(ParamField(Field.label), "1 to 64 characters, no control characters")
            }
        }
        let listen: ListenAddress
        switch params.listen.map(ListenAddress.parse) ?? .success(.loopback) {
        case .success(let address): listen = address
        case .failure(let error): throw BrokerFailure.invalidParams(ParamField(Field.listen), error.reason)
        }
        // Resolve the account once, then check every ask against that account: each is a valid silent request.
        let asks = resources.map(GrantRecord.Ask.resource) + scopes.map(GrantRecord.Ask.scope)
        var first = AuthParameters(clientId: params.clientId, authority: params.authority, account: params.account)
        first.set(asks[0])
        let request = try SilentRequest(first, broker: self)
        let found = try cache.read { contents throws(BrokerFailure) in
            try request.lookUp(in: contents, now: nowSeconds)
        }
        for ask in asks.dropFirst() {
            var parameters = first
            parameters.account = AccountSelector(identifier: found.account.identifier)
            parameters.set(ask)
            _ = try SilentRequest(parameters, broker: self)
        }
        return GrantPlan(
            clientId: params.clientId,
            authority: params.authority,
            resources: resources,
            scopes: scopes,
            accountIdentifier: found.account.identifier,
            username: found.account.username.isEmpty ? nil : found.account.username,
            lifetimeSeconds: Int64(lifetime),
            label: params.label,
            listen: listen
        )
    }

    /// `createGrant`, second half: keeps the grant, its endpoint bound at `boundAt`, and returns it with its
    /// secret (which the broker does not keep).
    public func createGrant(
        _ plan: GrantPlan,
        boundAt: ListenAddress,
        caller: Caller,
        correlationId: String
    ) async throws(BrokerFailure) -> (grant: GrantRecord, secret: Secret) {
        let made = GrantBook.newSecret()
        let now = nowSeconds
        let grant = GrantRecord(
            id: made.id,
            label: plan.label ?? made.id,
            clientId: plan.clientId,
            authority: plan.authority,
            resources: plan.resources,
            scopes: plan.scopes,
            accountIdentifier: plan.accountIdentifier,
            username: plan.username,
            createdAt: now,
            expiresAt: now + plan.lifetimeSeconds,
            listen: boundAt,
            secretDigest: made.digest
        )
        do {
            try await grants.add(grant)
        } catch {
            throw BrokerFailure(.internalError, "the grant could not be kept", underlying: error)
        }
        audit.grantChanged("created", by: caller, grant: grant, correlationId: correlationId)
        return (grant, Secret(made.secret))
    }

    /// `revokeGrant`: the grant stops answering at once, and is gone from the store.
    public func revokeGrant(
        _ params: RevokeGrantParams,
        caller: Caller
    ) async throws(BrokerFailure) -> GrantRecord {
        let grant = try grants.named(params.grant).get()
        do {
            try await grants.remove(grant.id)
        } catch {
            throw BrokerFailure(
                .internalError,
                "the grant stopped answering, but could not be deleted from the store: once the broker restarts "
                    + "it answers again, and must be revoked again",
                underlying: error
            )
        }
        audit.grantChanged(
            "revoked",
            by: caller,
            grant: grant,
            correlationId: params.effectiveCorrelationId
        )
        return grant
    }

    /// A token for a holder of `grant` asking for `resource`: through the same silent path as
    /// `acquireTokenSilently` (cache, refresh and family refresh tokens), never a sign-in.
    ///
    /// Throws ``BrokerFailure`` with `permission_denied` when the grant does not cover `resource`.
    public func answer(
        _ grant: GrantRecord,
        resource: String,
        caller: Caller,
        correlationId: String
    ) throws(BrokerFailure) -> Answer<AcquireTokenResult> {
        guard let ask = grant.ask(for: resource) else {
            throw BrokerFailure(.permissionDenied, "the grant does not cover the resource \(shown(resource))")
        }
        // A grant revoked (or expired) while a refresh is under way gets nothing, and no audit line says otherwise.
        let id = grant.id
        return try answerSilently(
            grant.silentParams(for: ask, correlationId: correlationId),
            caller: caller,
            entitled: { [grants] in grants.isServing(id) }
        )
    }

    /// `discardAccessToken`: drops the access token its audience refused, so that the next request refreshes.
    public func discardAccessToken(
        _ params: DiscardAccessTokenParams,
        caller: Caller
    ) async throws(BrokerFailure) -> DiscardAccessTokenResult {
        let token = params.accessToken
        guard !token.isEmpty else {
            throw BrokerFailure.invalidParams(
                ParamField(DiscardAccessTokenParams.CodingKeys.accessToken),
                "must not be empty"
            )
        }
        var found: AccessToken?
        for candidate in try cache.read({ contents in contents.accessTokens(holding: token) })
        where try await secret(of: candidate) == token {
            found = candidate
            break
        }
        guard let found else { return DiscardAccessTokenResult(discarded: false) }
        do {
            try await cache.commit(CacheChanges(deletions: [found.id]))
        } catch {
            throw BrokerFailure(.internalError, "the cache could not be written", underlying: error)
        }
        audit.accessTokenDiscarded(
            by: caller,
            clientId: found.clientId,
            correlationId: params.effectiveCorrelationId
        )
        return DiscardAccessTokenResult(discarded: true)
    }
}

extension AuthParameters {
    /// Asks for what a grant allows: its resource, or its scope.
    mutating func set(_ ask: GrantRecord.Ask) {
        switch ask {
        case .resource(let resource):
            self.resource = resource
            requestedScopes = nil
        case .scope(let scope):
            requestedScopes = [scope]
            resource = nil
        }
    }
}
