public import Foundation
import Synchronization

/// Opens an authorization URL in a browser: the user's (`$BROWSER`, then `xdg-open`), or a command the app names.
///
/// The browser runs with the caller's graphical session (`DISPLAY`, `WAYLAND_DISPLAY`, …), which the client
/// forwards, so it appears on the caller's screen even though the daemon has none.
public enum BrowserLauncher {
    /// The variables of the caller's environment passed to the browser: what it needs to reach the session.
    public static let forwardedVariables: Set<String> = [
        "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_RUNTIME_DIR", "XDG_SESSION_TYPE", "XDG_CURRENT_DESKTOP",
        "XDG_DATA_DIRS", "XDG_CONFIG_DIRS", "DBUS_SESSION_BUS_ADDRESS", "BROWSER", "PATH", "HOME", "LANG", "LC_ALL",
    ]

    /// How long a launcher that exits on its own (`xdg-open`) is waited for before the launch counts as done.
    public static let settleTime: Duration = .seconds(2)

    /// Opens `url` with the user's browser: each entry of `$BROWSER` (colon-separated; `%s` stands for the URL,
    /// otherwise it is appended), then `xdg-open`.
    ///
    /// The first that starts and does not fail at once wins.
    public static func openSystemBrowser(
        _ url: URL,
        environment: [String: String]
    ) async throws(BrowserError) -> LaunchedBrowser {
        let caller = environment
        let environment = childEnvironment(environment)
        var candidates: [[String]] = []
        if let browsers = environment["BROWSER"], !browsers.isEmpty {
            for entry in browsers.split(separator: ":") {
                let words = entry.split(separator: " ").map(String.init)
                guard !words.isEmpty else { continue }
                if words.contains(where: { $0.contains("%s") }) {
                    candidates.append(words.map { $0.replacingOccurrences(of: "%s", with: url.absoluteString) })
                } else {
                    candidates.append(words + [url.absoluteString])
                }
            }
        }
        candidates.append(["xdg-open", url.absoluteString])
        var failures: [String] = []
        for argv in candidates {
            do {
                return try await launch(argv, environment: environment, caller: caller)
            } catch {
                failures.append(error.reason)
            }
        }
        throw BrowserError(
            "no browser could be started (\(failures.joined(separator: "; "))); set $BROWSER, install xdg-utils, or "
                + "use the device code"
        )
    }

    /// Runs the app's browser command with `url` as its last argument.
    public static func openCustomBrowser(
        _ url: URL,
        command: [String],
        environment: [String: String]
    ) async throws(BrowserError) -> LaunchedBrowser {
        guard let program = command.first, !program.isEmpty else { throw BrowserError("the browser command is empty") }
        return try await launch(
            command + [url.absoluteString],
            environment: childEnvironment(environment),
            caller: environment
        )
    }

    /// The variables that place a browser in a session: taken from the caller only, never from the daemon (whose
    /// session, if any, is not necessarily the caller's).
    public static let sessionVariables: Set<String> = [
        "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "BROWSER", "DBUS_SESSION_BUS_ADDRESS", "XDG_SESSION_TYPE",
        "XDG_CURRENT_DESKTOP",
    ]

    /// The browser's environment: the daemon's own without its session variables, with the caller's forwarded
    /// variables over it.
    public static func childEnvironment(
        _ caller: [String: String],
        own: [String: String] = ProcessInfo.processInfo.environment
    ) -> [String: String] {
        var environment = own.filter { !sessionVariables.contains($0.key) && !serviceVariables.contains($0.key) }
        for (name, value) in caller where forwardedVariables.contains(name) { environment[name] = value }
        return environment
    }

    /// What systemd hands a service, meant for the daemon alone: a browser must not inherit it.
    static let serviceVariables: Set<String> = [
        "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "INVOCATION_ID",
        "JOURNAL_STREAM", "MAINPID", "MANAGERPID", "SYSTEMD_EXEC_PID", "STATE_DIRECTORY", "TOKENBROKER_SOCKET",
    ]

    /// Starts `argv`; fails when the program is not found, or exits non-zero within ``settleTime``.
    ///
    /// Under systemd (the daemon is a service: `INVOCATION_ID` is set) the browser is started by the user manager
    /// through `systemd-run --user`, as a unit of its own: not in the broker's cgroup (an idle exit or a restart
    /// of the broker must not close the user's browser) and without the broker's sandbox (a browser needs
    /// W+X memory and namespaces that the service forbids itself). `--wait` keeps its exit status observable.
    static func launch(
        _ argv: [String],
        environment: [String: String],
        caller: [String: String],
        own: [String: String] = ProcessInfo.processInfo.environment
    ) async throws(BrowserError) -> LaunchedBrowser {
        let name = argv[0]
        guard let executable = resolve(name, path: environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin") else {
            throw BrowserError("\(name) was not found")
        }
        var program = executable.path
        var arguments = [executable.path] + argv.dropFirst()
        if own["INVOCATION_ID"] != nil,
            let systemdRun = resolve("systemd-run", path: own["PATH"] ?? "/usr/local/bin:/usr/bin:/bin")
        {
            let unit =
                "tokenbroker-browser-\(RandomToken.make().prefix(12).lowercased().filter { $0.isLetter || $0.isNumber })"
            let forwarded = caller.filter { forwardedVariables.contains($0.key) }.sorted { $0.key < $1.key }
            program = systemdRun.path
            arguments =
                [
                    "systemd-run", "--user", "--quiet", "--collect", "--wait", "--service-type=exec", "--unit=\(unit)",
                    "--description=Sign-in browser started by tokenbroker",
                ] + forwarded.map { "--setenv=\($0.key)=\($0.value)" } + ["--"] + arguments
        }
        let pid = try await ChildProcess.spawn(program, arguments: arguments, environment: environment)
        let browser = LaunchedBrowser(name: name)
        browser.started(pid: pid)
        ChildProcess.onExit(of: pid) { status in browser.exited(status) }
        if let status = await browser.exitStatus(within: settleTime), status != 0 {
            throw BrowserError("\(name) exited with status \(status)")
        }
        return browser
    }

    static func resolve(_ name: String, path: String) -> URL? {
        let manager = FileManager.default
        if name.contains("/") { return manager.isExecutableFile(atPath: name) ? URL(fileURLWithPath: name) : nil }
        for directory in path.split(separator: ":") where !directory.isEmpty {
            let candidate = "\(directory)/\(name)"
            if manager.isExecutableFile(atPath: candidate) { return URL(fileURLWithPath: candidate) }
        }
        return nil
    }
}

/// A browser process the broker started.
///
/// Its exit status tells a launcher that failed after all (a custom command that exits non-zero before the
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
    public func exitStatus(within duration: Duration) async -> Int32? {
        await withTaskGroup(of: Int32?.self) { group in
            group.addTask { await self.exitStatus() }
            group.addTask {
                try? await Task.sleep(for: duration)
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
