public import BrokerProtocol
public import Foundation

/// ADAL Python's token cache (`TokenCache.serialize()`, also the old Azure CLI's `accessTokens.json`): a JSON list
/// of token responses, each with its `_authority`, `_clientId` and `userId`.
///
/// Reading turns each entry into the unified cache's account, access token and refresh token, the way MSAL
/// reads ADAL's legacy cache: ADAL's `userId` becomes the account's `username`, `oid.tenantId` its identifier,
/// a `resource` the scope `<resource>/.default`, and a multi-resource refresh token (`isMRRT`) a refresh token
/// without a target, good for any resource. One bad entry is skipped with its reason; the rest is taken.
///
/// Writing does the reverse for the Entra ID accounts: one entry per access token (with its app's refresh
/// token), and one per refresh token that has no access token to go with, so that ADAL can redeem it for any
/// resource.
public enum ADALCacheDocument {
    /// The entries of a document, and the ones left out with their reasons.
    ///
    /// `expiresOn` without a zone is read in `timeZone`; `now` (epoch seconds) decides what has expired.
    public static func read(
        _ data: Data,
        timeZone: TimeZone,
        now: Int64
    ) throws(CacheError) -> (entries: [CacheEntry], skipped: [SkippedEntry]) {
        let root: JSONValue
        do {
            root = try StrictJSON.parse(data)
        } catch {
            throw CacheError(.invalidDocument, "the ADAL cache is not valid JSON: \(error)")
        }
        guard case .array(let list) = root else {
            throw CacheError(.invalidDocument, "an ADAL cache is a JSON list of token entries")
        }
        var reading = Reading()
        for (index, value) in list.enumerated() {
            let label = "[\(index)]"
            guard case .object(let fields) = value else {
                reading.skipped.append(SkippedEntry(entry: label, reason: "the entry is not a JSON object"))
                continue
            }
            do {
                let entry = try LegacyEntry(fields: fields, timeZone: timeZone, now: now)
                reading.add(entry, label: label, now: now)
            } catch {
                reading.skipped.append(SkippedEntry(entry: label, reason: error.reason))
            }
        }
        return (reading.entries, reading.skipped)
    }

    /// The ADAL document for `contents` (or only what `clientId` may use), with what it holds by kind.
    public static func write(
        _ contents: borrowing CacheContents,
        clientId: String?,
        timeZone: TimeZone
    ) throws -> (data: Data, counts: EntryCounts) {
        var writing = Writing(timeZone: timeZone)
        let wanted = clientId?.lowercased()
        let accounts = Dictionary(
            contents.accounts.values.filter { $0.authorityType == "MSSTS" }.map { (AccountKey($0), $0) }
        ) { first, _ in first }
        let familyClients = Set(
            contents.appMetadata.values.filter { $0.familyId == "1" }.map { $0.clientId.lowercased() }
        )
        for token in contents.accessTokens.values.sorted(by: { $0.id < $1.id })
        where wanted == nil || token.clientId.lowercased() == wanted {
            guard let account = accounts[AccountKey(token)] ?? accounts.first(where: { $0.key.sameHome(token) })?.value,
                let resource = token.scopes.resource
            else { continue }
            let refreshToken = Self.refreshToken(
                in: contents,
                for: token.clientId,
                homeAccountId: token.homeAccountId,
                environment: token.environment,
                family: familyClients.contains(token.clientId.lowercased())
            )
            writing.add(accessToken: token, resource: resource, refreshToken: refreshToken, account: account)
        }
        // Refresh tokens no access token carried: ADAL redeems them for any resource (its MRRT lookup).
        var clients = Set(contents.refreshTokens.values.filter { !$0.isFamilyToken }.map { $0.clientId.lowercased() })
        clients.formUnion(familyClients)
        for client in clients.sorted() where wanted == nil || client == wanted {
            for account in accounts.values.sorted(by: { $0.id < $1.id }) where account.realm == account.homeRealm {
                guard
                    let refreshToken = Self.refreshToken(
                        in: contents,
                        for: client,
                        homeAccountId: account.homeAccountId,
                        environment: account.environment,
                        family: familyClients.contains(client)
                    )
                else { continue }
                writing.add(refreshToken: refreshToken, clientId: client, account: account)
            }
        }
        return (try writing.document(), writing.counts)
    }

    /// The app's own refresh token for the account, else the family's when the app is in the family.
    private static func refreshToken(
        in contents: borrowing CacheContents,
        for clientId: String,
        homeAccountId: String,
        environment: String,
        family: Bool
    ) -> RefreshToken? {
        let candidates = contents.refreshTokens(homeAccountId: homeAccountId, environments: [environment])
            .sorted { ($0.lastModificationTime ?? 0) > ($1.lastModificationTime ?? 0) }
        return candidates.first { !$0.isFamilyToken && $0.clientId.lowercased() == clientId.lowercased() }
            ?? (family ? candidates.first { $0.familyId == "1" } : nil)
    }
}

/// One ADAL entry, checked.
private struct LegacyEntry {
    let environment: String
    let clientId: String
    let userId: String
    let resource: String?
    let accessToken: String?
    let refreshToken: String?
    let tokenType: String
    let expiresOn: Int64?
    let cachedAt: Int64
    let isMultiResource: Bool
    let objectId: String
    let tenantId: String
    let givenName: String?
    let familyName: String?

    init(fields: [String: JSONValue], timeZone: TimeZone, now: Int64) throws(EntryError) {
        var reader = FieldReader(fields)
        environment = try Self.environment(of: try reader.requiredString("_authority"))
        clientId = try reader.requiredString("_clientId")
        guard !clientId.utf8.contains(where: { $0 <= 0x20 }) else { throw EntryError("_clientId holds spaces") }
        userId = try reader.requiredString("userId")
        resource = try reader.string("resource").flatMap { $0.isEmpty ? nil : $0 }
        accessToken = try reader.string("accessToken").flatMap { $0.isEmpty ? nil : $0 }
        refreshToken = try reader.string("refreshToken").flatMap { $0.isEmpty ? nil : $0 }
        tokenType = try reader.string("tokenType") ?? "Bearer"
        isMultiResource = try reader.bool("isMRRT") ?? false
        let expiresIn = try reader.seconds("expiresIn")
        if let text = try reader.string("expiresOn") {
            guard let seconds = LocalTime.epochSeconds(text, timeZone: timeZone) else {
                throw EntryError("expiresOn is not a time like 2020-11-13 14:44:42.492318")
            }
            expiresOn = seconds
        } else {
            expiresOn = nil
        }
        cachedAt = expiresOn.flatMap { expiresOn in expiresIn.map { expiresOn - $0 } } ?? now
        givenName = try reader.string("givenName")
        familyName = try reader.string("familyName")
        let named = (try reader.string("oid"), try reader.string("tenantId"))
        if let objectId = named.0, let tenantId = named.1, !objectId.isEmpty, !tenantId.isEmpty {
            self.objectId = objectId
            self.tenantId = tenantId
        } else if let claims = accessToken.flatMap(Self.claims), let objectId = claims.oid, let tenantId = claims.tid {
            // The old Azure CLI kept no id-token fields; its access tokens name the account. They are read only
            // to file the token under its account; the provider checks the refresh token when it is used.
            self.objectId = objectId
            self.tenantId = tenantId
        } else {
            throw EntryError("the entry names no account: oid and tenantId are missing, and no access token has them")
        }
        guard accessToken != nil || refreshToken != nil else { throw EntryError("the entry holds no token") }
    }

    var homeAccountId: String {
        "\(objectId).\(tenantId)"
    }

    /// `https://<host>/<tenant>` (`http` only on loopback) to the cache's environment, `host[:port]`.
    private static func environment(of authority: String) throws(EntryError) -> String {
        guard let url = URLComponents(string: authority), let scheme = url.scheme?.lowercased(),
            let host = url.host?.lowercased(), !host.isEmpty, url.query == nil, url.fragment == nil, url.user == nil
        else { throw EntryError("_authority is not an absolute URL") }
        guard scheme == "https" || (scheme == "http" && LoopbackHost.contains(host)) else {
            throw EntryError("_authority is not an https URL")
        }
        let segments = url.path.split(separator: "/")
        guard segments.count == 1 else {
            throw EntryError("_authority is not an Entra ID authority (https://host/tenant)")
        }
        guard segments[0].lowercased() != "adfs" else { throw EntryError("AD FS authorities are not supported") }
        let hostPart = host.contains(":") ? "[\(host)]" : host
        let defaultPort = scheme == "https" ? 443 : 80
        guard let port = url.port, port != defaultPort else { return hostPart }
        return "\(hostPart):\(port)"
    }

    /// The `oid` and `tid` claims of a JWT access token, unverified.
    private static func claims(_ token: String) -> (oid: String?, tid: String?)? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = Base64URL.decode(parts[1]),
            case .object(let claims)? = try? JSONValue.parse(Array(payload))
        else { return nil }
        return (claims["oid"]?.stringValue, claims["tid"]?.stringValue)
    }
}

/// What reading has collected so far: one account per user, the newest refresh token per app and user.
private struct Reading {
    var skipped: [SkippedEntry] = []
    private var accounts: [EntryID: AccountEntry] = [:]
    private var accessTokens: [EntryID: (token: AccessToken, label: String)] = [:]
    private var refreshTokens: [EntryID: RefreshToken] = [:]
    private var order: [EntryID] = []

    var entries: [CacheEntry] {
        order.compactMap { id in
            switch id.section {
            case .account: accounts[id].map(CacheEntry.account)
            case .accessToken: accessTokens[id].map { CacheEntry.accessToken($0.token) }
            case .refreshToken: refreshTokens[id].map(CacheEntry.refreshToken)
            default: nil
            }
        }
    }

    mutating func add(_ entry: LegacyEntry, label: String, now: Int64) {
        var took = false
        if let secret = entry.accessToken {
            took = addAccessToken(secret, of: entry, label: label, now: now)
        }
        if let secret = entry.refreshToken {
            took = addRefreshToken(secret, of: entry) || took
        }
        // An account comes with its tokens, never alone: an entry whose only token has expired adds nothing.
        guard took else { return }
        let account = AccountEntry(
            homeAccountId: entry.homeAccountId,
            environment: entry.environment,
            realm: entry.tenantId,
            localAccountId: entry.objectId,
            username: entry.userId,
            givenName: entry.givenName,
            familyName: entry.familyName
        )
        if let known = accounts[account.id] {
            accounts[account.id]?.givenName = known.givenName ?? account.givenName
            accounts[account.id]?.familyName = known.familyName ?? account.familyName
        } else {
            remember(account.id)
            accounts[account.id] = account
        }
    }

    private mutating func addRefreshToken(_ secret: String, of entry: LegacyEntry) -> Bool {
        let token = RefreshToken(
            homeAccountId: entry.homeAccountId,
            environment: entry.environment,
            clientId: entry.clientId,
            // A multi-resource refresh token serves any resource; a plain one only its own.
            target: entry.isMultiResource ? nil : entry.resource.map(ScopeSet.defaultScope(forResource:)),
            secret: Secret(secret),
            lastModificationTime: entry.cachedAt
        )
        // ADAL gives every entry of a user and app the newest refresh token; an older file may not have.
        if let known = refreshTokens[token.id] {
            guard (known.lastModificationTime ?? 0) < entry.cachedAt else { return known.secret == token.secret }
        } else {
            remember(token.id)
        }
        refreshTokens[token.id] = token
        return true
    }

    private mutating func addAccessToken(_ secret: String, of entry: LegacyEntry, label: String, now: Int64) -> Bool {
        guard let resource = entry.resource else {
            skipped.append(SkippedEntry(entry: label, reason: "the access token names no resource"))
            return false
        }
        guard let expiresOn = entry.expiresOn else {
            skipped.append(SkippedEntry(entry: label, reason: "the access token has no expiresOn"))
            return false
        }
        guard expiresOn > now else {
            skipped.append(SkippedEntry(entry: label, reason: "the access token has expired"))
            return false
        }
        let token = AccessToken(
            homeAccountId: entry.homeAccountId,
            environment: entry.environment,
            clientId: entry.clientId,
            realm: entry.tenantId,
            target: ScopeSet.defaultScope(forResource: resource),
            secret: Secret(secret),
            tokenType: entry.tokenType,
            cachedAt: min(entry.cachedAt, now),
            expiresOn: expiresOn
        )
        if let known = accessTokens[token.id] {
            let newer = expiresOn > known.token.expiresOn
            skipped.append(
                SkippedEntry(
                    entry: newer ? known.label : label,
                    reason: "another entry has a newer token for the same resource, app and user"
                )
            )
            if newer { accessTokens[token.id] = (token, label) }
            return newer
        }
        remember(token.id)
        accessTokens[token.id] = (token, label)
        return true
    }

    private mutating func remember(_ id: EntryID) {
        order.append(id)
    }
}

/// An account's place in the cache, for matching tokens to accounts.
private struct AccountKey: Hashable {
    let homeAccountId: String
    let environment: String
    let realm: String

    init(_ account: AccountEntry) {
        homeAccountId = account.homeAccountId.lowercased()
        environment = account.environment.lowercased()
        realm = account.realm.lowercased()
    }

    init(_ token: AccessToken) {
        homeAccountId = token.homeAccountId.lowercased()
        environment = token.environment.lowercased()
        realm = token.realm.lowercased()
    }

    func sameHome(_ token: AccessToken) -> Bool {
        homeAccountId == token.homeAccountId.lowercased() && environment == token.environment.lowercased()
    }
}

extension AccountEntry {
    /// The tenant of `uid.utid`: where the account lives, as opposed to a tenant it is a guest of.
    fileprivate var homeRealm: String {
        homeAccountId.split(separator: ".").last.map(String.init) ?? realm
    }
}

/// What writing has collected so far, keyed as ADAL keys its cache: authority, resource, client and user.
private struct Writing {
    let timeZone: TimeZone
    private var entries: [String: [String: JSONValue]] = [:]
    private var expiries: [String: Int64] = [:]
    private var refreshTokenSecrets = Set<Secret>()
    private var accountIds = Set<EntryID>()
    private var accessTokens = 0
    /// (client, home account, environment) pairs that already have an entry carrying their refresh token.
    private var carried = Set<[String]>()

    init(timeZone: TimeZone) {
        self.timeZone = timeZone
    }

    var counts: EntryCounts {
        EntryCounts(
            accounts: accountIds.count,
            accessTokens: accessTokens,
            refreshTokens: refreshTokenSecrets.count,
            idTokens: 0,
            appMetadata: 0
        )
    }

    mutating func add(
        accessToken token: AccessToken,
        resource: String,
        refreshToken: RefreshToken?,
        account: AccountEntry
    ) {
        let authority = "https://\(token.environment)/\(token.realm)"
        let key = [authority, resource, token.clientId, account.username].map { $0.lowercased() }.joined(
            separator: "\n"
        )
        // Two tokens for one ADAL key (User.Read and .default of the same resource): ADAL keeps one; the later.
        if let known = expiries[key], known >= token.expiresOn { return }
        if expiries[key] == nil { accessTokens += 1 }
        expiries[key] = token.expiresOn
        var fields = identity(of: account, clientId: token.clientId, authority: authority)
        fields["resource"] = .string(resource)
        fields["tokenType"] = .string(token.tokenType)
        fields["accessToken"] = .string(token.secret.reveal())
        fields["expiresOn"] = .string(LocalTime.text(token.expiresOn, timeZone: timeZone))
        fields["expiresIn"] = .integer(max(0, token.expiresOn - token.cachedAt))
        if let refreshToken {
            fields["refreshToken"] = .string(refreshToken.secret.reveal())
            fields["isMRRT"] = .bool(true)
            refreshTokenSecrets.insert(refreshToken.secret)
            carried.insert([token.clientId.lowercased(), account.homeAccountId.lowercased(), token.environment])
        }
        entries[key] = fields
    }

    mutating func add(refreshToken: RefreshToken, clientId: String, account: AccountEntry) {
        let pair = [clientId.lowercased(), account.homeAccountId.lowercased(), account.environment]
        guard !carried.contains(pair) else { return }
        carried.insert(pair)
        let authority = "https://\(account.environment)/\(account.realm)"
        var fields = identity(of: account, clientId: clientId, authority: authority)
        // ADAL's MRRT lookup ignores the resource; the expired, empty access token makes ADAL redeem the
        // refresh token for the resource it is asked for.
        fields["resource"] = .null
        fields["tokenType"] = .string("Bearer")
        fields["accessToken"] = .string("")
        fields["expiresOn"] = .string(LocalTime.text(0, timeZone: timeZone))
        fields["refreshToken"] = .string(refreshToken.secret.reveal())
        fields["isMRRT"] = .bool(true)
        refreshTokenSecrets.insert(refreshToken.secret)
        entries[[authority, "", clientId, account.username].map { $0.lowercased() }.joined(separator: "\n")] = fields
    }

    private mutating func identity(of account: AccountEntry, clientId: String, authority: String) -> [String: JSONValue]
    {
        accountIds.insert(account.id)
        var fields: [String: JSONValue] = [
            "_authority": .string(authority),
            "_clientId": .string(clientId),
            "userId": .string(account.username.isEmpty ? account.localAccountId : account.username),
            "oid": .string(account.localAccountId),
            "tenantId": .string(account.realm),
        ]
        if !account.username.isEmpty { fields["isUserIdDisplayable"] = .bool(true) }
        if let givenName = account.givenName { fields["givenName"] = .string(givenName) }
        if let familyName = account.familyName { fields["familyName"] = .string(familyName) }
        return fields
    }

    func document() throws -> Data {
        let list = entries.keys.sorted().compactMap { entries[$0] }.map(JSONValue.object)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(JSONValue.array(list))
    }
}
