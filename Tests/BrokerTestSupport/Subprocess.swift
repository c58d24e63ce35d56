public import Foundation

/// The executables this package builds, found next to the test bundle (`.build/<config>/`).
public enum Binaries {
    /// The directory holding the built executables: `$TOKENBROKER_BUILD_DIR`, else the directory of the
    /// running test binary, else `.build/debug`.
    public static var directory: URL {
        if let override = ProcessInfo.processInfo.environment["TOKENBROKER_BUILD_DIR"] {
            return URL(filePath: override)
        }
        var candidate = URL(filePath: CommandLine.arguments[0]).deletingLastPathComponent()
        for _ in 0..<4 {
            if FileManager.default.isExecutableFile(atPath: candidate.appending(path: "tokenbrokerd").path) {
                return candidate
            }
            candidate = candidate.deletingLastPathComponent()
        }
        return URL(filePath: FileManager.default.currentDirectoryPath).appending(path: ".build/debug")
    }

    /// The built executable `name`; fails the test setup clearly when it was not built.
    public static func url(_ name: String) throws -> URL {
        let url = directory.appending(path: name)
        guard FileManager.default.isExecutableFile(atPath: url.path) else {
            throw TestSetupError("\(url.path) is missing: build with `swift build --build-tests` before `swift test`")
        }
        return url
    }
}

/// What a finished command printed and how it exited.
public struct CommandResult: Sendable {
    /// The exit status (or 128 + signal).
    public let status: Int32
    /// Everything on stdout.
    public let stdout: String
    /// Everything on stderr.
    public let stderr: String
}

/// The environment for a child of the tests: the test process's, without the variables by which a service
/// manager talks to its service (a test that sets `NOTIFY_SOCKET` for itself must not receive the datagrams of
/// every daemon started meanwhile) and without the session bus (a daemon under test must not keep its cache key
/// in the developer's own keyring), plus `extra`.
public func childEnvironment(_ extra: [String: String]) -> [String: String] {
    let serviceManagerVariables = [
        "NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "WATCHDOG_USEC", "WATCHDOG_PID",
        "JOURNAL_STREAM", "DBUS_SESSION_BUS_ADDRESS",
    ]
    var environment = ProcessInfo.processInfo.environment
    for name in serviceManagerVariables { environment[name] = nil }
    return environment.merging(extra) { _, new in new }
}

/// Runs `executable` to completion with `arguments`, extra `environment` and optional `stdin`.
///
/// Output goes through files, so a chatty child can never block on a full pipe.
public func runCommand(
    _ executable: URL,
    _ arguments: [String],
    environment: [String: String] = [:],
    stdin: Data? = nil
) async throws -> CommandResult {
    let directory = try TemporaryDirectory(prefix: "cmd")
    let stdoutURL = directory.url.appending(path: "out")
    let stderrURL = directory.url.appending(path: "err")
    var input = ChildProcess.Stream.null
    if let stdin {
        let url = directory.url.appending(path: "in")
        try stdin.write(to: url)
        input = .file(url.path)
    }
    let status = try await ChildProcess.run(
        executable.path,
        arguments,
        environment: childEnvironment(environment),
        stdin: input,
        stdout: .file(stdoutURL.path),
        stderr: .file(stderrURL.path)
    )
    return CommandResult(
        status: status,
        stdout: (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? "",
        stderr: (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? ""
    )
}

/// How long a test waits for something it expects (a server ready, a count reached, an answer) before calling it lost.
///
/// Long on purpose: every test of the suite starts at once on a cooperative pool as wide as the cores, so on a
/// loaded two-core machine an event can come seconds late; only a hang should reach this.
public let eventTimeout: Duration = .seconds(60)

/// Set-up went wrong (a missing binary, a daemon that never listened): not the behaviour under test.
public struct TestSetupError: Error, CustomStringConvertible {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}

/// Waits until `condition` holds, looking again after every yield of the task (and every millisecond); throws when
/// ``eventTimeout`` passes first, naming `what` was awaited.
public func waitUntil(_ what: String, _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + eventTimeout
    while !condition() {
        guard ContinuousClock.now < deadline else { throw TestSetupError("gave up waiting: \(what)") }
        await Task.yield()
        try await Task.sleep(for: .milliseconds(1))
    }
}
