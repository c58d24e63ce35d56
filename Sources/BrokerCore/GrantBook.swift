public import BrokerCache
import BrokerOAuth
public import BrokerProtocol
public import BrokerTime
import Crypto
import Foundation
import Synchronization

/// One grant of the managed-identity endpoint: what its secret lets a holder ask for, and until when.
///
/// The secret itself is never kept: only its SHA-256, which a request's header is compared with in constant time.
public struct GrantRecord: Sendable, Hashable, Codable {
    /// The grant's id, for listing and revoking.
    public let id: String
    /// A name for people and the audit log.
    public let label: String
    /// The app whose tokens it hands out.
    public let clientId: String
    /// The authority, as given when it was created.
    public let authority: String?
    /// Resources a holder may ask for (asked for as `<resource>/.default`).
    public let resources: [String]
    /// Scopes a holder may ask for, each named as the request's `resource`.
    public let scopes: [String]
    /// The account's identifier.
    public let accountIdentifier: String
    /// The account's username, when the cache knew it.
    public let username: String?
    /// When it was created (epoch seconds).
    public let createdAt: Int64
    /// When it expires (epoch seconds).
    public let expiresAt: Int64
    /// Where its endpoint listens (the port a bind picked, once bound).
    public let listen: ListenAddress
    /// SHA-256 of the secret.
    let secretDigest: Data

    /// What a holder asks for when it names `resource`: the grant's resource or scope it matches, if any.
    ///
    /// A resource matches with or without one trailing slash (`https://vault.azure.net/` and `…net`); a scope
    /// matches as itself, or as `<resource>/.default` (what Azure SDKs turn a `.default` scope into).
    public func ask(for resource: String) -> Ask? {
        func trimmed(_ text: String) -> String { text.hasSuffix("/") ? String(text.dropLast()) : text }
        if let match = resources.first(where: { trimmed($0) == trimmed(resource) }) { return .resource(match) }
        if let match = scopes.first(where: { $0 == resource || $0 == trimmed(resource) + "/.default" }) {
            return .scope(match)
        }
        return nil
    }

    /// What a request through a grant asks the broker for.
    public enum Ask: Sendable, Hashable {
        /// An ADAL v1 resource.
        case resource(String)
        /// One scope.
        case scope(String)
    }

    /// The silent request for `ask`: the grant's app, authority and account.
    public func silentParams(for ask: Ask, correlationId: String) -> AcquireTokenSilentlyParams {
        var parameters = AuthParameters(
            clientId: clientId,
            authority: authority,
            account: AccountSelector(identifier: accountIdentifier)
        )
        parameters.set(ask)
        return AcquireTokenSilentlyParams(authParameters: parameters, correlationId: correlationId)
    }

    /// The grant as `listGrants` shows it.
    public func listed(listening: Bool, problem: String?, tokensServed: Int) -> EndpointGrant {
        EndpointGrant(
            id: id,
            label: label,
            clientId: clientId,
            authority: authority,
            resources: resources,
            scopes: scopes,
            accountIdentifier: accountIdentifier,
            username: username,
            createdAt: createdAt,
            expiresAt: expiresAt,
            endpoint: listen.endpointURL,
            listening: listening,
            problem: problem,
            tokensServed: tokensServed
        )
    }
}

/// The grants of the managed-identity endpoint: in memory for the requests, durable in the cache's store.
///
/// A grant survives restarts until it expires or is revoked; an expired one is refused at once and dropped from
/// the store the next time the broker starts.
public final class GrantBook: Sendable {
    private let storeOpen: @Sendable () -> (any GrantStore)?
    private let clock: any BrokerClock
    private let state = Mutex(Book())

    private struct Held: Sendable {
        var record: GrantRecord
        var served = 0
    }

    /// The grants served, and the ones revoked, which nothing brings back.
    private struct Book: Sendable {
        var held: [String: Held] = [:]
        /// Every grant revoked while the broker runs (ids are random and never reused).
        ///
        /// A load of the store may have read one before its deletion reached the store, and a creation may end after
        /// a load served it and a revocation removed it: neither serves it again.
        var revoked: Set<String> = []
    }

    /// A book over `store` (none: grants last until the broker stops, for tests of one module).
    public convenience init(store: (any GrantStore)?, clock: any BrokerClock) {
        self.init(store: { store }, clock: clock)
    }

    /// A book over the store `store` gives: none while the cache is locked.
    public init(store: @escaping @Sendable () -> (any GrantStore)?, clock: any BrokerClock) {
        storeOpen = store
        self.clock = clock
    }

    private var store: (any GrantStore)? {
        storeOpen()
    }

    /// Loads the stored grants, dropping the expired ones from the store; returns the ids of records that could
    /// not be opened (left in place).
    public func load() async throws -> [String] {
        guard let store else { return [] }
        let (records, damaged) = try await store.loadGrants()
        let now = clock.nowSeconds
        var expired: [String] = []
        var loaded: [String: Held] = [:]
        var unreadable = damaged
        for (id, data) in records {
            guard let record = try? JSONDecoder().decode(GrantRecord.self, from: data), record.id == id else {
                unreadable.append(id)
                continue
            }
            if record.expiresAt <= now { expired.append(id) } else { loaded[id] = Held(record: record) }
        }
        try await store.deleteGrants(ids: expired)
        // A grant created while the store was read is kept; one revoked meanwhile stays revoked (the read may have
        // found it before the revocation deleted it).
        state.withLock { book in
            for (id, held) in loaded where book.held[id] == nil && !book.revoked.contains(id) { book.held[id] = held }
        }
        return unreadable
    }

    /// The grants not yet expired, oldest first, with the tokens each served.
    public var all: [(record: GrantRecord, served: Int)] {
        let now = clock.nowSeconds
        return state.withLock { book in
            book.held.values.filter { $0.record.expiresAt > now }.map { ($0.record, $0.served) }
        }
        .sorted { ($0.record.createdAt, $0.record.id) < ($1.record.createdAt, $1.record.id) }
    }

    /// Makes a new grant's secret (``RandomToken``: 32 random bytes, base64url) and id (`g` and 12 hex digits).
    static func newSecret() -> (id: String, secret: String, digest: Data) {
        let secret = RandomToken.make()
        let id = "g" + String(format: "%012llx", UInt64.random(in: 0..<(1 << 48)))
        return (id, secret, Data(SHA256.hash(data: Data(secret.utf8))))
    }

    /// Keeps `record` durably, then serves it.
    func add(_ record: GrantRecord) async throws {
        try await store?.saveGrant(id: record.id, record: try JSONEncoder().encode(record))
        state.withLock { book in
            // A load may have served it already, and a revocation removed it since.
            guard !book.revoked.contains(record.id) else { return }
            book.held[record.id] = Held(record: record)
        }
    }

    /// Stops serving the grant with `id` at once and for as long as the broker runs, then drops it from the store
    /// (when that fails, the grant answers again after a restart).
    func remove(_ id: String) async throws {
        state.withLock { book in
            book.held.removeValue(forKey: id)
            book.revoked.insert(id)
        }
        try await store?.deleteGrants(ids: [id])
    }

    /// The grant whose secret is `secret`, expired or not (the caller says which).
    ///
    /// Compares the secret's SHA-256 with every grant's, each in constant time and without stopping at a match,
    /// so the time taken tells nothing about the secrets held.
    public func holder(of secret: String) -> GrantRecord? {
        guard !secret.isEmpty, secret.utf8.count <= 512 else { return nil }
        let digest = Data(SHA256.hash(data: Data(secret.utf8)))
        return state.withLock { book in
            var found: GrantRecord?
            for entry in book.held.values where Self.constantTimeEqual(entry.record.secretDigest, digest) {
                found = entry.record
            }
            return found
        }
    }

    /// Forgets the grants expired for a day (until then their holders hear that the grant expired, not that the
    /// secret is unknown), in memory and in the store.
    public func dropExpired() async throws {
        let cutoff = clock.nowSeconds - 86_400
        let expired = state.withLock { book in
            let ids = book.held.values.filter { $0.record.expiresAt <= cutoff }.map(\.record.id)
            for id in ids { book.held.removeValue(forKey: id) }
            return ids
        }
        try await store?.deleteGrants(ids: expired)
    }

    /// Whether the grant with `id` is still held and unexpired: a request that waited for a refresh asks again
    /// before it answers, so that a grant revoked meanwhile hands out nothing.
    public func isServing(_ id: String) -> Bool {
        let now = clock.nowSeconds
        return state.withLock { $0.held[id].map { $0.record.expiresAt > now } ?? false }
    }

    /// Counts a token served through the grant with `id`.
    public func served(_ id: String) {
        state.withLock { $0.held[id]?.served += 1 }
    }

    /// The grant `name` names: its id, else a label that names exactly one grant.
    func named(_ name: String) -> Result<GrantRecord, BrokerFailure> {
        let grants = all.map(\.record)
        if let grant = grants.first(where: { $0.id == name }) { return .success(grant) }
        let labelled = grants.filter { $0.label == name }
        let field = ParamField(RevokeGrantParams.CodingKeys.grant)
        switch labelled.count {
        case 1: return .success(labelled[0])
        case 0:
            return .failure(.invalidParams(field, "no grant has the id or label \(shown(name))"))
        default:
            return .failure(
                .invalidParams(
                    field,
                    "\(labelled.count) grants have the label \(shown(name)); revoke one by its id "
                        + "(tokenbroker grant list)"
                )
            )
        }
    }

    static func constantTimeEqual(_ left: Data, _ right: Data) -> Bool {
        guard left.count == right.count else { return false }
        var difference: UInt8 = 0
        for (a, b) in zip(left, right) { difference |= a ^ b }
        return difference == 0
    }
}
