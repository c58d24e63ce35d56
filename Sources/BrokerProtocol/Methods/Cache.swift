/// A cache interchange format.
public enum CacheFormat: String, Sendable, Hashable, Codable, CaseIterable {
    /// MSAL's unified schema (`AccessToken`, `RefreshToken`, `IdToken`, `Account`, `AppMetadata`), as written by
    /// MSAL Python's `SerializableTokenCache.serialize()` and read by every MSAL.
    case msal
    /// ADAL Python's serialized cache: a JSON list of entries (the old Azure CLI `accessTokens.json`).
    case adal

    /// Decodes a wire name; an unknown one is refused, naming the values allowed (Protocol/ §4.2).
    public init(from decoder: any Decoder) throws {
        self = try Self.decodeWireName(from: decoder)
    }
}

/// Params of `importCache`.
public struct ImportCacheParams: Sendable, Hashable, Codable {
    /// The format of `data`.
    ///
    /// Default: `msal`.
    public var format: CacheFormat?
    /// The cache document, as the text of the file (JSON).
    ///
    /// It carries tokens, so it is a ``Secret``.
    public var data: Secret
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    /// Creates the params.
    public init(format: CacheFormat? = nil, data: Secret, correlationId: String? = nil) {
        self.format = format
        self.data = data
        self.correlationId = correlationId
    }
}

/// Counts of cache entries by kind.
public struct EntryCounts: Sendable, Hashable, Codable {
    /// Accounts.
    public var accounts: Int
    /// Access tokens.
    public var accessTokens: Int
    /// Refresh tokens.
    public var refreshTokens: Int
    /// Id tokens.
    public var idTokens: Int
    /// App metadata entries (family membership).
    public var appMetadata: Int

    /// Creates counts.
    public init(
        accounts: Int = 0,
        accessTokens: Int = 0,
        refreshTokens: Int = 0,
        idTokens: Int = 0,
        appMetadata: Int = 0
    ) {
        self.accounts = accounts
        self.accessTokens = accessTokens
        self.refreshTokens = refreshTokens
        self.idTokens = idTokens
        self.appMetadata = appMetadata
    }

    /// The sum of all kinds.
    public var total: Int {
        accounts + accessTokens + refreshTokens + idTokens + appMetadata
    }
}

/// One entry an import did not take, and why.
public struct SkippedEntry: Sendable, Hashable, Codable {
    /// Where the entry was: the section and key for MSAL (`AccessToken/<key>`), the list index for ADAL (`[3]`).
    ///
    /// Never a secret.
    public var entry: String
    /// Why it was skipped, for people.
    public var reason: String

    /// Creates a skipped entry.
    public init(entry: String, reason: String) {
        self.entry = entry
        self.reason = reason
    }
}

/// Result of `importCache`: what was taken and what was not.
public struct ImportCacheResult: Sendable, Hashable, Codable {
    /// The format read.
    public var format: CacheFormat
    /// Entries written (new or updated).
    public var imported: EntryCounts
    /// Entries left out, each with its reason.
    ///
    /// Nothing already in the broker was removed.
    public var skipped: [SkippedEntry]

    /// Creates the result.
    public init(format: CacheFormat, imported: EntryCounts, skipped: [SkippedEntry]) {
        self.format = format
        self.imported = imported
        self.skipped = skipped
    }
}

/// Params of `exportCache`.
public struct ExportCacheParams: Sendable, Hashable, Codable {
    /// The format to write.
    ///
    /// Default: `msal`.
    public var format: CacheFormat?
    /// Export only what this client id (and its family) can use.
    public var clientId: String?
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    /// Creates the params.
    public init(format: CacheFormat? = nil, clientId: String? = nil, correlationId: String? = nil) {
        self.format = format
        self.clientId = clientId
        self.correlationId = correlationId
    }
}

/// Result of `exportCache`.
public struct ExportCacheResult: Sendable, Hashable, Codable {
    /// The format written.
    public var format: CacheFormat
    /// The cache document (JSON text), ready to be written to a file.
    ///
    /// It carries tokens.
    public var data: Secret
    /// What the document holds.
    public var counts: EntryCounts

    /// Creates the result.
    public init(format: CacheFormat, data: Secret, counts: EntryCounts) {
        self.format = format
        self.data = data
        self.counts = counts
    }
}
