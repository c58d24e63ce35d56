public import BrokerProtocol

/// One entry of any section.
public enum CacheEntry: Sendable, Hashable {
    case accessToken(AccessToken)
    case refreshToken(RefreshToken)
    case idToken(IdToken)
    case account(AccountEntry)
    case appMetadata(AppMetadata)
    /// An entry of a section this version does not know, kept as it came.
    case other(EntryID, JSONValue)

    /// Reads an entry of `section` from its MSAL JSON value.
    public init(section: Section, key: String, value: JSONValue) throws(EntryError) {
        guard case .object(let fields) = value else {
            if case .other = section {
                self = .other(EntryID(section: section, key: key), value)
                return
            }
            throw EntryError("the entry is not a JSON object")
        }
        switch section {
        case .accessToken: self = .accessToken(try AccessToken(fields: fields))
        case .refreshToken: self = .refreshToken(try RefreshToken(fields: fields))
        case .idToken: self = .idToken(try IdToken(fields: fields))
        case .account: self = .account(try AccountEntry(fields: fields))
        case .appMetadata: self = .appMetadata(try AppMetadata(fields: fields))
        case .other: self = .other(EntryID(section: section, key: key), value)
        }
    }

    /// Where the entry lives.
    public var id: EntryID {
        switch self {
        case .accessToken(let entry): entry.id
        case .refreshToken(let entry): entry.id
        case .idToken(let entry): entry.id
        case .account(let entry): entry.id
        case .appMetadata(let entry): entry.id
        case .other(let id, _): id
        }
    }

    /// The entry as MSAL JSON.
    public var value: JSONValue {
        switch self {
        case .accessToken(let entry): .object(entry.fields)
        case .refreshToken(let entry): .object(entry.fields)
        case .idToken(let entry): .object(entry.fields)
        case .account(let entry): .object(entry.fields)
        case .appMetadata(let entry): .object(entry.fields)
        case .other(_, let value): value
        }
    }
}

/// A set of writes applied together: all or none.
public struct CacheChanges: Sendable, Hashable {
    /// Entries to insert or replace (by id).
    public private(set) var upserts: [CacheEntry]
    /// The ids of ``upserts``, in their order: worked out once for the contents, the secrets kept beside them and
    /// the store, not by each (a key is a hundred bytes joined and lowered, 3,000 instructions, and a refresh's
    /// commit built 13).
    public private(set) var upsertIDs: [EntryID]
    /// Entries to delete.
    public var deletions: [EntryID]
    /// The claims of upserted id tokens that the writer decoded already (from the token's own payload, when it
    /// checked them), by entry key: the cache's contents index them without decoding the token again.
    public var idTokenClaims: [String: [String: JSONValue]]

    /// Creates a change set.
    public init(
        upserts: [CacheEntry] = [],
        deletions: [EntryID] = [],
        idTokenClaims: [String: [String: JSONValue]] = [:]
    ) {
        self.init(identified: upserts.map { ($0, $0.id) }, deletions: deletions, idTokenClaims: idTokenClaims)
    }

    /// Creates a change set of entries whose ids the caller worked out already (debug builds check them).
    public init(
        identified: [(entry: CacheEntry, id: EntryID)],
        deletions: [EntryID] = [],
        idTokenClaims: [String: [String: JSONValue]] = [:]
    ) {
        assert(identified.allSatisfy { $0.entry.id == $0.id }, "an upsert's id is not its entry's")
        self.upserts = identified.map(\.entry)
        self.upsertIDs = identified.map(\.id)
        self.deletions = deletions
        self.idTokenClaims = idTokenClaims
    }

    /// The upserts with their ids.
    public var identifiedUpserts: Zip2Sequence<[CacheEntry], [EntryID]> {
        zip(upserts, upsertIDs)
    }

    /// Adds an entry to insert or replace, with its id (debug builds check it).
    public mutating func upsert(_ entry: CacheEntry, id: EntryID) {
        assert(entry.id == id, "an upsert's id is not its entry's")
        upserts.append(entry)
        upsertIDs.append(id)
    }

    /// The same changes without the upserts at `positions` (ascending, as ``CacheContents/apply(_:)`` returns them).
    public func removingUpserts(at positions: [Int]) -> CacheChanges {
        guard !positions.isEmpty else { return self }
        var kept = self
        for position in positions.reversed() {
            kept.upserts.remove(at: position)
            kept.upsertIDs.remove(at: position)
        }
        return kept
    }

    /// Whether there is nothing to write.
    public var isEmpty: Bool {
        upserts.isEmpty && deletions.isEmpty
    }

    /// Throws when a store must refuse the change set: it holds an access token without its secret (one taken from
    /// contents that left it in the store), and writing it would lose the token.
    public func checkStorable() throws(CacheError) {
        for case .accessToken(let token) in upserts where token.secret.isEmpty {
            throw CacheError(.corrupt, "an access token without its secret cannot be stored; nothing was written")
        }
    }
}
