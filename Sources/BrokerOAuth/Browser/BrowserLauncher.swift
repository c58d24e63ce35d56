public import BrokerTime
public import Foundation
import Synchronization

/// The programs that may open a sign-in page: named only by the user's configuration and the daemon's own
/// environment, never by a client of the broker.
public struct BrowserSettings: Sendable {
    /// `customBrowser`'s profiles by name: `browser.<name> = <command>` in `tokenbrokerd.conf`.
    public var profiles: [String: [String]]
    /// The commands `systemBrowser` tries before `xdg-open`.
    ///
    /// In order: the configuration's `system-browser`, then each entry of the daemon's own `$BROWSER`.
    public var systemBrowsers: [[String]]
    /// The daemon's own environment: `PATH` finds the programs; a few variables pass to the browser.
    public var environment: [String: String]
    /// The configuration file, for messages that say where a profile goes.
    public var configurationPath: String

    /// Creates settings.
    public init(
        profiles: [String: [String]] = [:],
        systemBrowser: [String]? = nil,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        configurationPath: String = "tokenbrokerd.conf"
    ) {
        self.profiles = profiles
        var candidates: [[String]] = systemBrowser.map { [$0] } ?? []
        for entry in (environment["BROWSER"] ?? "").split(separator: ":") {
            let words = entry.split(separator: " ").map(String.init)
            if !words.isEmpty { candidates.append(words) }
        }
        self.systemBrowsers = candidates
        self.environment = environment
        self.configurationPath = configurationPath
    }
}

/// Opens an authorization URL in a browser: the system's (the configuration's `system-browser`, the daemon's
/// `$BROWSER`, then `xdg-open`), or a profile of the configuration.
///
/// The browser appears in the caller's graphical session: the client forwards its display variables (and nothing
/// else of its environment is used). Programs are found on the daemon's own `PATH`.
public enum BrowserLauncher {
    /// The variables a client forwards: where its display is.
    ///
    /// Nothing here names or finds a program.
    public static let displayVariables: Set<String> = [
        "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_SESSION_TYPE", "XDG_CURRENT_DESKTOP",
    ]

    /// The variables of the daemon's own environment a browser gets: enough to find programs, the user's files,
    /// language and session bus; nothing else the daemon was started with (a service's variables, secrets).
    public static let inheritedVariables: Set<String> = [
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "XDG_RUNTIME_DIR", "XDG_DATA_DIRS",
        "XDG_CONFIG_DIRS", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME",
        "DBUS_SESSION_BUS_ADDRESS",
    ]

    /// How long a launcher that exits on its own (`xdg-open`) is waited for before the launch counts as done.
    public static let settleTime: Duration = .seconds(2)

    /// Opens `url` with the system browser.
    ///
    /// Tries each of `settings.systemBrowsers` (`%s` stands for the URL, else it is appended), then `xdg-open`; the
    /// first that starts and does not fail at once wins.
    public static func openSystemBrowser(
        _ url: URL,
        settings: BrowserSettings,
        display: [String: String],
        clock: any BrokerClock
    ) async throws(BrowserError) -> LaunchedBrowser {
        var failures: [String] = []
        for command in settings.systemBrowsers + [["xdg-open"]] {
            do {
                return try await launch(
                    withURL(command, url),
                    display: display,
                    own: settings.environment,
                    clock: clock
                )
            } catch {
                failures.append(error.reason)
            }
        }
        throw BrowserError(
            "no browser could be started (\(failures.joined(separator: "; "))); install xdg-utils, set BROWSER for "
                + "the broker, add system-browser = <command> to \(settings.configurationPath), or use the device code"
        )
    }

    /// Runs a profile's command with `url` (in place of `%s`, else as the last argument).
    public static func open(
        _ url: URL,
        profile command: [String],
        settings: BrowserSettings,
        display: [String: String],
        clock: any BrokerClock
    ) async throws(BrowserError) -> LaunchedBrowser {
        guard let program = command.first, !program.isEmpty else { throw BrowserError("the browser profile is empty") }
        return try await launch(withURL(command, url), display: display, own: settings.environment, clock: clock)
    }

    private static func withURL(_ command: [String], _ url: URL) -> [String] {
        if command.contains(where: { $0.contains("%s") }) {
            return command.map { $0.replacingOccurrences(of: "%s", with: url.absoluteString) }
        }
        return command + [url.absoluteString]
    }

    /// The browser's environment: the daemon's own inherited variables, with the caller's display variables.
    public static func childEnvironment(
        display: [String: String],
        own: [String: String] = ProcessInfo.processInfo.environment
    ) -> [String: String] {
        var environment = own.filter { inheritedVariables.contains($0.key) || $0.key.hasPrefix("LC_") }
        for (name, value) in display where displayVariables.contains(name) { environment[name] = value }
        return environment
    }

    /// Starts `argv`; fails when the program is not found on the daemon's `PATH`, or exits non-zero within
    /// ``settleTime``.
    ///
    /// Under systemd (the daemon is a service: `INVOCATION_ID` is set) the browser is started by the user manager
    /// through `systemd-run --user`, as a unit of its own: not in the broker's cgroup (an idle exit or a restart
    /// of the broker must not close the user's browser) and without the broker's sandbox (a browser needs
    /// W+X memory and namespaces that the service forbids itself). `--wait` keeps its exit status observable.
    static func launch(
        _ argv: [String],
        display: [String: String],
        own: [String: String],
        clock: any BrokerClock
    ) async throws(BrowserError) -> LaunchedBrowser {
        let name = argv[0]
        let path = own["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        guard let executable = resolve(name, path: path) else { throw BrowserError("\(name) was not found") }
        var program = executable.path
        var arguments = [executable.path] + argv.dropFirst()
        if own["INVOCATION_ID"] != nil, let systemdRun = resolve("systemd-run", path: path) {
            let unit =
                "tokenbroker-browser-\(RandomToken.make().prefix(12).lowercased().filter { $0.isLetter || $0.isNumber })"
            let forwarded = display.filter { displayVariables.contains($0.key) }.sorted { $0.key < $1.key }
            program = systemdRun.path
            arguments =
                [
                    "systemd-run", "--user", "--quiet", "--collect", "--wait", "--service-type=exec", "--unit=\(unit)",
                    "--description=Sign-in browser started by tokenbroker",
                ] + forwarded.map { "--setenv=\($0.key)=\($0.value)" } + ["--"] + arguments
        }
        let environment = childEnvironment(display: display, own: own)
        let pid = try await ChildProcess.spawn(program, arguments: arguments, environment: environment, clock: clock)
        let browser = LaunchedBrowser(name: name)
        browser.started(pid: pid)
        ChildProcess.onExit(of: pid) { status in browser.exited(status) }
        if let status = await browser.exitStatus(within: settleTime, clock: clock), status != 0 {
            throw BrowserError("\(name) exited with status \(status)")
        }
        return browser
    }

    static func resolve(_ name: String, path: String) -> URL? {
        let manager = FileManager.default
        if name.contains("/") { return manager.isExecutableFile(atPath: name) ? URL(fileURLWithPath: name) : nil }
        for directory in path.split(separator: ":") where directory.hasPrefix("/") {
            let candidate = "\(directory)/\(name)"
            if manager.isExecutableFile(atPath: candidate) { return URL(fileURLWithPath: candidate) }
        }
        return nil
    }
}

/// A browser process the broker started.
///
/// Its exit status tells a launcher that failed after all (a profile's command that exits non-zero before the
/// redirect came).
public final class LaunchedBrowser: Sendable {
    /// The program's name.
    public let name: String
    private let state = Mutex<State>(State())

    private struct State {
        var pid: Int32?
        var status: Int32?
        var nextWaiter = 0
        var waiters: [Int: CheckedContinuation<Int32?, Never>] = [:]
    }

    init(name: String) {
        self.name = name
    }

    fileprivate func started(pid: Int32) {
        state.withLock { $0.pid = pid }
    }

    fileprivate func exited(_ status: Int32) {
        let waiters = state.withLock { state in
            state.status = status
            defer { state.waiters = [:] }
            return state.waiters.values
        }
        for waiter in waiters { waiter.resume(returning: status) }
    }

    /// Waits for the process to exit and returns its status; nil when the waiting task is canceled first.
    public func exitStatus() async -> Int32? {
        let id = state.withLock { state in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let immediate = state.withLock { state -> Int32?? in
                    if let status = state.status { return .some(status) }
                    if Task.isCancelled { return .some(nil) }
                    state.waiters[id] = continuation
                    return nil
                }
                if let immediate { continuation.resume(returning: immediate) }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume(returning: nil)
        }
    }

    /// The exit status if the process ends within `duration`, else nil.
    public func exitStatus(within duration: Duration, clock: any BrokerClock) async -> Int32? {
        await withTaskGroup(of: Int32?.self) { group in
            group.addTask { await self.exitStatus() }
            group.addTask {
                try? await clock.sleep(for: duration)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? status
        }
    }

    /// The exit status, if the process has ended.
    public var status: Int32? {
        state.withLock { $0.status }
    }
}

/// Why no browser could be started.
public struct BrowserError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What failed.
    public var reason: String

    init(_ reason: String) {
        self.reason = reason
    }

    /// The reason.
    public var description: String {
        reason
    }
}
