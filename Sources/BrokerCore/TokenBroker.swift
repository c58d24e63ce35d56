public import BrokerCache
public import BrokerOAuth
public import BrokerProtocol
public import BrokerTime
import Foundation
public import Logging

/// The broker: answers account and token requests from the shared cache, and (with sign-in) from the identity
/// providers.
///
/// No sockets here: the server hands it decoded requests and the caller's identity.
///
/// Every part is safe to use from any thread: the cache has its own lock, refreshes under way are shared through
/// a ``SingleFlight`` (and a refresh token is redeemed by one of them at a time, through a ``KeyedLock``), and
/// running sign-ins are kept in a ``FlowRegistry``. Cached tokens are served in parallel.
public final class TokenBroker: Sendable {
    /// The broker's release version.
    public static let version = "0.4.0"

    /// The cache behind its key; locked while the key's store cannot give it.
    public let vault: CacheVault
    let configuration: BrokerConfiguration
    let logger: Logger
    /// The audit trail of tokens handed out.
    public let audit: AuditLog
    /// The time: token expiry, throttles, windows, timeouts.
    public let clock: any BrokerClock
    let authorities = ReadWriteLocked<[String: Authority]>([:])
    let identityProviders: IdentityProviders
    /// Refreshes under way, by what they refresh: callers of the same one share it.
    let refreshes = SingleFlight<RefreshKey, TokenResult, BrokerFailure>()
    /// Refresh tokens being redeemed: one redemption of a token at a time, whatever the requests that need it.
    let redemptions = KeyedLock<Secret>()
    /// Interactive sign-ins running, by correlation id.
    let flows = FlowRegistry()
    /// Silent requests' answers from the cache, kept encoded.
    let cachedAnswers = CachedAnswers()
    /// The managed-identity endpoint's grants, kept in the cache's store.
    public let grants: GrantBook

    /// Creates a broker over `cache`, open.
    public convenience init(
        cache: TokenCache,
        configuration: BrokerConfiguration = BrokerConfiguration(),
        logger: Logger,
        audit: AuditLog = AuditLog(logger: Logger(label: "tokenbroker.audit")),
        transport: any HTTPTransport = AsyncHTTPTransport.shared,
        clock: any BrokerClock = .system
    ) {
        self.init(
            vault: CacheVault(opened: cache, logger: logger, clock: clock),
            configuration: configuration,
            logger: logger,
            audit: audit,
            transport: transport,
            clock: clock
        )
    }

    /// Creates a broker over the cache in `vault`, which may still be locked.
    public init(
        vault: CacheVault,
        configuration: BrokerConfiguration = BrokerConfiguration(),
        logger: Logger,
        audit: AuditLog = AuditLog(logger: Logger(label: "tokenbroker.audit")),
        transport: any HTTPTransport = AsyncHTTPTransport.shared,
        clock: any BrokerClock = .system
    ) {
        self.vault = vault
        self.configuration = configuration
        self.logger = logger
        self.audit = audit
        self.clock = clock
        grants = GrantBook(store: { vault.cache?.grantStore }, clock: clock)
        identityProviders = IdentityProviders(
            transport: transport,
            policy: configuration.retryPolicy,
            logger: logger,
            clock: clock
        )
    }

    /// The time now, in epoch seconds.
    var nowSeconds: Int64 {
        clock.nowSeconds
    }

    /// `getLinuxBrokerVersion`: refuses a client of another protocol major.
    public func version(_ params: GetVersionParams) throws(BrokerFailure) -> VersionResult {
        if let requested = params.protocolVersion {
            guard let major = WireProtocol.major(of: requested) else {
                throw BrokerFailure.invalidParams(
                    ParamField(GetVersionParams.CodingKeys.protocolVersion),
                    "expected major.minor in decimal without leading zeros, such as 1.0"
                )
            }
            guard major == WireProtocol.majorVersion else {
                throw BrokerFailure(
                    .unsupportedProtocolVersion,
                    "this broker speaks protocol \(WireProtocol.version); the client speaks \(requested)"
                )
            }
        }
        return VersionResult(
            linuxBrokerVersion: Self.version,
            protocolVersion: WireProtocol.version,
            methods: Methods.all.map { $0.name.rawValue }
        )
    }

    /// Forgets what was learnt from identity providers (discovery documents, signing keys): a reload.
    public func forgetProviderMetadata() {
        identityProviders.directory.forgetAll()
    }

    /// The open cache; `cache_locked`, saying why and what to do, while its key cannot be had.
    var cache: TokenCache {
        get throws(BrokerFailure) {
            if let cache = vault.cache { return cache }
            throw BrokerFailure.locked(vault.lock)
        }
    }

    /// What the cache holds, by kind (nothing while it is locked).
    public var cacheCounts: EntryCounts {
        vault.cache?.read { $0.count } ?? EntryCounts()
    }

    /// What went wrong with the cache's storage, for status; nil while it is locked.
    public var storeHealth: StatusResult.StoreHealth? {
        guard let cache = vault.cache else { return nil }
        let failures = cache.writeFailures
        return StatusResult.StoreHealth(
            damagedEntries: cache.damaged.count,
            failedWrites: failures.count,
            lastWriteError: failures.last?.reason,
            lastWriteErrorAt: failures.last?.at,
            databaseWasMissing: cache.databaseWasMissing
        )
    }
}

/// Settings of the broker itself.
public struct BrokerConfiguration: Sendable {
    /// Hosts (`host` or `host:port`) to treat as Entra ID besides Microsoft's clouds.
    public var entraHosts: Set<String>
    /// Retries, timeouts and the throttle of identity provider calls.
    public var retryPolicy: RetryPolicy
    /// How long an interactive sign-in may take when the app does not say.
    public var interactiveTimeout: Duration
    /// The browsers the user configured, read when a sign-in starts (so a profile the CLI just saved is there).
    public var browsers: @Sendable () -> BrowserSettings

    /// Creates a configuration.
    public init(
        entraHosts: Set<String> = [],
        retryPolicy: RetryPolicy = RetryPolicy(),
        interactiveTimeout: Duration = .seconds(300),
        browsers: @escaping @Sendable () -> BrowserSettings = { BrowserSettings() }
    ) {
        self.entraHosts = entraHosts
        self.retryPolicy = retryPolicy
        self.interactiveTimeout = interactiveTimeout
        self.browsers = browsers
    }
}
