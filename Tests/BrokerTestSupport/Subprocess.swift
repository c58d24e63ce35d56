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
/// every daemon started meanwhile), plus `extra`.
public func childEnvironment(_ extra: [String: String]) -> [String: String] {
    let serviceManagerVariables = [
        "NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "WATCHDOG_USEC", "WATCHDOG_PID",
        "JOURNAL_STREAM",
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
    _ = FileManager.default.createFile(atPath: stdoutURL.path, contents: nil)
    _ = FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    process.environment = childEnvironment(environment)
    process.standardOutput = try FileHandle(forWritingTo: stdoutURL)
    process.standardError = try FileHandle(forWritingTo: stderrURL)
    if let stdin {
        let input = directory.url.appending(path: "in")
        try stdin.write(to: input)
        process.standardInput = try FileHandle(forReadingFrom: input)
    } else {
        process.standardInput = FileHandle.nullDevice
    }
    let status = try await process.runToCompletion()
    return CommandResult(
        status: status,
        stdout: (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? "",
        stderr: (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? ""
    )
}

extension Process {
    /// Starts the process and waits for it without blocking a thread; returns the exit status, or 128 + the
    /// signal that killed it.
    public func runToCompletion() async throws -> Int32 {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Int32, any Error>) in
            terminationHandler = { process in
                let status =
                    process.terminationReason == .uncaughtSignal
                    ? 128 + process.terminationStatus : process.terminationStatus
                continuation.resume(returning: status)
            }
            do {
                try run()
            } catch {
                terminationHandler = nil
                continuation.resume(throwing: error)
            }
        }
    }

    /// Waits for a started process to exit; returns its status (or 128 + signal).
    public func waitForExit(timeout: Duration = .seconds(30)) async throws -> Int32 {
        let deadline = ContinuousClock.now + timeout
        while isRunning {
            guard ContinuousClock.now < deadline else {
                throw TestSetupError("process \(processIdentifier) did not exit")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return terminationReason == .uncaughtSignal ? 128 + terminationStatus : terminationStatus
    }
}

/// Set-up went wrong (a missing binary, a daemon that never listened): not the behaviour under test.
public struct TestSetupError: Error, CustomStringConvertible {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}
