import ArgumentParser
import BrokerCache
import BrokerCore
import BrokerDBus
import BrokerManagedIdentity
import BrokerOAuth
import BrokerProtocol
import BrokerServer
import BrokerSettings
import BrokerSystemd
import BrokerTime
import CLinuxSupport
import Dispatch
import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization
import UnixSignals

/// `tokenbrokerd`: the per-user token broker daemon.
@main
struct Daemon: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokenbrokerd",
        abstract: "The per-user token broker: one shared OAuth/OpenID Connect token cache for every app of the user.",
        discussion: """
            Serves the broker protocol (Protocol/ in the source tree) on a Unix socket:
            $TOKENBROKER_SOCKET, else $XDG_RUNTIME_DIR/tokenbroker/broker.sock, else the same under
            /run/user/<uid> when that is the user's private directory, else
            /tmp/tokenbroker-<uid>/broker.sock (a directory it creates 0700 and uses only while it
            belongs to the user and is closed to others).
            Keeps its sealed cache in the state directory: --state-directory, else $STATE_DIRECTORY,
            else $XDG_STATE_HOME/tokenbroker (~/.local/state/tokenbroker).

            Under systemd (tokenbrokerd.socket and .service): serves the socket systemd passes (the fd
            named "broker"), reports READY=1 and a STATUS= line, feeds the watchdog, logs to the journal
            with structured fields, and with --idle-exit stops when idle until the next connection.

            Serves the managed-identity endpoint (App Service form) of the grants `tokenbroker grant
            create` makes, on the addresses they name, and does not exit when idle while one lives.

            SIGHUP (systemctl --user reload tokenbrokerd) re-reads the configuration file and forgets
            the identity providers' cached discovery documents and keys. The file holds "key = value"
            lines; the key read is log-level.

            Stops on SIGTERM or SIGINT after answering the requests in flight.
            Exit status: 0 after a clean stop or an idle exit, 1 when it cannot start (the message says
            why).
            """,
        version: TokenBroker.version
    )

    @Option(
        help:
            "The socket to serve (default: $TOKENBROKER_SOCKET, else $XDG_RUNTIME_DIR/tokenbroker/broker.sock, else /run/user/<uid>/tokenbroker/broker.sock, else /tmp/tokenbroker-<uid>/broker.sock)."
    )
    var socket: String?

    @Option(help: "The state directory holding the cache database and its key.")
    var stateDirectory: String?

    @Option(
        help:
            "Log level: trace, debug, info, notice, warning, error or critical (default: the configuration file's, else $TOKENBROKER_LOG_LEVEL, else info)."
    )
    var logLevel: String?

    @Option(help: "The configuration file (default: $XDG_CONFIG_HOME/tokenbroker/tokenbrokerd.conf).")
    var config: String?

    @Option(
        help: "When socket-activated, exit after this many seconds without connections (0: never); systemd restarts it."
    )
    var idleExit: Int = 0

    @Option(help: "Close a connection idle for this many seconds.")
    var connectionIdleTimeout: Int = 120

    @Option(help: "The most connections served at once.")
    var maxConnections: Int = 256

    @Option(
        help: "Coalesce repeated identical token issuances in audit lines over this many seconds (0: a line per token)."
    )
    var auditWindow: Int = 60

    @Option(
        name: .customLong("entra-host"),
        help: "Treat this host (or host:port) as Entra ID besides Microsoft's clouds; repeatable."
    )
    var entraHosts: [String] = []

    @Option(
        name: .customLong("idp-ca-file"),
        help:
            "Also trust the CA certificates in this PEM file for identity providers (a private CA); the system's are always trusted."
    )
    var idpCAFile: String?

    @Option(help: "Give up on an identity provider's answer after this many seconds.")
    var idpTimeout: Int = 30

    @Option(help: "Tries per identity provider call (429, 5xx and refused connections are retried).")
    var idpAttempts: Int = 3

    @Option(help: "Answer a repeated identical request whose provider was down from memory for this many seconds.")
    var idpUnavailableWindow: Int = 5

    @Option(help: "Give up on an interactive sign-in after this many seconds, unless the app says otherwise.")
    var interactiveTimeout: Int = 300

    @Flag(
        name: .customLong("no-bus"),
        help: "Do not answer Microsoft's Broker1 interface (com.microsoft.identity.broker1) on the session bus."
    )
    var noBus = false

    /// Runs Swift concurrency on NIO's event-loop threads: a request then moves from the socket to the broker
    /// and back without switching threads.
    ///
    /// Synchronous, parking its thread until the daemon is done: an async main hands its thread to `dispatch_main`,
    /// which ends it with `pthread_exit`, and that unwinds the thread's stack through the executable's unwind tables,
    /// whose pages then stay in the idle daemon's memory for nothing (0.9 MiB; BENCHMARKS.md, "sixth pass"). Nothing
    /// of the daemon runs on the main actor, whose queue this parked thread never drains.
    static func main() {
        // Half the cores for event loops (one on two): the apps that ask share the machine with the daemon, and on
        // two cores a second loop made each cached answer cost 15 µs of CPU instead of 12, in wake-ups and context
        // switches against the apps' threads (BENCHMARKS.md, "Close to the floor, third pass").
        NIOSingletons.groupLoopCountSuggestion = max(1, System.coreCount / 2)
        let tookOver = installEnqueueHook()
        tasksRunOnEventLoops.store(tookOver, ordering: .relaxed)
        // 0.1 ms scheduler slices for the event loops (EEVDF, Linux >= 6.12): a loop woken by a request or an
        // answer runs before the threads that had the CPU. It is also protected from preemption for that slice only,
        // and traced, it was preempted more often; the round trip of a refresh still took 80 µs less
        // (BENCHMARKS.md, "ninth pass").
        for loop in MultiThreadedEventLoopGroup.singleton.makeIterator() {
            loop.execute { _ = tb_request_thread_slice(100_000) }
        }
        let finished = DispatchSemaphore(value: 0)
        // Detached: this function belongs to the main actor, and a task of its own would wait for it forever.
        Task.detached {
            await main(nil)
            finished.signal()
        }
        finished.wait()
    }

    /// Whether ``main()`` moved Swift concurrency onto the event loops.
    private static let tasksRunOnEventLoops = Atomic<Bool>(false)

    /// What the runtime calls to enqueue a task on the global executor: the job, and the runtime's own enqueue.
    private typealias EnqueueHook = @convention(thin) (UnownedJob, @convention(thin) (UnownedJob) -> Void) -> Void

    /// Sends every task to the event loops.
    ///
    /// Not SwiftNIO's takeover, for two reasons. It finds the hook with dlsym, which the release daemon's static Swift
    /// runtime (linked with `--exclude-libs ALL`) hides. And it runs each job as isolated to the event loop's serial
    /// executor, so every call into a nonisolated async function, and every return from one, is a hop that the
    /// runtime cannot take in place: a job enqueued again and a turn of the loop, about 70 of them in a silent
    /// refresh. Run as on the global executor, as here, those hops cost nothing, and a task that calls an actor runs
    /// it in place when the actor is free. A task enqueued from an event loop stays on it.
    private static func installEnqueueHook() -> Bool {
        let hook: EnqueueHook = { job, _ in runOnEventLoop(job) }
        return tb_install_enqueue_global_hook(unsafeBitCast(hook, to: UnsafeMutableRawPointer.self)) != 0
    }

    func validate() throws {
        if let logLevel, Logger.Level(rawValue: logLevel) == nil {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        guard idleExit >= 0 else { throw ValidationError("--idle-exit must not be negative") }
        guard connectionIdleTimeout > 0 else { throw ValidationError("--connection-idle-timeout must be positive") }
        guard maxConnections > 0 else { throw ValidationError("--max-connections must be positive") }
        guard auditWindow >= 0 else { throw ValidationError("--audit-window must not be negative") }
        guard idpTimeout > 0 else { throw ValidationError("--idp-timeout must be positive") }
        guard idpAttempts > 0 else { throw ValidationError("--idp-attempts must be positive") }
        guard idpUnavailableWindow >= 0 else { throw ValidationError("--idp-unavailable-window must not be negative") }
        guard interactiveTimeout > 0 else { throw ValidationError("--interactive-timeout must be positive") }
    }

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let settings = ConfigurationFile(path: config, environment: environment)
        let file = settings.read()
        let levels = LogLevelControl(effectiveLevel(file: file, environment: environment))
        let journal = Systemd.stderrIsJournal()
        LoggingSystem.bootstrap { label in
            if journal { return JournaldLogHandler(label: label, identifier: "tokenbrokerd", control: levels) }
            return LevelControlled(StreamLogHandler.standardError(label: label), control: levels)
        }
        let logger = Logger(label: "tokenbroker")
        if !Self.tasksRunOnEventLoops.load(ordering: .relaxed) {
            logger.warning(
                "Swift concurrency runs on Dispatch's threads, not the event loops (the runtime's enqueue hook was set already): every answer that waits hops threads"
            )
        }
        for problem in ProcessHardening.apply() {
            logger.warning("\(problem)")
        }
        for problem in file.problems {
            logger.warning("configuration file: \(problem)", metadata: ["file": "\(settings.url.path)"])
        }
        do {
            try await serve(logger: logger, levels: levels, settings: settings, environment: environment)
        } catch {
            logger.critical("cannot start: \(error)")
            Systemd.status("Cannot start: \(error)")
            throw ExitCode.failure
        }
    }

    /// `--log-level`, else the configuration file's, else `$TOKENBROKER_LOG_LEVEL`, else info.
    private func effectiveLevel(file: ConfigurationFile.Contents, environment: [String: String]) -> Logger.Level {
        let text = logLevel ?? file.logLevel ?? environment["TOKENBROKER_LOG_LEVEL"] ?? "info"
        return Logger.Level(rawValue: text) ?? .info
    }

    private func serve(
        logger: Logger,
        levels: LogLevelControl,
        settings: ConfigurationFile,
        environment: [String: String]
    ) async throws {
        guard let directory = CacheLocation.stateDirectory(option: stateDirectory, environment: environment) else {
            throw StartupError("no state directory: set HOME or XDG_STATE_HOME, or pass --state-directory")
        }
        let location = CacheLocation(stateDirectory: directory)
        try Directories.ensurePrivateDirectory(location.stateDirectory)
        let lock = try StateLock(location.lockURL)
        // The one clock every time-dependent part reads (tests give theirs a clock they move by hand).
        let clock = SystemClock()
        let file = settings.read()
        let keys = KeyVault(
            location: location,
            order: (file.keyStores ?? []).compactMap(KeyStoreKind.init(rawValue:)),
            environment: environment
        )
        let vault = CacheVault(keys: keys, logger: logger, clock: clock)
        let audit = AuditLog(logger: Logger(label: "tokenbroker.audit"), window: .seconds(auditWindow), clock: clock)
        let transport = try idpCAFile.map { try AsyncHTTPTransport.trusting(certificatesIn: $0) } ?? .shared
        let broker = TokenBroker(
            vault: vault,
            configuration: BrokerConfiguration(
                entraHosts: Set(entraHosts.map { $0.lowercased() }),
                retryPolicy: RetryPolicy(
                    attempts: idpAttempts,
                    requestTimeout: .seconds(idpTimeout),
                    unavailableWindow: .seconds(idpUnavailableWindow)
                ),
                interactiveTimeout: .seconds(interactiveTimeout),
                browsers: {
                    // Read at each sign-in: a profile the CLI just saved is there without a reload.
                    let file = settings.read()
                    return BrowserSettings(
                        profiles: file.browserProfiles,
                        systemBrowser: file.systemBrowser,
                        environment: environment,
                        configurationPath: settings.url.path
                    )
                }
            ),
            logger: logger,
            audit: audit,
            transport: transport,
            clock: clock
        )
        // The key first (the keyring, the TPM, a plain file): locked, the broker still starts and says why.
        await broker.openCache()
        if let cache = vault.cache { Self.reportDamage(cache, location: location, logger: logger) }
        let listener = try listener(environment: environment)
        let busOff = noBus ? "turned off (--no-bus)" : file.broker1 == false ? "turned off (broker1 = off)" : nil
        let bus = Broker1Service(broker: broker, enabled: busOff == nil, why: busOff ?? "", logger: logger)
        let endpoint = IdentityEndpoint(broker: broker, logger: logger)
        let notifier = ServiceManagerNotifier()
        let server = SocketServer(
            configuration: ServerConfiguration(
                listener: listener,
                maximumConnections: maxConnections,
                idleTimeout: .seconds(connectionIdleTimeout)
            ),
            broker: broker,
            additionalHandlers: endpoint.handlers(),
            details: .init(stateDirectory: location.stateDirectory.path) { bus.status },
            logger: logger
        ) { server in
            notifier.send(["READY": "1", "STATUS": server.statusLine])
        }
        // What the last reload did stays in the status (systemctl status shows that it took effect, and with which
        // log level) instead of being replaced by the next watchdog tick's.
        let reloaded = Mutex<String>("")
        let statusLine: @Sendable () -> String = { server.statusLine + reloaded.withLock { $0 } }
        let reload: @Sendable () async -> String = {
            let file = settings.read()
            levels.level = effectiveLevel(file: file, environment: environment)
            broker.forgetProviderMetadata()
            for problem in file.problems {
                logger.warning("configuration file: \(problem)", metadata: ["file": "\(settings.url.path)"])
            }
            logger.notice("reloaded", metadata: ["log_level": "\(levels.level)"])
            reloaded.withLock { $0 = "; reloaded (log level \(levels.level))" }
            return statusLine()
        }
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(
                service: WatchdogService(
                    interval: Systemd.watchdogInterval(),
                    notifier: notifier,
                    clock: clock,
                    statusLine: statusLine
                )
            ),
            .init(service: AuditFlushService(audit: audit, interval: .seconds(auditWindow), clock: clock)),
            .init(service: server),
            .init(service: bus),
            .init(service: endpoint),
            .init(service: ReloadService(notifier: notifier, reload: reload)),
        ]
        if case .activated = listener, idleExit > 0 {
            services.append(
                .init(
                    service: IdleExitService(
                        after: .seconds(idleExit),
                        idleFor: {
                            // Idle only when neither door has had a caller for that long.
                            guard let socket = server.idleFor, let bus = bus.idleFor else { return nil }
                            return min(socket, bus)
                        },
                        isBusy: { broker.isBusy },
                        // Nothing would start the daemon again for a grant's holders: their endpoint stays up.
                        holdsOn: { endpoint.servesGrants ? "a grant of the managed-identity endpoint lives" : nil },
                        logger: logger,
                        clock: clock
                    ),
                    successTerminationBehavior: .gracefullyShutdownGroup
                )
            )
        }
        services.append(.init(service: StoppingService(notifier: notifier)))
        var configuration = ServiceGroupConfiguration(
            services: services,
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger
        )
        configuration.maximumGracefulShutdownDuration = .seconds(10)
        try await ServiceGroup(configuration: configuration).run()
        // A refresh a departed caller started may still be under way: its rotated token must reach the disk.
        await broker.finishRefreshes()
        withExtendedLifetime(lock) {}
    }

    /// Logs a database found missing beside its key, and entries that could not be opened.
    private static func reportDamage(_ cache: TokenCache, location: CacheLocation, logger: Logger) {
        if cache.databaseWasMissing {
            logger.error(
                "the cache database was missing beside its key: starting with an empty cache",
                metadata: [
                    "database": "\(location.databaseURL.path)",
                    "hint": "restore the db directory from a backup and restart to get the tokens back",
                ]
            )
        }
        for (id, reason) in cache.damaged {
            logger.error(
                "a cache entry could not be opened and is left in place",
                metadata: ["entry": "\(id)", "reason": "\(reason)"]
            )
        }
    }

    /// The socket systemd passed (the fd named `broker`, or the only one), else a bind of our own.
    private func listener(environment: [String: String]) throws -> Listener {
        let passed: (fd: CInt, name: String)?
        do {
            passed = try Systemd.brokerSocket(among: Systemd.listenFDs())
        } catch {
            throw StartupError(error.description)
        }
        if let socket = passed {
            guard Systemd.isListeningUnixStream(socket.fd) else {
                throw StartupError("the socket systemd passed (fd \(socket.fd)) is not a listening Unix stream socket")
            }
            return .activated(fd: socket.fd, path: Systemd.socketPath(of: socket.fd) ?? "(passed by systemd)")
        }
        return .bind(path: socket ?? SocketLocation.resolve(environment: environment))
    }
}

/// Why the daemon cannot start, for the log line before it exits.
struct StartupError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}

/// The global executor, which the jobs of ``runOnEventLoop(_:)`` run on.
private let globalExecutor = globalConcurrentExecutor.asUnownedTaskExecutor()

/// Runs a task's job on an event loop as the global executor would: isolated to no serial executor.
private func runOnEventLoop(_ job: UnownedJob) {
    MultiThreadedEventLoopGroup.singleton.any().execute { job.runSynchronously(on: globalExecutor) }
}
