import BrokerClient
import BrokerOAuth
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

/// Runs the built `tokenbroker` against `daemon`.
func tokenbroker(_ daemon: DaemonProcess, _ arguments: [String]) async throws -> CommandResult {
    try await runCommand(try Binaries.url("tokenbroker"), arguments, environment: daemon.clientEnvironment)
}

/// The JSON object a command printed.
func json(_ result: CommandResult) -> [String: JSONValue]? {
    try? JSONValue.parse(Array(result.stdout.utf8)).objectValue
}

/// Sign-in end to end: real providers and the built daemon and CLI, each app a separate process.
@Suite(.serialized) struct SignInTests {
    let directory: TemporaryDirectory
    let scope = "api://tokenbroker-tests/Things.Read"

    init() throws {
        directory = try TemporaryDirectory(prefix: "signin")
    }

    func start(
        providerArguments: [String] = [],
        daemonArguments: [String] = []
    ) async throws -> (
        EntraTestProvider, DaemonProcess
    ) {
        let provider = try await EntraTestProvider.start(in: directory, arguments: providerArguments)
        let daemon = try await DaemonProcess.start(
            in: directory,
            arguments: provider.daemonArguments + daemonArguments
        )
        return (provider, daemon)
    }

    func token(_ daemon: DaemonProcess, client: String, provider: EntraTestProvider) async throws -> CommandResult {
        try await tokenbroker(
            daemon,
            ["token", "--client-id", client, "--authority", provider.authority, "--scope", scope, "--json"]
        )
    }

    /// App A signs in; B (same client) gets the token from the cache; C (same family) gets one through the family
    /// refresh token; D (outside the family) must sign in; after removeAccount none gets one.
    @Test func oneSignInServesTheFamily() async throws {
        let (provider, daemon) = try await start()
        let browser = try EntraTestProvider.browser(signingIn: "ada@contoso.example", in: directory)
        let x = EntraTestProvider.familyClientX
        let appA = try await tokenbroker(
            daemon,
            [
                "login", "--client-id", x, "--authority", provider.authority, "--scope", scope, "--webview", "custom",
                "--browser-command", browser,
            ]
        )
        #expect(appA.status == 0, "\(appA.stderr)")
        #expect(appA.stdout == "signed in as ada@contoso.example\n")
        #expect(appA.stderr.contains("Continue in the browser"))

        let appB = try await token(daemon, client: x, provider: provider)
        #expect(appB.status == 0, "\(appB.stderr)")
        #expect(json(appB)?["tokenSource"] == .string("cache"))
        let account = json(appB)?["account"]?.objectValue
        #expect(account?["username"] == .string("ada@contoso.example"))
        #expect(account?["identifier"]?.stringValue?.hasSuffix(".\(EntraTestProvider.tenant)") == true)

        let requestsBeforeC = try await provider.tokenRequests(grant: "refresh_token")
        let appC = try await token(daemon, client: EntraTestProvider.familyClientY, provider: provider)
        #expect(appC.status == 0, "\(appC.stderr)")
        #expect(json(appC)?["tokenSource"] == .string("identityProvider"))
        #expect(json(appC)?["account"]?.objectValue?["identifier"] == account?["identifier"])
        #expect(try await provider.tokenRequests(grant: "refresh_token") == requestsBeforeC + 1)

        let appD = try await token(daemon, client: EntraTestProvider.outsideClientZ, provider: provider)
        #expect(appD.status == 2, "\(appD.stdout)\(appD.stderr)")
        #expect(appD.stderr.contains("tokenbroker login --client-id \(EntraTestProvider.outsideClientZ)"))
        // D is now known to be outside the family: asking again costs the provider nothing.
        let requestsAfterD = try await provider.tokenRequests()
        #expect(try await token(daemon, client: EntraTestProvider.outsideClientZ, provider: provider).status == 2)
        #expect(try await provider.tokenRequests() == requestsAfterD)

        let removed = try await tokenbroker(daemon, ["remove-account", "ada@contoso.example"])
        #expect(removed.status == 0, "\(removed.stderr)")
        for client in [x, EntraTestProvider.familyClientY, EntraTestProvider.outsideClientZ] {
            let after = try await token(daemon, client: client, provider: provider)
            #expect(after.status == 3, "\(client): \(after.stderr)")
        }
        #expect(try await daemon.stop() == 0)
        await provider.process.stop()
    }

    /// Fifty concurrent silent requests that all need a refresh cause exactly one token-endpoint call; the
    /// rotated refresh token replaced the old one (the next refresh is not taken for a replay).
    @Test func concurrentRefreshesShareOneCall() async throws {
        let (provider, daemon) = try await start(providerArguments: ["--token-lifetime", "200"])
        let broker = try await Broker.connect(socketPath: daemon.socketPath)
        let x = EntraTestProvider.familyClientX
        try daemon.addBrowserProfile(
            "ada",
            command: [try EntraTestProvider.browser(signingIn: "ada@contoso.example", in: directory)]
        )
        _ = try await broker.acquireToken(
            InteractiveRequest(
                clientId: x,
                scopes: [scope],
                authority: provider.authority,
                webviewType: .customBrowser,
                browserProfile: "ada"
            )
        ) { _ in }
        // Every access token lives 200 s, inside the 5-minute margin: each silent request needs a refresh.
        try await provider.control("delay", ["ms": 1000])
        let before = try await provider.tokenRequests()
        let request = TokenRequest(clientId: x, scopes: [scope], authority: provider.authority)
        let sources = try await withThrowingTaskGroup(of: TokenSource.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    let client = try await Broker.connect(socketPath: daemon.socketPath)
                    defer { Task { await client.close() } }
                    return try await client.acquireTokenSilent(request).tokenSource
                }
            }
            return try await group.reduce(into: [TokenSource]()) { $0.append($1) }
        }
        #expect(sources.count == 50 && sources.allSatisfy { $0 == .identityProvider })
        #expect(try await provider.tokenRequests() == before + 1)
        try await provider.control("reset", [:])
        // The rotated token works; the provider would have revoked everything on a replayed one.
        let next = try await broker.acquireTokenSilent(request)
        #expect(next.tokenSource == .identityProvider)
        #expect(try await provider.tokenRequests() == before + 2)
        await broker.close()
        #expect(try await daemon.stop() == 0)
        await provider.process.stop()
    }

    /// A full sign-in and refresh with trace logging: the daemon's log holds no access token, refresh token,
    /// id token, authorization code or verifier.
    @Test func traceLogsHoldNoSecrets() async throws {
        let (provider, daemon) = try await start(daemonArguments: ["--log-level", "trace"])
        let codeLog = directory.path("redirects.log")
        let browser = directory.path("recording-browser.sh")
        // Like EntraTestProvider.browser, and records the redirect it followed (it carries the code).
        try """
        #!/bin/sh
        authorize=$(curl --silent --fail --output /dev/null --write-out '%{redirect_url}' "$1")
        curl --silent --fail --location --max-time 30 --output /dev/null --write-out '%{url_effective}\\n' \\
            --data-urlencode 'username=ada@contoso.example' "$authorize" >> \(codeLog)

        """.write(toFile: browser, atomically: false, encoding: .utf8)
        chmod(browser, 0o700)
        let x = EntraTestProvider.familyClientX
        let login = try await tokenbroker(
            daemon,
            [
                "login", "--client-id", x, "--authority", provider.authority, "--scope", scope, "--webview", "custom",
                "--browser-command", browser,
            ]
        )
        #expect(login.status == 0, "\(login.stderr)")
        let refreshed = try await tokenbroker(
            daemon,
            [
                "token", "--client-id", EntraTestProvider.familyClientY, "--authority", provider.authority, "--scope",
                scope,
            ]
        )
        #expect(refreshed.status == 0, "\(refreshed.stderr)")
        let export = try await tokenbroker(daemon, ["export"])
        #expect(try await daemon.stop() == 0)
        await provider.process.stop()

        let document = try #require(try? JSONValue.parse(Array(export.stdout.utf8)).objectValue)
        var secrets: [String] = []
        for section in ["AccessToken", "RefreshToken", "IdToken"] {
            for entry in document[section]?.objectValue?.values ?? [:].values {
                if let secret = entry.objectValue?["secret"]?.stringValue { secrets.append(secret) }
            }
        }
        #expect(secrets.count >= 5)
        let redirect = try String(contentsOfFile: codeLog, encoding: .utf8)
        let code = try #require(
            URLComponents(string: redirect.trimmingCharacters(in: .whitespacesAndNewlines))?.queryItems?
                .first { $0.name == "code" }?.value
        )
        secrets.append(code)
        let log = daemon.log
        #expect(log.contains("trace") || log.contains("debug"))
        #expect(log.contains("refresh_token") && log.contains("authorization_code"))  // the grants are named
        for secret in secrets {
            #expect(!log.contains(secret), "a secret of \(secret.count) characters is in the log")
            #expect(!log.contains(String(secret.prefix(24))), "the start of a secret is in the log")
        }
        #expect(!log.contains("code_verifier"))
        #expect(!log.contains("refresh_token="))
    }

    /// A redirect with another `state` is refused (and the sign-in goes on); a second redirect is refused.
    @Test func loopbackRefusesForeignAndRepeatedRedirects() async throws {
        let (provider, daemon) = try await start()
        let statuses = directory.path("statuses.log")
        let browser = directory.path("probing-browser.sh")
        // The browser first knocks with a forged state, then signs in, then replays the real redirect.
        try """
        #!/bin/sh
        authorize=$(curl --silent --output /dev/null --write-out '%{redirect_url}' "$1")
        redirect=$(printf '%s' "$authorize" | sed -n 's/.*redirect_uri=\\([^&]*\\).*/\\1/p' | sed 's/%3A/:/g; s/%2F/\\//g')
        curl --silent --output /dev/null --write-out 'forged %{http_code}\\n' "${redirect}?code=forged&state=forged" >> \(statuses)
        final=$(curl --silent --location --output /dev/null --write-out '%{url_effective}' \\
            --data-urlencode 'username=ada@contoso.example' "$authorize")
        curl --silent --output /dev/null --write-out 'first %{http_code}\\n' "$final" >> \(statuses)
        sleep 0.3
        curl --silent --output /dev/null --write-out 'replayed %{http_code}\\n' "$final" >> \(statuses)
        exit 0

        """.write(toFile: browser, atomically: false, encoding: .utf8)
        chmod(browser, 0o700)
        let login = try await tokenbroker(
            daemon,
            [
                "login", "--client-id", EntraTestProvider.familyClientX, "--authority", provider.authority, "--scope",
                scope, "--webview", "custom", "--browser-command", browser,
            ]
        )
        #expect(login.status == 0, "\(login.stderr)")
        let lines = try String(contentsOfFile: statuses, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(lines.first == "forged 400")
        // After the accepted redirect, the same URL is refused: 400 while the listener closes, then no listener.
        #expect(lines.count == 3 && ["first 400", "first 000"].contains(lines[1]), "\(lines)")
        #expect(lines.count == 3 && ["replayed 400", "replayed 000"].contains(lines[2]), "\(lines)")
        #expect(try await daemon.stop() == 0)
        await provider.process.stop()
    }

    /// oidc-provider-mock, a third-party provider: discovery, the code flow with PKCE through a custom
    /// browser, the id_token's signature against its JWKS, and a refresh.
    @Test func signsInWithAGenericOpenIDProvider() async throws {
        let provider = try await MockOIDCProvider.start(in: directory)
        let daemon = try await DaemonProcess.start(in: directory, arguments: ["--log-level", "debug"])
        let login = try await tokenbroker(
            daemon,
            [
                "login", "--client-id", "generic-app", "--authority", provider.authority, "--scope", "email",
                "--webview", "custom", "--browser-command",
                try MockOIDCProvider.browser(signingIn: "grace", in: directory), "--json",
            ]
        )
        #expect(login.status == 0, "\(login.stderr)\n\(daemon.log)")
        let result = json(login)
        #expect(result?["tokenSource"] == .string("identityProvider"))
        let account = result?["account"]?.objectValue
        #expect(account?["identifier"] == .string("grace"))
        #expect(account?["environment"] == .string(provider.process.hostAndPort))
        #expect(result?["idToken"]?.stringValue?.split(separator: ".").count == 3)

        let cached = try await tokenbroker(
            daemon,
            ["token", "--client-id", "generic-app", "--authority", provider.authority, "--scope", "email", "--json"]
        )
        #expect(json(cached)?["tokenSource"] == .string("cache"), "\(cached.stderr)")
        let refreshed = try await tokenbroker(
            daemon,
            [
                "token", "--client-id", "generic-app", "--authority", provider.authority, "--scope", "email",
                "--force-refresh", "--json",
            ]
        )
        #expect(refreshed.status == 0, "\(refreshed.stderr)\n\(daemon.log)")
        #expect(json(refreshed)?["tokenSource"] == .string("identityProvider"))
        #expect(json(refreshed)?["accessToken"] != json(cached)?["accessToken"])
        #expect(try await daemon.stop() == 0)
        await provider.process.stop()
    }

    /// What oidc-agent users ask for: a generic provider's access token for OpenID Connect scopes alone.
    ///
    /// Sign-in with `openid profile`; then `token --scope openid` is served from the cache, refreshed when it is stale (it must
    /// outlive the provider's lifetime), and each token is one the provider's userinfo endpoint takes.
    @Test func openIDScopesAloneWorkWithAGenericProvider() async throws {
        let provider = try await MockOIDCProvider.start(in: directory)
        let daemon = try await DaemonProcess.start(in: directory)
        let app = ["--client-id", "oidc-agent-like", "--authority", provider.authority]
        let login = try await tokenbroker(
            daemon,
            ["login"] + app + [
                "--scope", "openid", "--scope", "profile", "--webview", "custom", "--browser-command",
                try MockOIDCProvider.browser(signingIn: "hopper", in: directory), "--json",
            ]
        )
        #expect(login.status == 0, "\(login.stderr)\n\(daemon.log)")
        let signedIn = try #require(json(login)?["accessToken"]?.stringValue)
        #expect(try await userinfo(provider, signedIn)?["sub"] == .string("hopper"))

        let cached = try await tokenbroker(daemon, ["token"] + app + ["--scope", "openid", "--json"])
        #expect(cached.status == 0, "\(cached.stderr)")
        #expect(json(cached)?["tokenSource"] == .string("cache"))
        #expect(json(cached)?["accessToken"]?.stringValue == signedIn)

        let stale = try await tokenbroker(
            daemon,
            ["token"] + app + ["--scope", "openid", "--min-validity", "7200", "--json"]
        )
        #expect(stale.status == 0, "\(stale.stderr)\n\(daemon.log)")
        #expect(json(stale)?["tokenSource"] == .string("identityProvider"))
        let refreshed = try #require(json(stale)?["accessToken"]?.stringValue)
        #expect(refreshed != signedIn)
        #expect(try await userinfo(provider, refreshed)?["sub"] == .string("hopper"))

        // The refreshed token replaced the first in the cache, and a scope the sign-in did not grant is not served.
        let again = try await tokenbroker(daemon, ["token"] + app + ["--scope", "openid profile", "--json"])
        #expect(json(again)?["accessToken"]?.stringValue == refreshed, "\(again.stderr)")
        let email = try await tokenbroker(daemon, ["token"] + app + ["--scope", "openid email"])
        #expect(email.status == 2, "\(email.stdout)\(email.stderr)")  // sign-in required
        #expect(try await daemon.stop() == 0)
        await provider.process.stop()
    }

    /// The provider's userinfo answer for an access token (nil unless 200).
    private func userinfo(_ provider: MockOIDCProvider, _ token: String) async throws -> [String: JSONValue]? {
        let url = try #require(URL(string: "\(provider.authority)/userinfo"))
        let response = try await AsyncHTTPTransport.shared.send(
            HTTPRequest(method: .get, url: url, headers: [("Authorization", "Bearer \(token)")]),
            timeout: .seconds(10)
        )
        guard response.status == 200 else { return nil }
        return try JSONValue.parse(response.body).objectValue
    }
}
