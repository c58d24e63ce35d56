public import BrokerProtocol

/// Everything the cache holds, in memory, with the indexes that keep lookups flat in the number of entries.
///
/// A value type: the owner (``TokenCache``) applies changes only after the store made them durable.
public struct CacheContents: Sendable {
    public private(set) var accessTokens: [String: AccessToken] = [:]
    public private(set) var refreshTokens: [String: RefreshToken] = [:]
    public private(set) var idTokens: [String: IdToken] = [:]
    public private(set) var accounts: [String: AccountEntry] = [:]
    public private(set) var appMetadata: [String: AppMetadata] = [:]
    /// Entries of sections this version does not know, kept for export.
    public private(set) var others: [EntryID: JSONValue] = [:]

    private var accessTokenIndex: [CredentialScope: Set<String>] = [:]
    private var accessTokenScopes: [String: ScopeSet] = [:]
    private var idTokenByScope: [CredentialScope: Set<String>] = [:]
    private var refreshTokenIndex: [String: Set<String>] = [:]
    private var idTokenIndex: [String: Set<String>] = [:]
    private var idTokenClaims: [String: [String: JSONValue]] = [:]
    /// Keyed by home account id: the derived value depends on nothing else.
    private var derivedClientInfo: [String: String] = [:]
    private var accountsByIdentifier: [String: Set<String>] = [:]
    private var accountsByUsername: [String: Set<String>] = [:]
    /// The account ids, environments, client ids, tenants and scopes that tokens hold alike, and the scope sets
    /// parsed from the latter: one copy each, however many tokens hold it.
    private var sharedStrings = SharedValues<String>()
    private var sharedScopes = SharedValues<ScopeSet>()
    /// Where the contents leave access tokens' secrets in the store: each such token's key, with its secret's
    /// ``secretFilter(_:)``, to find the token an app hands back (`discardAccessToken`) without reading them all.
    private var storedSecretHashes: [String: Int] = [:]

    /// Whether access tokens are kept without their secrets (an empty ``Secret``), which stay in the store: they are
    /// most of a large cache's memory (10,000 tokens of 1.7 KB), and an answer reads one only when it is first made
    /// (``TokenCache/secret(of:)``); refresh tokens, id tokens and everything a lookup compares stay in memory.
    public let leavesAccessTokenSecretsInStore: Bool

    /// An empty cache; `leavingAccessTokenSecretsInStore` as the store it mirrors does.
    public init(leavingAccessTokenSecretsInStore: Bool = false) {
        leavesAccessTokenSecretsInStore = leavingAccessTokenSecretsInStore
    }

    /// A cache holding `entries`.
    public init(_ entries: some Sequence<CacheEntry>, leavingAccessTokenSecretsInStore: Bool = false) {
        leavesAccessTokenSecretsInStore = leavingAccessTokenSecretsInStore
        apply(CacheChanges(upserts: Array(entries)))
    }

    /// Applies deletions, then upserts; returns the positions, among the upserts, of the accounts and app metadata
    /// the contents held already as they are (once the deletions were applied): writing those again changes nothing.
    @discardableResult
    public mutating func apply(_ changes: CacheChanges) -> [Int] {
        for id in changes.deletions { remove(id) }
        var unchanged: [Int] = []
        for (position, (entry, id)) in changes.identifiedUpserts.enumerated()
        where insert(entry, id: id, knownClaims: changes.idTokenClaims) {
            unchanged.append(position)
        }
        return unchanged
    }

    /// Looks an entry up by id.
    public func entry(_ id: EntryID) -> CacheEntry? {
        switch id.section {
        case .accessToken: accessTokens[id.key].map(CacheEntry.accessToken)
        case .refreshToken: refreshTokens[id.key].map(CacheEntry.refreshToken)
        case .idToken: idTokens[id.key].map(CacheEntry.idToken)
        case .account: accounts[id.key].map(CacheEntry.account)
        case .appMetadata: appMetadata[id.key].map(CacheEntry.appMetadata)
        case .other: others[id].map { CacheEntry.other(id, $0) }
        }
    }

    /// Every entry, sorted by id.
    public var allEntries: [CacheEntry] {
        var entries: [CacheEntry] = []
        entries.reserveCapacity(count.total + others.count)
        entries += accessTokens.values.map(CacheEntry.accessToken)
        entries += refreshTokens.values.map(CacheEntry.refreshToken)
        entries += idTokens.values.map(CacheEntry.idToken)
        entries += accounts.values.map(CacheEntry.account)
        entries += appMetadata.values.map(CacheEntry.appMetadata)
        entries += others.map { CacheEntry.other($0.key, $0.value) }
        return entries.sorted { $0.id < $1.id }
    }

    /// How many entries of each kind.
    public var count: EntryCounts {
        EntryCounts(
            accounts: accounts.count,
            accessTokens: accessTokens.count,
            refreshTokens: refreshTokens.count,
            idTokens: idTokens.count,
            appMetadata: appMetadata.count
        )
    }

    // MARK: Lookups

    /// The access tokens of an account for a client and tenant, in any of `environments`, each with its
    /// scopes (parsed once, when the token was stored).
    public func accessTokens(
        homeAccountId: String,
        clientId: String,
        realm: String,
        environments: Set<String>
    ) -> [(token: AccessToken, scopes: ScopeSet)] {
        accessTokens(
            homeAccountId: homeAccountId,
            clientId: clientId,
            realm: realm,
            environments: environments
        ) { _, token, scopes in (token, scopes) }
    }

    /// The ids of the tokens ``accessTokens(homeAccountId:clientId:realm:environments:)`` finds, with their scopes,
    /// from the index's keys (not built again from each token's fields).
    public func accessTokenIDs(
        homeAccountId: String,
        clientId: String,
        realm: String,
        environments: Set<String>
    ) -> [(id: EntryID, scopes: ScopeSet)] {
        accessTokens(
            homeAccountId: homeAccountId,
            clientId: clientId,
            realm: realm,
            environments: environments
        ) { key, _, scopes in (EntryID(section: .accessToken, key: key), scopes) }
    }

    private func accessTokens<Found>(
        homeAccountId: String,
        clientId: String,
        realm: String,
        environments: Set<String>,
        _ found: (_ key: String, _ token: AccessToken, _ scopes: ScopeSet) -> Found
    ) -> [Found] {
        let scope = CredentialScope(homeAccountId: homeAccountId, clientId: clientId, realm: realm)
        guard let keys = accessTokenIndex[scope] else { return [] }
        return keys.compactMap { key in
            guard let token = accessTokens[key], environments.contains(token.environment.lowercasedSharingStorage),
                let scopes = accessTokenScopes[key]
            else { return nil }
            return found(key, token, scopes)
        }
    }

    /// The access tokens that may hold `secret`: those holding it in memory, and those whose secret is in the store
    /// with the same hash (read it to be sure).
    public func accessTokens(holding secret: Secret) -> [AccessToken] {
        var found = accessTokens.values.filter { !$0.secret.isEmpty && $0.secret == secret }
        guard !storedSecretHashes.isEmpty else { return found }
        let hash = Self.secretFilter(secret)
        for (key, stored) in storedSecretHashes where stored == hash {
            if let token = accessTokens[key] { found.append(token) }
        }
        return found
    }

    /// The refresh tokens of an account in any of `environments`: its apps' own and its family's.
    public func refreshTokens(homeAccountId: String, environments: Set<String>) -> [RefreshToken] {
        identifiedRefreshTokens(homeAccountId: homeAccountId, environments: environments).map(\.token)
    }

    /// ``refreshTokens(homeAccountId:environments:)`` with their ids, from the index's keys (not built again from
    /// each token's fields).
    public func identifiedRefreshTokens(
        homeAccountId: String,
        environments: Set<String>
    ) -> [(id: EntryID, token: RefreshToken)] {
        (refreshTokenIndex[homeAccountId.lowercasedSharingStorage] ?? []).compactMap { key in
            guard let token = refreshTokens[key], environments.contains(token.environment.lowercasedSharingStorage)
            else { return nil }
            return (EntryID(section: .refreshToken, key: key), token)
        }
    }

    /// The id token of an account for a client and tenant, with its claims.
    public func idToken(
        homeAccountId: String,
        clientId: String,
        realm: String,
        environments: Set<String>
    ) -> (token: IdToken, claims: [String: JSONValue]?)? {
        let scope = CredentialScope(homeAccountId: homeAccountId, clientId: clientId, realm: realm)
        for key in idTokenByScope[scope] ?? [] {
            guard let token = idTokens[key], environments.contains(token.environment.lowercasedSharingStorage) else {
                continue
            }
            return (token, idTokenClaims[key])
        }
        return nil
    }

    /// Every id token of an account, in any of `environments`.
    public func idTokens(homeAccountId: String, environments: Set<String>) -> [IdToken] {
        (idTokenIndex[homeAccountId.lowercasedSharingStorage] ?? []).compactMap { idTokens[$0] }
            .filter { environments.contains($0.environment.lowercasedSharingStorage) }
            .sorted { ($0.realm, $0.clientId) < ($1.realm, $1.clientId) }
    }

    /// The claims of an id token held here, decoded once when it was stored (not verified: the token was
    /// checked when it came from the provider).
    public func claims(of idToken: IdToken) -> [String: JSONValue]? {
        idTokenClaims[idToken.id.key]
    }

    /// Entra ID's `client_info` for an account: the one it came with, else rebuilt from `uid.utid` for
    /// Microsoft (`MSSTS`) accounts, which is what the provider would have sent.
    public func clientInfo(of account: AccountEntry) -> String? {
        account.clientInfo ?? derivedClientInfo[account.homeAccountId]
    }

    /// The accounts with this identifier (one per environment and tenant).
    public func accounts(identifier: String) -> [AccountEntry] {
        (accountsByIdentifier[identifier.lowercasedSharingStorage] ?? []).compactMap { accounts[$0] }.sorted(
            by: Self.accountOrder
        )
    }

    /// The accounts with this username, compared case-insensitively (UPNs are case-insensitive).
    public func accounts(username: String) -> [AccountEntry] {
        (accountsByUsername[username.lowercasedSharingStorage] ?? []).compactMap { accounts[$0] }.sorted(
            by: Self.accountOrder
        )
    }

    /// What the broker knows about an app in any of `environments`.
    public func appMetadata(clientId: String, environments: Set<String>) -> AppMetadata? {
        // A loop, not a lazy `compactMap`: its closure captured the whole contents, a retain and a release of each
        // of their tables on every call (1,000 instructions a refresh, callgrind).
        for environment in environments.sorted() {
            if let found = appMetadata[AppMetadata(clientId: clientId, environment: environment).id.key] {
                return found
            }
        }
        return nil
    }

    /// Accounts ordered by username, then identifier, then environment and tenant: a stable listing order.
    public static func accountOrder(_ lhs: AccountEntry, _ rhs: AccountEntry) -> Bool {
        (lhs.username.lowercasedSharingStorage, lhs.homeAccountId, lhs.environment, lhs.realm)
            < (rhs.username.lowercasedSharingStorage, rhs.homeAccountId, rhs.environment, rhs.realm)
    }

    /// How many distinct strings and scope sets the entries share (for tests: each goes with its last holder).
    var sharedValueCounts: (strings: Int, scopes: Int) {
        (sharedStrings.count, sharedScopes.count)
    }

    // MARK: Index maintenance

    /// Adds `entry`, replacing the one with its id.
    ///
    /// A refresh replaces tokens with ones of the same account, app, tenant and scopes: when the entry replaced holds
    /// the same bytes in every value the cache shares, the new one takes its kept copies and its place in every
    /// index, which stay as they are. Otherwise the new values are held before the replaced entry lets go of its
    /// own, so that values both hold are not dropped and made again.
    ///
    /// `id` is the entry's; `knownClaims` are id tokens' claims that the caller decoded already, by entry key.
    /// Inserts or replaces `entry`; true when it is an account or an app's metadata that the contents held already as it
    /// is (tokens are not compared: a token upserted is a new one).
    @discardableResult
    mutating func insert(_ entry: CacheEntry, id: EntryID, knownClaims: [String: [String: JSONValue]] = [:]) -> Bool {
        let key = id.key
        switch entry {
        case .accessToken(var token):
            if let old = accessTokens[key], Self.takeKeptCopies(of: old, into: &token) {
                keep(token, key: key)
                return false
            }
            share(&token.homeAccountId)
            share(&token.environment)
            share(&token.clientId)
            share(&token.realm)
            share(&token.target)
            let scopes = sharedScopes.hold(token.target) { ScopeSet(target: $0) }
            remove(id)
            keep(token, key: key)
            accessTokenScopes[key] = scopes
            accessTokenIndex[CredentialScope(token), default: []].insert(key)
        case .refreshToken(var token):
            if let old = refreshTokens[key], Self.takeKeptCredentialCopies(of: old, into: &token) {
                refreshTokens[key] = token
                return false
            }
            share(&token.homeAccountId)
            share(&token.environment)
            share(&token.clientId)
            remove(id)
            refreshTokens[key] = token
            refreshTokenIndex[token.homeAccountId.lowercasedSharingStorage, default: []].insert(key)
        case .idToken(var token):
            if let old = idTokens[key], Self.takeKeptCopies(of: old, into: &token) {
                idTokens[key] = token
                idTokenClaims[key] = Self.claims(of: token, known: knownClaims[key])
                return false
            }
            share(&token.homeAccountId)
            share(&token.environment)
            share(&token.clientId)
            share(&token.realm)
            remove(id)
            idTokens[key] = token
            idTokenIndex[token.homeAccountId.lowercasedSharingStorage, default: []].insert(key)
            idTokenByScope[CredentialScope(token), default: []].insert(key)
            idTokenClaims[key] = Self.claims(of: token, known: knownClaims[key])
        case .account(let account):
            if let old = accounts[key], old.homeAccountId == account.homeAccountId,
                old.username.lowercasedSharingStorage == account.username.lowercasedSharingStorage
            {
                // Indexed under the same identifier and username.
                accounts[key] = account
                if account.clientInfo == nil, derivedClientInfo[account.homeAccountId] == nil {
                    derivedClientInfo[account.homeAccountId] = account.derivedClientInfo
                }
                return old == account
            }
            remove(id)
            accounts[key] = account
            if account.clientInfo == nil, derivedClientInfo[account.homeAccountId] == nil {
                derivedClientInfo[account.homeAccountId] = account.derivedClientInfo
            }
            accountsByIdentifier[account.homeAccountId.lowercasedSharingStorage, default: []].insert(key)
            if !account.username.isEmpty {
                accountsByUsername[account.username.lowercasedSharingStorage, default: []].insert(key)
            }
        case .appMetadata(let metadata):
            return appMetadata.updateValue(metadata, forKey: key) == metadata
        case .other(let id, let value):
            others[id] = value
        }
        return false
    }

    /// An id token's claims: `known` when the caller decoded them already (the tests' debug builds check that they
    /// are the token's own), else decoded from it.
    private static func claims(of token: IdToken, known: [String: JSONValue]?) -> [String: JSONValue]? {
        guard let known else { return token.unverifiedClaims }
        assert(known == token.unverifiedClaims, "the claims given are not the id token's")
        return known
    }

    /// Stores an access token under `key`, its secret left to the store when the contents do that.
    private mutating func keep(_ token: AccessToken, key: String) {
        var token = token
        if leavesAccessTokenSecretsInStore {
            storedSecretHashes[key] = Self.secretFilter(token.secret)
            token.secret = Secret("")
        }
        accessTokens[key] = token
    }

    /// What finds the tokens that may hold a secret: this process's `Hasher` over its length and its last 64 bytes.
    ///
    /// A filter, not an identity: every token it finds is read and compared whole (``accessTokens(holding:)``). The
    /// end of a token is where tokens differ (a JWT's signature), and hashing all of it, 1.5 KB, cost each refresh
    /// 10,000 instructions (callgrind).
    private static func secretFilter(_ secret: Secret) -> Int {
        var value = secret.reveal()
        return value.withUTF8 { bytes in
            var hasher = Hasher()
            hasher.combine(bytes.count)
            hasher.combine(bytes: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes.suffix(64))))
            return hasher.finalize()
        }
    }

    /// Whether `new` holds the same bytes as `old` in the account, environment and client id.
    ///
    /// Those are what every token shares with others (see ``share(_:)``), and all a refresh token shares; if they are
    /// the same, `new` takes `old`'s kept copies, and holds them in its place (no holder more or less).
    ///
    /// Field by field: through an array of key paths, every read and write went through the runtime's key-path
    /// projection and cost 2 % of a refresh's event loop (callgrind).
    private static func takeKeptCredentialCopies<Token: SharedCredentialValues>(
        of old: Token,
        into new: inout Token
    ) -> Bool {
        guard
            same(new.homeAccountId, old.homeAccountId), same(new.environment, old.environment),
            same(new.clientId, old.clientId)
        else { return false }
        new.homeAccountId = old.homeAccountId
        new.environment = old.environment
        new.clientId = old.clientId
        return true
    }

    /// ``takeKeptCredentialCopies(of:into:)`` for an access token, which shares its realm and target as well.
    private static func takeKeptCopies(of old: AccessToken, into new: inout AccessToken) -> Bool {
        guard same(new.realm, old.realm), same(new.target, old.target), takeKeptCredentialCopies(of: old, into: &new)
        else { return false }
        new.realm = old.realm
        new.target = old.target
        return true
    }

    /// ``takeKeptCredentialCopies(of:into:)`` for an id token, which shares its realm as well.
    private static func takeKeptCopies(of old: IdToken, into new: inout IdToken) -> Bool {
        guard same(new.realm, old.realm), takeKeptCredentialCopies(of: old, into: &new) else { return false }
        new.realm = old.realm
        return true
    }

    /// Whether two strings hold the same bytes.
    private static func same(_ left: String, _ right: String) -> Bool {
        ExactString(left) == ExactString(right)
    }

    private mutating func remove(_ id: EntryID) {
        switch id.section {
        case .accessToken:
            guard let token = accessTokens.removeValue(forKey: id.key) else { return }
            accessTokenScopes[id.key] = nil
            storedSecretHashes[id.key] = nil
            sharedScopes.release(token.target)
            release(token.homeAccountId, token.environment, token.clientId, token.realm, token.target)
            Self.unindex(id.key, from: &accessTokenIndex, at: CredentialScope(token))
        case .refreshToken:
            guard let token = refreshTokens.removeValue(forKey: id.key) else { return }
            release(token.homeAccountId, token.environment, token.clientId)
            Self.unindex(id.key, from: &refreshTokenIndex, at: token.homeAccountId.lowercasedSharingStorage)
        case .idToken:
            guard let token = idTokens.removeValue(forKey: id.key) else { return }
            release(token.homeAccountId, token.environment, token.clientId, token.realm)
            Self.unindex(id.key, from: &idTokenIndex, at: token.homeAccountId.lowercasedSharingStorage)
            Self.unindex(id.key, from: &idTokenByScope, at: CredentialScope(token))
            idTokenClaims[id.key] = nil
        case .account:
            guard let account = accounts.removeValue(forKey: id.key) else { return }
            Self.unindex(id.key, from: &accountsByIdentifier, at: account.homeAccountId.lowercasedSharingStorage)
            Self.unindex(id.key, from: &accountsByUsername, at: account.username.lowercasedSharingStorage)
            if accountsByIdentifier[account.homeAccountId.lowercasedSharingStorage] == nil {
                derivedClientInfo[account.homeAccountId] = nil
            }
        case .appMetadata:
            appMetadata.removeValue(forKey: id.key)
        case .other:
            others.removeValue(forKey: id)
        }
    }

    /// Replaces `string` with the copy the cache already keeps of it.
    private mutating func share(_ string: inout String) {
        string = sharedStrings.hold(string)
    }

    /// Lets go of one hold on each string.
    private mutating func release(_ strings: String...) {
        for string in strings { sharedStrings.release(string) }
    }

    private static func unindex<Key: Hashable>(_ entryKey: String, from index: inout [Key: Set<String>], at key: Key) {
        index[key]?.remove(entryKey)
        if index[key]?.isEmpty == true { index[key] = nil }
    }
}

/// The part of an access or id token's identity that a lookup knows exactly (the environment may be an alias).
private struct CredentialScope: Hashable, Sendable {
    let homeAccountId: String
    let clientId: String
    let realm: String

    init(homeAccountId: String, clientId: String, realm: String) {
        self.homeAccountId = homeAccountId.lowercasedSharingStorage
        self.clientId = clientId.lowercasedSharingStorage
        self.realm = realm.lowercasedSharingStorage
    }

    init(_ token: AccessToken) {
        self.init(homeAccountId: token.homeAccountId, clientId: token.clientId, realm: token.realm)
    }

    init(_ token: IdToken) {
        self.init(homeAccountId: token.homeAccountId, clientId: token.clientId, realm: token.realm)
    }
}

/// The values every kind of token shares with the others, which the contents keep once (see
/// ``CacheContents/share(_:)``).
private protocol SharedCredentialValues {
    var homeAccountId: String { get set }
    var environment: String { get set }
    var clientId: String { get set }
}

extension AccessToken: SharedCredentialValues {}
extension RefreshToken: SharedCredentialValues {}
extension IdToken: SharedCredentialValues {}
