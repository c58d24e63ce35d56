import BrokerCache
import BrokerOAuth
import BrokerProtocol

extension CacheContents {
    /// The accounts a selector names: by identifier; when none has it, by username.
    func accounts(matching selector: AccountSelector) -> [AccountEntry] {
        if let identifier = selector.identifier, !identifier.isEmpty {
            let found = accounts(identifier: identifier)
            if !found.isEmpty { return found }
        }
        if let username = selector.username, !username.isEmpty {
            return accounts(username: username)
        }
        return []
    }

    /// Whether an account has a refresh or id token a client can use: its own, or its family's refresh token
    /// when the app is in the family.
    func account(_ account: AccountEntry, hasTokensFor clientId: String) -> Bool {
        let environments: Set<String> = [account.environment.lowercased()]
        let inFamily = appMetadata(clientId: clientId, environments: environments)?.familyId == "1"
        if refreshTokens(homeAccountId: account.homeAccountId, environments: environments).contains(where: {
            $0.clientId.lowercased() == clientId || (inFamily && $0.isFamilyToken)
        }) {
            return true
        }
        return idTokens(homeAccountId: account.homeAccountId, environments: environments).contains {
            $0.clientId.lowercased() == clientId
        }
    }

    /// The wire form of an account, with the claims of `idToken`, else of one of its id tokens.
    func wireAccount(
        _ account: AccountEntry,
        idToken preferred: (token: IdToken, claims: [String: JSONValue]?)? = nil
    ) -> Account {
        let claims: [String: JSONValue]?
        if let preferred {
            claims = preferred.claims
        } else {
            let all = idTokens(homeAccountId: account.homeAccountId, environments: [account.environment.lowercased()])
            claims = (all.first { $0.realm.lowercased() == account.realm.lowercased() } ?? all.first).flatMap {
                self.claims(of: $0)
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

    /// The refresh tokens to try for `clientId`, in MSAL's order: an app the broker has not seen tries the family's
    /// first; a family app too; then the app's own, newest first.
    func refreshCandidates(
        for clientId: String,
        account: AccountEntry,
        environments: Set<String>
    ) -> [CachedRefreshToken] {
        let all = identifiedRefreshTokens(homeAccountId: account.homeAccountId, environments: environments)
            .map(CachedRefreshToken.init)
            .sorted { ($0.token.lastModificationTime ?? 0) > ($1.token.lastModificationTime ?? 0) }
        let own = all.filter { $0.token.clientId.lowercased() == clientId.lowercased() }
        let family = all.filter {
            $0.token.familyId == "1" && $0.token.clientId.lowercased() != clientId.lowercased()
        }
        switch appMetadata(clientId: clientId, environments: environments) {
        case nil: return family + own  // first use: the family might take it
        case let known? where known.familyId == "1": return family + own
        case _?: return own  // known to be outside the family
        }
    }
}

extension AccountEntry {
    /// The home tenant of an Entra ID account: the `utid` half of `uid.utid`.
    var homeTenant: String? {
        homeAccountIdHalves.map { String($0.utid) }
    }

    /// Entra ID's routing hint for the account (`Oid:<uid>@<utid>`).
    var anchorMailbox: String? {
        homeAccountIdHalves.map { "Oid:\($0.uid)@\($0.utid)" }
    }

    /// The two halves of an Entra ID home account id, `uid.utid`, both non-empty; nil for any other form.
    ///
    /// Found on the bytes: split by characters, each compared as a string, the anchor cost a refresh 30,000
    /// instructions (callgrind), and split on the bytes into an array of parts, 4,800. A home account id is ASCII.
    var homeAccountIdHalves: (uid: Substring, utid: Substring)? {
        let bytes = homeAccountId.utf8
        guard let dot = bytes.firstIndex(of: UInt8(ascii: ".")), dot != bytes.startIndex else { return nil }
        let utid = bytes[bytes.index(after: dot)...]
        guard !utid.isEmpty, !utid.contains(UInt8(ascii: ".")) else { return nil }
        return (Substring(bytes[..<dot]), Substring(utid))
    }

    /// The account as messages name it.
    var displayName: String {
        username.isEmpty ? homeAccountId : username
    }
}

extension Array where Element == AccountEntry {
    /// The entry to use among several of one person: the requested tenant, else the home tenant.
    func preferred(realm: String?) -> AccountEntry? {
        if let realm, let exact = first(where: { $0.realm.lowercased() == realm.lowercased() }) {
            return exact
        }
        return first { $0.realm.lowercased() == $0.homeTenant?.lowercased() } ?? first
    }
}

extension AccountSelector {
    /// How an error message names the selector: its values, shortened, never more than a line.
    var described: String {
        let identifier = identifier.flatMap { $0.isEmpty ? nil : $0.shortenedForMessages }
        let username = username.flatMap { $0.isEmpty ? nil : $0.shortenedForMessages }
        switch (identifier, username) {
        case (let identifier?, let username?) where identifier == username: return "\"\(identifier)\""
        case (let identifier?, let username?): return "identifier \(identifier) or username \(username)"
        case (let identifier?, nil): return "identifier \(identifier)"
        case (nil, let username?): return "username \(username)"
        case (nil, nil): return "an empty selector"
        }
    }
}

extension String {
    /// At most 80 printable characters of a value a caller sent, for messages.
    var shortenedForMessages: String {
        let printable = String(unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }.map(Character.init))
        return printable.count <= 80 ? printable : printable.prefix(77) + "..."
    }
}

extension ScopeSet {
    /// The scopes sent to the provider: the app's, plus `openid profile offline_access`.
    var inRequest: [String] {
        scopes.filter { !ScopeSet.reserved.contains($0.lowercased()) } + ScopeSet.reservedInRequestOrder
    }
}

extension SilentRequest {
    /// The scopes of a refresh: Entra ID's are the app's plus `openid profile offline_access`, as MSAL sends them;
    /// a generic provider gets the reserved ones only when its grant had them (it refuses any scope beyond).
    func refreshScopes(for refreshToken: RefreshToken) -> [String] {
        guard !authority.isEntra, let target = refreshToken.target else { return scopes.inRequest }
        let granted = ScopeSet(target: target).scopes.map { $0.lowercased() }
        let wanted = scopes.scopes.filter { !ScopeSet.reserved.contains($0.lowercased()) }
        return wanted + ScopeSet.reservedInRequestOrder.filter { granted.contains($0) }
    }
}

/// A refresh token the cache holds, with its entry's id (from the index's keys: built from the token's fields, an id
/// costs 3,000 instructions, and a refresh needs it three times).
struct CachedRefreshToken: Sendable {
    let id: EntryID
    let token: RefreshToken

    /// Whether `contents` hold this token still: its entry, with its secret (not one a sign-in put there since).
    func isCached(in contents: borrowing CacheContents) -> Bool {
        contents.refreshTokens[id.key]?.secret == token.secret
    }
}
