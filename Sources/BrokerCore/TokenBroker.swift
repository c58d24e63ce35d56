public import BrokerCache
public import BrokerOAuth
public import BrokerProtocol
public import Foundation
public import Logging

/// The broker: answers account and token requests from the shared cache, and (with sign-in) from the identity
/// providers.
///
/// No sockets here: the server hands it decoded requests and the caller's identity.
///
/// Reads of the cache run without entering the actor (the cache has its own lock), so cached tokens are
/// served in parallel; the actor serializes what must not run twice at once.
public actor TokenBroker {
    /// The broker's release version.
    public static let version = "0.4.0"

    nonisolated let cache: TokenCache
    nonisolated let configuration: BrokerConfiguration
    nonisolated let logger: Logger
    /// The audit trail of tokens handed out.
    public nonisolated let audit: AuditLog
    nonisolated let now: @Sendable () -> Date
    nonisolated let authorities = ReadWriteLocked<[String: Authority]>([:])
    nonisolated let identityProviders: IdentityProviders
    /// Refreshes under way, by what they refresh: callers of the same one share it.
    var refreshes: [RefreshKey: Task<Result<TokenResult, BrokerFailure>, Never>] = [:]
    /// Refreshes started, and requests that joined one under way (for status and benchmarks).
    var refreshesStarted = 0
    var refreshesJoined = 0
    /// Interactive sign-ins running, by correlation id.
    var flows: [String: InteractiveFlow] = [:]

    /// Creates a broker over `cache`.
    public init(
        cache: TokenCache,
        configuration: BrokerConfiguration = BrokerConfiguration(),
        logger: Logger,
        audit: AuditLog = AuditLog(logger: Logger(label: "tokenbroker.audit")),
        transport: any HTTPTransport = AsyncHTTPTransport.shared,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.cache = cache
        self.configuration = configuration
        self.logger = logger
        self.audit = audit
        self.now = now
        identityProviders = IdentityProviders(transport: transport, policy: configuration.retryPolicy, logger: logger)
    }

    /// The time now, in epoch seconds.
    nonisolated var nowSeconds: Int64 {
        Int64(now().timeIntervalSince1970)
    }

    /// `getLinuxBrokerVersion`: refuses a client of another protocol major.
    public nonisolated func version(_ params: GetVersionParams) throws(BrokerFailure) -> VersionResult {
        if let requested = params.protocolVersion {
            guard let major = WireProtocol.major(of: requested) else {
                throw BrokerFailure.invalidParams(
                    "params.protocolVersion",
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
            methods: Self.servedMethods.map(\.rawValue)
        )
    }

    /// The methods this broker serves; the others of the protocol are answered `method_not_found`.
    public static let servedMethods: [MethodName] = [
        .getLinuxBrokerVersion, .getAccounts, .getAccount, .acquireTokenSilently, .acquireTokenInteractively,
        .completeInteractiveFlow, .cancelInteractiveFlow, .removeAccount, .importCache, .exportCache, .getStatus,
    ]

    /// Forgets what was learnt from identity providers (discovery documents, signing keys): a reload.
    public nonisolated func forgetProviderMetadata() async {
        await identityProviders.directory.forgetAll()
    }

    /// What the cache holds, by kind.
    public nonisolated var cacheCounts: EntryCounts {
        cache.read { $0.count }
    }

    /// Entries on disk that could not be opened at start-up.
    public nonisolated var damagedEntries: Int {
        cache.damaged.count
    }

    /// What went wrong with the cache's storage, for status.
    public nonisolated var storeHealth: StatusResult.StoreHealth {
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
