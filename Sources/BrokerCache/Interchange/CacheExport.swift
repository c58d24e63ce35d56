/// Chooses what an export holds: everything, or what one client id (and its family) can use.
public enum CacheExport {
    /// The entries to export from `contents`; with `clientId`, only that app's tokens, its family's refresh
    /// tokens when it is in the family, the accounts they belong to, and its app metadata.
    public static func entries(of contents: borrowing CacheContents, clientId: String?) -> [CacheEntry] {
        guard let clientId = clientId?.lowercased() else { return contents.allEntries }
        let inFamily = contents.appMetadata.values.contains {
            $0.clientId.lowercased() == clientId && $0.familyId == "1"
        }
        var entries: [CacheEntry] = []
        var homeAccountIds = Set<String>()
        for token in contents.accessTokens.values where token.clientId.lowercased() == clientId {
            entries.append(.accessToken(token))
            homeAccountIds.insert(token.homeAccountId.lowercased())
        }
        for token in contents.refreshTokens.values
        where token.clientId.lowercased() == clientId || (inFamily && token.familyId == "1") {
            entries.append(.refreshToken(token))
            homeAccountIds.insert(token.homeAccountId.lowercased())
        }
        for token in contents.idTokens.values where token.clientId.lowercased() == clientId {
            entries.append(.idToken(token))
            homeAccountIds.insert(token.homeAccountId.lowercased())
        }
        for account in contents.accounts.values where homeAccountIds.contains(account.homeAccountId.lowercased()) {
            entries.append(.account(account))
        }
        for metadata in contents.appMetadata.values where metadata.clientId.lowercased() == clientId {
            entries.append(.appMetadata(metadata))
        }
        return entries.sorted { $0.id < $1.id }
    }
}
