public import BrokerTime
import Foundation
import Synchronization

/// The discovery documents and signing keys of the providers the broker talks to, fetched once and kept.
///
/// Concurrent first requests for one authority share one fetch. A failed fetch is not remembered, so the next
/// request tries again.
public final class ProviderDirectory: Sendable {
    /// How long a discovery document is trusted before it is fetched again.
    public static let documentLifetime: Duration = .seconds(24 * 3600)

    private let transport: any HTTPTransport
    private let timeout: Duration
    private let clock: any BrokerClock
    /// Documents fetched, and when, by their address as text (``ProviderMetadata/discoveryAddress(for:)``).
    ///
    /// Written by the fetch itself, before the callers sharing it are let go, so a caller that comes after finds the
    /// document rather than starting a fetch of its own.
    private let documents = Mutex<[String: (metadata: ProviderMetadata, fetched: Duration)]>([:])
    private let fetches = SingleFlight<String, ProviderMetadata, OAuthError>()
    private let keySets = Mutex<[URL: SigningKeys]>([:])

    /// Creates a directory that fetches over `transport`.
    public init(transport: any HTTPTransport, timeout: Duration = .seconds(15), clock: any BrokerClock = .system) {
        self.clock = clock
        self.transport = transport
        self.timeout = timeout
    }

    /// The discovery document of `authority`, validated against it.
    public func metadata(for authority: Authority) async throws(OAuthError) -> ProviderMetadata {
        let address = ProviderMetadata.discoveryAddress(for: authority)
        if let cached = documents.withLock({ $0[address] }), clock.elapsed - cached.fetched < Self.documentLifetime {
            return cached.metadata
        }
        let transport = transport
        let timeout = timeout
        let clock = clock
        return try await fetches.run(address) { () async throws(OAuthError) in
            let url = ProviderMetadata.discoveryURL(for: authority)
            let metadata = try await Self.fetch(url, authority: authority, transport: transport, timeout: timeout).get()
            self.documents.withLock { $0[address] = (metadata, clock.elapsed) }
            return metadata
        }
    }

    /// Forgets every discovery document and key set (a reload): the next request fetches them again.
    public func forgetAll() {
        documents.withLock { $0.removeAll() }
        keySets.withLock { $0.removeAll() }
    }

    /// The signing keys behind `metadata.jwksURI`; nil when the provider publishes none.
    public func signingKeys(for metadata: ProviderMetadata) -> SigningKeys? {
        guard let url = metadata.jwksURI else { return nil }
        return keySets.withLock { keySets in
            if let keys = keySets[url] { return keys }
            let keys = SigningKeys(url: url, transport: transport, timeout: timeout, clock: clock)
            keySets[url] = keys
            return keys
        }
    }

    private static func fetch(
        _ url: URL,
        authority: Authority,
        transport: any HTTPTransport,
        timeout: Duration
    ) async -> Result<ProviderMetadata, OAuthError> {
        do throws(OAuthError) {
            let body = try await transport.getJSON(url, what: "discovery document", timeout: timeout)
            guard let metadata = try? JSONDecoder().decode(ProviderMetadata.self, from: Data(body)) else {
                throw OAuthError(
                    .invalidResponse,
                    "the discovery document at \(url.absoluteString) lacks issuer, authorization_endpoint or "
                        + "token_endpoint"
                )
            }
            do {
                try metadata.validate(for: authority)
            } catch {
                throw OAuthError(.invalidResponse, "the discovery document at \(url.absoluteString): \(error)")
            }
            return .success(metadata)
        } catch {
            return .failure(error)
        }
    }
}

/// One provider's JWKS, fetched on first use.
///
/// Fetched again when a token names a key id not seen yet (keys roll over), but such refetches at most once a minute.
/// Concurrent callers that need a fetch share one.
public final class SigningKeys: Sendable {
    /// The shortest time between two fetches.
    public static let refetchInterval: Duration = .seconds(60)

    private struct State {
        var keys: [JSONWebKey] = []
        var fetched = false
        var refetched: Duration?
    }

    private let url: URL
    private let transport: any HTTPTransport
    private let timeout: Duration
    private let clock: any BrokerClock
    private let state = Mutex(State())
    private let fetches = SingleFlight<URL, [JSONWebKey], IDTokenError>()

    init(url: URL, transport: any HTTPTransport, timeout: Duration, clock: any BrokerClock) {
        self.clock = clock
        self.url = url
        self.transport = transport
        self.timeout = timeout
    }

    /// Fetches started, and callers that joined one under way (for tests).
    var fetchCounts: (started: Int, joined: Int) {
        fetches.counts
    }

    /// The keys that may have signed a token with key id `keyId` and `algorithm`.
    func keys(for keyId: String?, algorithm: String) async throws(IDTokenError) -> [JSONWebKey] {
        let now = clock.elapsed
        let (found, mayFetch) = state.withLock { state in
            let found = Self.matching(state.keys, keyId, algorithm)
            guard found.isEmpty else { return (found, false) }
            guard state.fetched else { return (found, true) }
            if let refetched = state.refetched, now - refetched < Self.refetchInterval { return (found, false) }
            state.refetched = now
            return (found, true)
        }
        guard mayFetch else { return found }
        let (url, transport, timeout) = (url, transport, timeout)
        let keys = try await fetches.run(url) { () async throws(IDTokenError) -> [JSONWebKey] in
            let keys: [JSONWebKey]
            do {
                keys = try JSONWebKey.keySet(body: try await transport.getJSON(url, what: "JWKS", timeout: timeout))
            } catch let error as IDTokenError {
                throw error
            } catch {
                throw IDTokenError("the issuer's signing keys could not be fetched: \(error)")
            }
            // Kept before the callers sharing the fetch are let go, as the discovery documents are.
            self.state.withLock { state in
                state.keys = keys
                state.fetched = true
            }
            return keys
        }
        return Self.matching(keys, keyId, algorithm)
    }

    private static func matching(_ keys: [JSONWebKey], _ keyId: String?, _ algorithm: String) -> [JSONWebKey] {
        keys.filter { key in key.fits(algorithm) && (keyId == nil || key.keyId == keyId) }
    }
}

extension HTTPTransport {
    /// GETs a JSON document: the body of a 200 answer, or an error that says what failed.
    func getJSON(_ url: URL, what: String, timeout: Duration) async throws(OAuthError) -> [UInt8] {
        let response: HTTPResponse
        do {
            response = try await send(
                HTTPRequest(method: .get, url: url, headers: [("Accept", "application/json")]),
                timeout: timeout
            )
        } catch {
            throw OAuthError(.unavailable, "could not fetch the \(what) at \(url.absoluteString): \(error)")
        }
        guard response.status == 200 else {
            let kind: OAuthError.Kind =
                response.status >= 500 || response.status == 429 ? .unavailable : .invalidResponse
            throw OAuthError(
                kind,
                "could not fetch the \(what) at \(url.absoluteString): HTTP \(response.status)",
                status: response.status
            )
        }
        return response.body
    }
}
