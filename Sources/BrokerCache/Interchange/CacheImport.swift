public import BrokerProtocol

/// Decides what an import writes: it adds and updates, never deletes, and never replaces a newer
/// credential already in the broker with an older one from the file.
public struct CacheImport: Sendable {
    /// What to write.
    public private(set) var changes = CacheChanges()
    /// What will be written, by kind.
    public private(set) var imported = EntryCounts()
    /// What was left out, and why.
    public private(set) var skipped: [SkippedEntry] = []

    /// Plans the import of `entries` (already read, with `skipped` from reading) into `contents` at `now`
    /// (epoch seconds).
    public init(entries: [CacheEntry], skipped: [SkippedEntry], into contents: borrowing CacheContents, now: Int64) {
        self.skipped = skipped
        var seen = Set<EntryID>()
        for entry in entries {
            let id = entry.id
            guard seen.insert(id).inserted else {
                self.skipped.append(SkippedEntry(entry: id.description, reason: "a second entry with the same key"))
                continue
            }
            let existing = contents.entry(id)
            if let reason = Self.reasonToSkip(entry, existing: existing, now: now)
                ?? Self.newerRefreshToken(than: entry, in: contents)
            {
                self.skipped.append(SkippedEntry(entry: id.description, reason: reason))
                continue
            }
            changes.upsert(Self.merged(entry, existing: existing), id: id)
            count(entry)
        }
    }

    private static func reasonToSkip(_ entry: CacheEntry, existing: CacheEntry?, now: Int64) -> String? {
        switch (entry, existing) {
        case (.accessToken(let token), _) where token.expiresOn <= now:
            return "the access token has expired"
        case (.accessToken(let token), .accessToken(let current)?) where current.expiresOn > token.expiresOn:
            return "the broker holds a newer access token"
        case (.refreshToken(let token), .refreshToken(let current)?) where current.secret == token.secret:
            return "the broker already holds this refresh token"
        case (.refreshToken(let token), .refreshToken(let current)?)
        where (current.lastModificationTime ?? 0) >= (token.lastModificationTime ?? 0):
            // A tie keeps the broker's: it may have rotated the file's token within the same second.
            return "the broker holds a newer refresh token"
        default:
            return nil
        }
    }

    /// Why a refresh token is older than one the broker holds for its app and account, or for its family.
    ///
    /// Under another key (another target), or for a family token under another app's key: the app keeps one refresh
    /// token, the family one, and an import never brings back one they replaced. A family token moves to the key of
    /// the app that redeemed it last; the provider may have rotated out the one left in a document, and presented
    /// again it would revoke the sign-in.
    private static func newerRefreshToken(than entry: CacheEntry, in contents: borrowing CacheContents) -> String? {
        guard case .refreshToken(let token) = entry else { return nil }
        let others = contents.refreshTokens(
            homeAccountId: token.homeAccountId,
            environments: [token.environment.lowercased()]
        )
        .filter { $0.id != token.id && ($0.lastModificationTime ?? 0) >= (token.lastModificationTime ?? 0) }
        if others.contains(where: { $0.clientId.lowercased() == token.clientId.lowercased() }) {
            return "the broker holds a newer refresh token for this app and account"
        }
        if let family = token.familyId, others.contains(where: { $0.familyId == family }) {
            return "the broker holds a newer family refresh token for this account"
        }
        return nil
    }

    /// Keeps what the broker learned that the file may lack: family membership, and the account's names and
    /// `client_info` (an ADAL file knows none of them).
    private static func merged(_ entry: CacheEntry, existing: CacheEntry?) -> CacheEntry {
        switch (entry, existing) {
        case (.appMetadata(var metadata), .appMetadata(let current)?):
            if metadata.familyId == nil { metadata.familyId = current.familyId }
            return .appMetadata(metadata)
        case (.account(var account), .account(let current)?):
            if account.username.isEmpty { account.username = current.username }
            account.accountSource = account.accountSource ?? current.accountSource
            account.name = account.name ?? current.name
            account.givenName = account.givenName ?? current.givenName
            account.familyName = account.familyName ?? current.familyName
            account.clientInfo = account.clientInfo ?? current.clientInfo
            account.extra = current.extra.merging(account.extra) { _, new in new }
            return .account(account)
        default:
            return entry
        }
    }

    private mutating func count(_ entry: CacheEntry) {
        switch entry {
        case .accessToken: imported.accessTokens += 1
        case .refreshToken: imported.refreshTokens += 1
        case .idToken: imported.idTokens += 1
        case .account: imported.accounts += 1
        case .appMetadata: imported.appMetadata += 1
        case .other: break
        }
    }
}
