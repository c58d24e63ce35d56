import BrokerCache
import BrokerOAuth
public import BrokerProtocol

extension TokenBroker {
    /// `getAccounts`: every account, or those with tokens for a client id (or its family), or of an authority.
    public func accounts(_ params: GetAccountsParams) throws(BrokerFailure) -> AccountsResult {
        let wanted: Authority? = try params.authority.map { (text) throws(BrokerFailure) in
            try self.authority(text, field: ParamField(GetAccountsParams.CodingKeys.authority))
        }
        let clientId = params.clientId?.lowercased()
        let accounts = try cache.read { contents -> [Account] in
            contents.accounts.values.filter { account in
                if let wanted {
                    guard wanted.environmentAliases.contains(account.environment.lowercased()) else { return false }
                    if let realm = wanted.fixedRealm, realm.lowercased() != account.realm.lowercased() { return false }
                }
                if let clientId {
                    return contents.account(account, hasTokensFor: clientId)
                }
                return true
            }
            .sorted(by: CacheContents.accountOrder)
            .map { contents.wireAccount($0) }
        }
        return AccountsResult(accounts: accounts)
    }

    /// `getAccount`: by identifier when given, else (or when the identifier is unknown) by username.
    public func account(_ params: GetAccountParams) throws(BrokerFailure) -> AccountResult {
        let selector = params.selector
        guard !selector.isEmpty else {
            throw BrokerFailure.invalidParams(
                ParamField(GetAccountParams.CodingKeys.identifier),
                "give an identifier or a username"
            )
        }
        return try cache.read { contents throws(BrokerFailure) -> AccountResult in
            let candidates = contents.accounts(matching: selector)
            guard let account = candidates.preferred(realm: nil) else {
                throw BrokerFailure(.noAccount, "no account matches \(selector.described)")
            }
            return AccountResult(account: contents.wireAccount(account))
        }
    }

    /// `removeAccount`: deletes the account and all its tokens, or only one client id's tokens.
    public func removeAccount(
        _ params: RemoveAccountParams,
        caller: Caller
    ) async throws(BrokerFailure)
        -> RemoveAccountResult
    {
        guard !params.account.isEmpty else {
            throw BrokerFailure.invalidParams(
                ParamField(RemoveAccountParams.CodingKeys.account),
                "give an identifier or a username"
            )
        }
        let clientId = params.clientId?.lowercased()
        // Planned in line: the tokens a sign-in or a refresh ahead of the removal stored go with the rest.
        let plan: (deletions: [EntryID], name: String)
        do {
            plan = try await cache.commit { contents throws(BrokerFailure) in
                let accounts = contents.accounts(matching: params.account)
                guard let first = accounts.first else {
                    throw BrokerFailure(.noAccount, "no account matches \(params.account.described)")
                }
                var deletions: [EntryID] = []
                for homeAccountId in Set(accounts.map(\.homeAccountId)) {
                    let environments = Set(accounts.map { $0.environment.lowercased() })
                    let owned = { (tokenClientId: String) in clientId == nil || tokenClientId.lowercased() == clientId }
                    for token in contents.accessTokens.values
                    where token.homeAccountId == homeAccountId && environments.contains(token.environment.lowercased())
                        && owned(token.clientId)
                    {
                        deletions.append(token.id)
                    }
                    for token in contents.refreshTokens(homeAccountId: homeAccountId, environments: environments)
                    where clientId == nil || (owned(token.clientId) && !token.isFamilyToken) {
                        deletions.append(token.id)
                    }
                    for token in contents.idTokens(homeAccountId: homeAccountId, environments: environments)
                    where owned(token.clientId) {
                        deletions.append(token.id)
                    }
                }
                if clientId == nil { deletions += accounts.map(\.id) }
                let name = first.username.isEmpty ? first.homeAccountId : first.username
                return (CacheChanges(deletions: deletions), (deletions, name))
            }
        } catch let failure as BrokerFailure {
            throw failure
        } catch {
            throw BrokerFailure(.internalError, "the cache could not be written", underlying: error)
        }
        let accountsRemoved = clientId == nil
        let credentials = plan.deletions.filter { $0.section != .account }.count
        audit.accountRemoved(
            by: caller,
            account: plan.name,
            clientId: params.clientId,
            removed: credentials,
            correlationId: params.effectiveCorrelationId
        )
        return RemoveAccountResult(removedCredentials: credentials, accountRemoved: accountsRemoved)
    }

    // MARK: Shared helpers

    /// Parses an authority (default: Entra ID `common`), mapping a bad one to `invalid_params`.
    ///
    /// Parsed authorities are remembered: apps ask for the same few over and over. `field` is built only for the
    /// error: its dotted path cost every request 3,300 instructions (callgrind).
    func authority(
        _ string: String?,
        field: @autoclosure () -> ParamField = .authParameters(.authority)
    ) throws(BrokerFailure) -> Authority {
        let text = string ?? Authority.defaultURL
        if let known = authorities.read({ $0[text] }) { return known }
        do {
            let parsed = try Authority(parsing: text, entraHosts: configuration.entraHosts)
            authorities.write { known in
                if known.count >= 256 { known.removeAll() }
                known[text] = parsed
            }
            return parsed
        } catch {
            throw BrokerFailure.invalidParams(field(), error.reason)
        }
    }
}
