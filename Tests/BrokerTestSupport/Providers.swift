import BrokerOAuth
public import BrokerProtocol
public import Foundation

/// An identity provider the tests start as a subprocess, on 127.0.0.1 with an ephemeral port.
public final class ProviderProcess: Sendable {
    /// The port it listens on.
    public let port: Int
    /// Everything it printed first: its start-up line.
    public let startup: [String: JSONValue]
    private let process: ChildProcess
    private let logURL: URL

    private init(process: ChildProcess, port: Int, startup: [String: JSONValue], logURL: URL) {
        self.process = process
        self.port = port
        self.startup = startup
        self.logURL = logURL
    }

    /// `host:port`: what `--entra-host` takes, and the cache's `environment`.
    public var hostAndPort: String {
        "127.0.0.1:\(port)"
    }

    /// `http://127.0.0.1:<port>`.
    public var baseURL: String {
        "http://\(hostAndPort)"
    }

    /// What it logged (stderr).
    public var log: String {
        (try? String(contentsOf: logURL, encoding: .utf8)) ?? ""
    }

    /// Starts `executable` and waits for its one JSON start-up line (`{"port": …}`) on stdout.
    public static func start(
        _ executable: URL,
        _ arguments: [String],
        in directory: TemporaryDirectory,
        logName: String
    ) async throws -> ProviderProcess {
        let logURL = directory.url.appending(path: logName)
        let process = try ChildProcess.spawn(
            executable.path,
            arguments,
            environment: childEnvironment([:]),
            stdout: .pipe,
            stderr: .file(logURL.path)
        )
        guard let reader = process.output else { throw TestSetupError("no pipe from \(executable.path)") }
        let line = await offload { () -> String in
            var bytes: [UInt8] = []
            while !bytes.contains(UInt8(ascii: "\n")) {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                bytes += chunk
            }
            return String(decoding: bytes, as: UTF8.self)
        }
        guard let startup = try? JSONValue.parse(Array(line.utf8.prefix { $0 != UInt8(ascii: "\n") })).objectValue,
            let port = startup["port"]?.integerValue
        else {
            process.signal(SIGTERM)
            let log = (try? String(contentsOf: logURL, encoding: .utf8)) ?? ""
            throw TestSetupError("\(executable.lastPathComponent) did not start: \(line)\n\(log)")
        }
        return ProviderProcess(process: process, port: Int(port), startup: startup, logURL: logURL)
    }

    /// Stops it (SIGTERM, then SIGKILL after 10 s).
    public func stop() async {
        guard process.isRunning else { return }
        process.signal(SIGTERM)
        if (try? await process.waitForExit(timeout: .seconds(10))) == nil {
            process.signal(SIGKILL)
        }
    }

    /// Kills it at once (a provider that goes down).
    public func crash() async {
        guard process.isRunning else { return }
        process.signal(SIGKILL)
        _ = try? await process.waitForExit(timeout: .seconds(10))
    }

    deinit {
        process.signal(SIGTERM)
    }
}

/// The Entra-shaped test provider (`tokenbroker-test-idp`) with its control API.
public struct EntraTestProvider: Sendable {
    /// The process.
    public let process: ProviderProcess

    /// The family clients of the provider's defaults: both in the FOCI family.
    public static let familyClientX = "aaaaaaaa-0000-4000-8000-00000000000a"
    /// The second family client.
    public static let familyClientY = "bbbbbbbb-0000-4000-8000-00000000000b"
    /// The client outside the family.
    public static let outsideClientZ = "cccccccc-0000-4000-8000-00000000000c"
    /// The provider's tenant.
    public static let tenant = "7d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a"

    /// Starts one; `arguments` are the provider's options (`--token-lifetime 60`, …).
    public static func start(
        in directory: TemporaryDirectory,
        arguments: [String] = []
    ) async throws
        -> EntraTestProvider
    {
        EntraTestProvider(
            process: try await ProviderProcess.start(
                try Binaries.url("tokenbroker-test-idp"),
                ["--port", "0"] + arguments,
                in: directory,
                logName: "entra-idp.log"
            )
        )
    }

    /// The authority of its tenant.
    public var authority: String {
        "\(process.baseURL)/\(Self.tenant)"
    }

    /// Its `common` authority.
    public var commonAuthority: String {
        "\(process.baseURL)/common"
    }

    /// The daemon options that make the broker treat this provider as Entra ID.
    public var daemonArguments: [String] {
        ["--entra-host", process.hostAndPort]
    }

    /// Calls the control API: `POST /_test/<path>` with a JSON body, or `GET` when `body` is nil.
    @discardableResult
    public func control(_ path: String, _ body: [String: Any]? = nil) async throws -> [String: JSONValue] {
        guard let url = URL(string: "\(process.baseURL)/_test/\(path)") else { throw TestSetupError("bad path") }
        let request: HTTPRequest
        if let body {
            request = HTTPRequest(
                method: .post,
                url: url,
                headers: [("Content-Type", "application/json")],
                body: Array(try JSONSerialization.data(withJSONObject: body))
            )
        } else {
            request = HTTPRequest(method: .get, url: url)
        }
        let response = try await AsyncHTTPTransport.shared.send(request, timeout: .seconds(10))
        guard response.status == 200, let object = try? JSONValue.parse(response.body).objectValue else {
            throw TestSetupError(
                "control \(path) answered HTTP \(response.status): \(String(decoding: response.body, as: UTF8.self))"
            )
        }
        return object
    }

    /// Token endpoint requests so far.
    public func tokenRequests() async throws -> Int {
        Int(try await control("stats")["tokenRequests"]?.integerValue ?? -1)
    }

    /// Waits until `count` token answers are held by the provider (`/_test/hold`, until `/_test/release`).
    public func waitUntilAnswersAreHeld(_ count: Int) async throws {
        let deadline = ContinuousClock.now + eventTimeout
        while Int(try await control("stats")["heldAnswers"]?.integerValue ?? 0) < count {
            guard ContinuousClock.now < deadline else {
                throw TestSetupError("gave up waiting: \(count) token answers held by the provider")
            }
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    /// Token endpoint requests of one grant type so far.
    public func tokenRequests(grant: String) async throws -> Int {
        Int(try await control("stats")["byGrant"]?.objectValue?[grant]?.integerValue ?? -1)
    }

    /// A browser command that signs `username` in: POSTs the sign-in form and follows the redirect to the broker's
    /// loopback listener, as a person's browser would.
    ///
    /// Written as a script in `directory`.
    public static func browser(signingIn username: String, in directory: TemporaryDirectory) throws -> String {
        try BrowserScript.write(field: "username", value: username, in: directory, name: "entra-browser.sh")
    }
}

/// oidc-provider-mock (PyPI) run by `Tests/providers/oidc_mock_server.py` in the tests' virtualenv.
public struct MockOIDCProvider: Sendable {
    /// The process.
    public let process: ProviderProcess

    /// Starts one with access and id tokens living `tokenLifetime` seconds.
    public static func start(
        in directory: TemporaryDirectory,
        tokenLifetime: Int = 3600
    ) async throws
        -> MockOIDCProvider
    {
        let python = try TestPython.url()
        let script = TestPython.packageRoot.appending(path: "Tests/providers/oidc_mock_server.py")
        return MockOIDCProvider(
            process: try await ProviderProcess.start(
                python,
                [script.path, "--token-max-age", "\(tokenLifetime)"],
                in: directory,
                logName: "oidc-mock.log"
            )
        )
    }

    /// The issuer, which is the authority.
    public var authority: String {
        process.baseURL
    }

    /// A browser command that signs `subject` in on the mock's login page.
    public static func browser(signingIn subject: String, in directory: TemporaryDirectory) throws -> String {
        try BrowserScript.write(field: "sub", value: subject, in: directory, name: "mock-browser.sh")
    }
}

/// The virtualenv the test command creates (`.venv-tests`, Python ≥ 3.12, `Tests/wire/requirements.txt`).
public enum TestPython {
    /// The package's root directory.
    public static var packageRoot: URL {
        // <root>/.build/<triple>/debug → <root>
        var candidate = Binaries.directory
        for _ in 0..<4 {
            if FileManager.default.fileExists(atPath: candidate.appending(path: "Package.swift").path) {
                return candidate
            }
            candidate = candidate.deletingLastPathComponent()
        }
        return URL(filePath: FileManager.default.currentDirectoryPath)
    }

    /// `$TOKENBROKER_TEST_PYTHON`, else `.venv-tests/bin/python`; fails clearly when neither exists.
    public static func url() throws -> URL {
        let path =
            ProcessInfo.processInfo.environment["TOKENBROKER_TEST_PYTHON"]
            ?? packageRoot.appending(path: ".venv-tests/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw TestSetupError("\(path) is missing: run scripts/test.sh once to create the tests' virtualenv")
        }
        return URL(filePath: path)
    }
}

/// A stand-in for a person at a browser: a script the broker runs as a `customBrowser` command.
public enum BrowserScript {
    /// Writes the script as `name` in `directory`: it posts `field=value` on the provider's page.
    public static func write(
        field: String,
        value: String,
        in directory: TemporaryDirectory,
        name: String
    ) throws -> String {
        let path = directory.path(name)
        // Given the loopback listener's start page, as a browser is: follow its redirect to the authorization URL,
        // POST the sign-in form there (as the page's form does), then follow the 302 back to the listener with a
        // GET; the listener's page is discarded.
        let script = """
            #!/bin/sh
            authorize=$(curl --silent --show-error --fail --max-time 30 --output /dev/null \\
                --write-out '%{redirect_url}' "$1") || exit 1
            exec curl --silent --show-error --fail-with-body --location --max-time 30 --output /dev/null \\
                --data-urlencode '\(field)=\(value)' "$authorize"

            """
        try script.write(toFile: path, atomically: false, encoding: .utf8)
        chmod(path, 0o700)
        return path
    }
}
