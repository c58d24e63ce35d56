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
            if let reason = Self.reasonToSkip(entry, existing: contents.entry(id), now: now) {
                self.skipped.append(SkippedEntry(entry: id.description, reason: reason))
                continue
            }
            changes.upserts.append(Self.merged(entry, existing: contents.entry(id)))
            count(entry)
        }
    }

    private static func reasonToSkip(_ entry: CacheEntry, existing: CacheEntry?, now: Int64) -> String? {
        switch (entry, existing) {
        case (.accessToken(let token), _) where token.expiresOn <= now:
            return "the access token has expired"
        case (.accessToken(let token), .accessToken(let current)?) where current.expiresOn > token.expiresOn:
            return "the broker holds a newer access token"
        case (.refreshToken(let token), .refreshToken(let current)?)
        where (current.lastModificationTime ?? 0) > (token.lastModificationTime ?? 0):
            return "the broker holds a newer refresh token"
        default:
            return nil
        }
    }

    /// Keeps what the broker learned that the file may lack: family membership.
    private static func merged(_ entry: CacheEntry, existing: CacheEntry?) -> CacheEntry {
        guard case .appMetadata(var metadata) = entry, case .appMetadata(let current)? = existing else { return entry }
        if metadata.familyId == nil { metadata.familyId = current.familyId }
        return .appMetadata(metadata)
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
