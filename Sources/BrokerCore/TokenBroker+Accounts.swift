import BrokerCache
import BrokerOAuth
public import BrokerProtocol

extension TokenBroker {
    /// `getAccounts`: every account, or those with tokens for a client id (or its family), or of an authority.
    public nonisolated func accounts(_ params: GetAccountsParams) throws(BrokerFailure) -> AccountsResult {
        let wanted: Authority? = try params.authority.map { (text) throws(BrokerFailure) in
            try self.authority(text, field: "params.authority")
        }
        let clientId = params.clientId?.lowercased()
        let accounts = cache.read { contents -> [Account] in
            contents.accounts.values.filter { account in
                if let wanted {
                    guard wanted.environmentAliases.contains(account.environment.lowercased()) else { return false }
                    if let realm = wanted.fixedRealm, realm.lowercased() != account.realm.lowercased() { return false }
                }
                if let clientId {
                    return Self.account(account, hasTokensFor: clientId, in: contents)
                }
                return true
            }
            .sorted(by: CacheContents.accountOrder)
            .map { Self.wireAccount($0, in: contents) }
        }
        return AccountsResult(accounts: accounts)
    }

    /// `getAccount`: by identifier when given, else (or when the identifier is unknown) by username.
    public nonisolated func account(_ params: GetAccountParams) throws(BrokerFailure) -> AccountResult {
        let selector = params.selector
        guard !selector.isEmpty else {
            throw BrokerFailure.invalidParams("params.identifier", "give an identifier or a username")
        }
        return try cache.read { contents throws(BrokerFailure) -> AccountResult in
            let candidates = Self.lookUp(selector, in: contents)
            guard let account = Self.preferred(candidates, realm: nil) else {
                throw BrokerFailure(.noAccount, "no account matches \(Self.describe(selector))")
            }
            return AccountResult(account: Self.wireAccount(account, in: contents))
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
            throw BrokerFailure.invalidParams("params.account", "give an identifier or a username")
        }
        let clientId = params.clientId?.lowercased()
        let plan = try cache.read { contents throws(BrokerFailure) -> (deletions: [EntryID], name: String) in
            let accounts = Self.lookUp(params.account, in: contents)
            guard let first = accounts.first else {
                throw BrokerFailure(.noAccount, "no account matches \(Self.describe(params.account))")
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
            return (deletions, first.username.isEmpty ? first.homeAccountId : first.username)
        }
        do {
            try await cache.commit(CacheChanges(deletions: plan.deletions))
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
            correlationId: params.correlationId ?? ""
        )
        return RemoveAccountResult(removedCredentials: credentials, accountRemoved: accountsRemoved)
    }

    // MARK: Shared helpers

    /// Parses an authority (default: Entra ID `common`), mapping a bad one to `invalid_params`.
    ///
    /// Parsed authorities are remembered: apps ask for the same few over and over.
    nonisolated func authority(
        _ string: String?,
        field: String = "params.authParameters.authority"
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
            throw BrokerFailure.invalidParams(field, error.reason)
        }
    }

    /// The accounts a selector names: by identifier; when none has it, by username.
    nonisolated static func lookUp(
        _ selector: AccountSelector,
        in contents: borrowing CacheContents
    )
        -> [AccountEntry]
    {
        if let identifier = selector.identifier, !identifier.isEmpty {
            let found = contents.accounts(identifier: identifier)
            if !found.isEmpty { return found }
        }
        if let username = selector.username, !username.isEmpty {
            return contents.accounts(username: username)
        }
        return []
    }

    /// The account entry to use among several of one person: the requested tenant, else the home tenant.
    nonisolated static func preferred(_ accounts: [AccountEntry], realm: String?) -> AccountEntry? {
        if let realm, let exact = accounts.first(where: { $0.realm.lowercased() == realm.lowercased() }) {
            return exact
        }
        return accounts.first { $0.realm.lowercased() == homeTenant(of: $0)?.lowercased() } ?? accounts.first
    }

    /// The home tenant of an Entra ID account: the `utid` half of `uid.utid`.
    nonisolated static func homeTenant(of account: AccountEntry) -> String? {
        let parts = account.homeAccountId.split(separator: ".")
        return parts.count == 2 ? String(parts[1]) : nil
    }

    /// Whether an account has a refresh or id token a client can use: its own, or its family's refresh token
    /// when the app is in the family.
    nonisolated static func account(
        _ account: AccountEntry,
        hasTokensFor clientId: String,
        in contents: borrowing CacheContents
    ) -> Bool {
        let environments: Set<String> = [account.environment.lowercased()]
        let inFamily = contents.appMetadata(clientId: clientId, environments: environments)?.familyId == "1"
        if contents.refreshTokens(homeAccountId: account.homeAccountId, environments: environments).contains(where: {
            $0.clientId.lowercased() == clientId || (inFamily && $0.isFamilyToken)
        }) {
            return true
        }
        return contents.idTokens(homeAccountId: account.homeAccountId, environments: environments).contains {
            $0.clientId.lowercased() == clientId
        }
    }

    /// The wire form of an account, with the claims of `idToken`, else of one of its id tokens.
    nonisolated static func wireAccount(
        _ account: AccountEntry,
        idToken preferred: (token: IdToken, claims: [String: JSONValue]?)? = nil,
        in contents: borrowing CacheContents
    ) -> Account {
        let claims: [String: JSONValue]?
        if let preferred {
            claims = preferred.claims
        } else {
            let all = contents.idTokens(
                homeAccountId: account.homeAccountId,
                environments: [account.environment.lowercased()]
            )
            claims = (all.first { $0.realm.lowercased() == account.realm.lowercased() } ?? all.first).flatMap {
                contents.claims(of: $0)
            }
        }
        return Account(
            identifier: account.homeAccountId,
            username: account.username,
            environment: account.environment,
            realm: account.realm,
            localAccountId: account.localAccountId,
            name: account.name ?? claims?["name"]?.stringValue,
            accountSource: account.accountSource,
            accountClaims: claims
        )
    }

    /// How an error message names a selector: its values, shortened, never more than a line.
    nonisolated static func describe(_ selector: AccountSelector) -> String {
        let shown = { (value: String) in Self.shortened(value) }
        return describeShown(
            AccountSelector(identifier: selector.identifier.map(shown), username: selector.username.map(shown))
        )
    }

    /// At most 80 printable characters of a value a caller sent, for messages.
    nonisolated static func shortened(_ value: String) -> String {
        let printable = String(value.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }.map(Character.init))
        return printable.count <= 80 ? printable : printable.prefix(77) + "..."
    }

    private nonisolated static func describeShown(_ selector: AccountSelector) -> String {
        switch (
            selector.identifier.flatMap { $0.isEmpty ? nil : $0 }, selector.username.flatMap { $0.isEmpty ? nil : $0 }
        ) {
        case (let identifier?, let username?) where identifier == username: "\"\(identifier)\""
        case (let identifier?, let username?): "identifier \(identifier) or username \(username)"
        case (let identifier?, nil): "identifier \(identifier)"
        case (nil, let username?): "username \(username)"
        case (nil, nil): "an empty selector"
        }
    }
}
