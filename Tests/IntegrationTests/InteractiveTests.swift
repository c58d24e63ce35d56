import BrokerClient
import BrokerOAuth
import BrokerProtocol
import BrokerSettings
import BrokerTestSupport
import Foundation
import Synchronization
import Testing

/// The events of one sign-in, in the order they came.
final class EventLog: Sendable {
    private let events = Mutex<[InteractiveEvent]>([])

    func record(_ event: InteractiveEvent) {
        events.withLock { $0.append(event) }
    }

    var all: [InteractiveEvent] {
        events.withLock { $0 }
    }

    /// The events by kind, for comparing orders.
    var kinds: [String] {
        all.map { event in
            switch event {
            case .didStartLoad: "didStartLoad"
            case .didFinishLoad: "didFinishLoad"
            case .didFail: "didFail"
            case .didComplete: "didComplete"
            case .deviceCode: "deviceCode"
            }
        }
    }
}

/// Each `webviewType` end to end through the daemon, against the Entra-shaped provider, with its notifications
/// in order; cancel, timeout, refusal and a closed connection.
@Suite(.serialized) struct InteractiveTests {
    let directory: TemporaryDirectory
    let provider: EntraTestProvider
    let daemon: DaemonProcess
    let broker: Broker
    let scope = "api://tokenbroker-tests/Things.Read"

    init() async throws {
        directory = try TemporaryDirectory(prefix: "webview")
        provider = try await EntraTestProvider.start(in: directory)
        daemon = try await DaemonProcess.start(in: directory, arguments: provider.daemonArguments)
        broker = try await Broker.connect(socketPath: daemon.socketPath)
    }

    func finish() async throws {
        await broker.close()
        #expect(try await daemon.stop() == 0)
        await provider.process.stop()
    }

    func request(
        _ webviewType: WebviewType,
        client: String = EntraTestProvider.familyClientX,
        browser: String? = nil,
        redirectUri: String? = nil,
        timeout: Duration? = nil,
        environment: [String: String] = [:]
    ) throws -> InteractiveRequest {
        // A customBrowser runs a profile of the daemon's configuration: the test's browser becomes one.
        if let browser { try daemon.addBrowserProfile("test-browser", command: [browser]) }
        return InteractiveRequest(
            clientId: client,
            scopes: [scope],
            authority: provider.authority,
            webviewType: webviewType,
            browserProfile: browser == nil ? nil : "test-browser",
            redirectUri: redirectUri,
            timeout: timeout,
            environment: environment
        )
    }

    /// Signs a user in on the provider's page the way a web view would, without following the redirect: the URL
    /// the view would have been sent to.
    func signInWithoutFollowing(_ url: String, username: String = "ada@contoso.example") async throws -> String {
        var form = FormBody()
        form.add("username", username)
        let response = try await AsyncHTTPTransport.shared.send(
            .form(try #require(URL(string: url)), form),
            timeout: .seconds(10)
        )
        #expect(response.status == 302)
        return try #require(response.header("Location"))
    }

    @Test func customBrowser() async throws {
        let events = EventLog()
        let browser = try EntraTestProvider.browser(signingIn: "ada@contoso.example", in: directory)
        let result = try await broker.acquireToken(
            try request(.customBrowser, browser: browser),
            onEvent: events.record
        )
        #expect(result.tokenSource == .identityProvider)
        #expect(result.account.username == "ada@contoso.example")
        #expect(events.kinds == ["didStartLoad", "didFinishLoad", "didComplete"])
        guard case .didStartLoad(let url) = events.all.first else { return }
        let query = URLComponents(string: url)?.queryItems ?? []
        #expect(query.contains { $0.name == "code_challenge_method" && $0.value == "S256" })
        #expect(query.contains { $0.name == "client_info" && $0.value == "1" })
        #expect(query.contains { $0.name == "redirect_uri" && $0.value?.hasPrefix("http://127.0.0.1:") == true })
        try await finish()
    }

    /// systemBrowser runs the user's configured browser (system-browser in tokenbrokerd.conf), never one a client
    /// names: a BROWSER forwarded by the client is ignored.
    @Test func systemBrowserIsTheUsersConfiguredOne() async throws {
        let events = EventLog()
        let browser = try EntraTestProvider.browser(signingIn: "grace@contoso.example", in: directory)
        try daemon.configuration.saveSystemBrowser([browser])
        // A browser the client names: it leaves a mark if run, and fails, so a broker that tried it would go on.
        let marker = directory.path("client-browser-ran")
        let clientBrowser = directory.path("client-browser")
        try "#!/bin/sh\ntouch '\(marker)'\nexit 1\n".write(toFile: clientBrowser, atomically: false, encoding: .utf8)
        chmod(clientBrowser, 0o700)
        let result = try await broker.acquireToken(
            try request(.systemBrowser, environment: ["BROWSER": clientBrowser, "DISPLAY": ":42"]),
            onEvent: events.record
        )
        #expect(result.account.username == "grace@contoso.example")
        #expect(!FileManager.default.fileExists(atPath: marker), "the client's BROWSER was run")
        #expect(events.kinds == ["didStartLoad", "didFinishLoad", "didComplete"])
        try await finish()
    }

    @Test func defaultIsTheBrowserWithADisplay() async throws {
        let events = EventLog()
        let browser = try EntraTestProvider.browser(signingIn: "ada@contoso.example", in: directory)
        try daemon.configuration.saveSystemBrowser([browser])
        let result = try await broker.acquireToken(
            try request(.default, environment: ["WAYLAND_DISPLAY": "wayland-0"]),
            onEvent: events.record
        )
        #expect(result.tokenSource == .identityProvider)
        #expect(events.kinds == ["didStartLoad", "didFinishLoad", "didComplete"])
        try await finish()
    }

    /// Without a display, `default` is the device code; the user approves on "another device" (the control API).
    @Test func defaultIsTheDeviceCodeWithoutADisplay() async throws {
        let events = EventLog()
        let provider = provider
        let signIn = broker.acquireToken(try request(.default))
        var prompt: DeviceCodeNotification?
        for await event in signIn.events {
            events.record(event)
            if case .deviceCode(let notification) = event {
                prompt = notification
                try await provider.control(
                    "device",
                    ["userCode": notification.userCode, "username": "ada@contoso.example", "action": "approve"]
                )
            }
        }
        let result = try await signIn.result()
        #expect(result.account.username == "ada@contoso.example")
        #expect(events.kinds == ["deviceCode"])
        #expect(prompt?.verificationUri == "\(provider.process.baseURL)/devicelogin")
        #expect(prompt?.message.contains(prompt?.userCode ?? "?") == true)
        #expect((prompt?.expiresIn ?? 0) > 0)
        try await finish()
    }

    @Test func deviceCodeDeclined() async throws {
        let events = EventLog()
        let provider = provider
        let signIn = broker.acquireToken(try request(.deviceCode))
        for await event in signIn.events {
            events.record(event)
            if case .deviceCode(let notification) = event {
                try await provider.control(
                    "device",
                    ["userCode": notification.userCode, "username": "ada@contoso.example", "action": "deny"]
                )
            }
        }
        await #expect(throws: BrokerError.self) { _ = try await signIn.result() }
        do {
            _ = try await signIn.result()
        } catch {
            #expect(error.code == .userCanceled)
        }
        #expect(events.kinds == ["deviceCode", "didFail"])
        try await finish()
    }

    /// The app hosts the page: it gets the URL, signs in, and hands back the redirect.
    @Test func embedded() async throws {
        let events = EventLog()
        let redirectUri = "https://app.example/auth/callback"
        let signIn = broker.acquireToken(try request(.embedded, redirectUri: redirectUri))
        var iterator = signIn.events.makeAsyncIterator()
        let first = await iterator.next()
        guard case .didStartLoad(let url)? = first else {
            Issue.record("first event: \(String(describing: first))")
            return
        }
        events.record(.didStartLoad(url: url))
        let redirect = try await signInWithoutFollowing(url)
        #expect(redirect.hasPrefix(redirectUri + "?code="))
        // A URL with another state is refused and the flow keeps waiting; then the real one is taken.
        let forged = redirect.replacingOccurrences(of: "state=", with: "state=x")
        await #expect(throws: BrokerError.self) { _ = try await signIn.complete(responseUrl: Secret(forged)) }
        #expect(try await signIn.complete(responseUrl: Secret(redirect)))
        #expect(try await !signIn.complete(responseUrl: Secret(redirect)))
        while let event = await iterator.next() { events.record(event) }
        let result = try await signIn.result()
        #expect(result.account.username == "ada@contoso.example")
        #expect(events.kinds == ["didStartLoad", "didComplete"])
        try await finish()
    }

    @Test func cancelStopsTheFlow() async throws {
        let events = EventLog()
        let signIn = broker.acquireToken(try request(.embedded, redirectUri: "https://app.example/cb"))
        var iterator = signIn.events.makeAsyncIterator()
        if let first = await iterator.next() { events.record(first) }
        #expect(try await signIn.cancel())
        while let event = await iterator.next() { events.record(event) }
        do {
            _ = try await signIn.result()
            Issue.record("a canceled sign-in succeeded")
        } catch {
            #expect(error.code == .userCanceled)
        }
        #expect(events.kinds == ["didStartLoad", "didFail"])
        if case .didFail(let error)? = events.all.last { #expect(error.code == .userCanceled) }
        #expect(try await !signIn.cancel())
        try await finish()
    }

    /// A sign-in the broker's shutdown cuts short is not the user's decision: didFail and the answer say
    /// broker_stopping (retry), never user_canceled; the daemon still stops cleanly.
    @Test func aShutdownEndsTheFlowWithBrokerStopping() async throws {
        let events = EventLog()
        let signIn = broker.acquireToken(try request(.embedded, redirectUri: "https://app.example/cb"))
        var iterator = signIn.events.makeAsyncIterator()
        if let first = await iterator.next() { events.record(first) }
        #expect(events.kinds == ["didStartLoad"])
        kill(daemon.pid, SIGTERM)
        while let event = await iterator.next() { events.record(event) }
        do {
            _ = try await signIn.result()
            Issue.record("a sign-in cut off by the shutdown succeeded")
        } catch {
            #expect(error.code == .brokerStopping, "\(error)")
            #expect(error.details?.errorCode == .brokerStopping)
        }
        #expect(events.kinds == ["didStartLoad", "didFail"])
        if case .didFail(let error)? = events.all.last { #expect(error.code == .brokerStopping) }
        await broker.close()
        #expect(try await daemon.stop() == 0)
        await provider.process.stop()
    }

    @Test func timesOut() async throws {
        let events = EventLog()
        let timingOut = try request(.embedded, redirectUri: "https://app.example/cb", timeout: .seconds(1))
        do {
            _ = try await broker.acquireToken(timingOut, onEvent: events.record)
            Issue.record("the sign-in did not time out")
        } catch {
            #expect(error.code == .timeout)
        }
        #expect(events.kinds == ["didStartLoad", "didFail"])
        try await finish()
    }

    /// No browser can start (the configured one is missing, and the daemon's PATH has no xdg-open): the request
    /// fails clearly, naming webviewType, after didStartLoad and didFail.
    @Test func noBrowserFailsClearly() async throws {
        let events = EventLog()
        let elsewhere = try TemporaryDirectory(prefix: "nobrowser")
        let bare = try await DaemonProcess.start(
            in: elsewhere,
            arguments: provider.daemonArguments,
            environment: ["PATH": elsewhere.path("empty-bin")]
        )
        try bare.configuration.saveSystemBrowser(["/nonexistent/browser"])
        let client = try await Broker.connect(socketPath: bare.socketPath)
        let withoutBrowser = try request(.systemBrowser, environment: ["DISPLAY": ":42"])
        do {
            _ = try await client.acquireToken(withoutBrowser, onEvent: events.record)
            Issue.record("a sign-in without a browser succeeded")
        } catch {
            #expect(error.code == .invalidRequest)
            #expect(error.details?.field == "params.webviewType")
            #expect(error.message.contains("no browser could be started"))
        }
        #expect(events.kinds == ["didStartLoad", "didFail"])
        await client.close()
        #expect(try await bare.stop() == 0)
        try await finish()
    }

    /// A browser that started well and then fails before any redirect came (it exits 4 once the page is out) ends
    /// the sign-in at once, naming the browser, rather than leaving it to the timeout.
    @Test func aBrowserThatFailsLaterEndsTheSignIn() async throws {
        let loaded = directory.path("page-loaded")
        let browser = directory.path("fails-later.sh")
        try "#!/bin/sh\nwhile [ ! -e '\(loaded)' ]; do sleep 0.05; done\nexit 4\n"
            .write(toFile: browser, atomically: false, encoding: .utf8)
        chmod(browser, 0o700)
        let events = EventLog()
        let failing = try request(.customBrowser, browser: browser)
        do {
            _ = try await broker.acquireToken(failing) { event in
                events.record(event)
                if case .didFinishLoad = event { _ = FileManager.default.createFile(atPath: loaded, contents: nil) }
            }
            Issue.record("a sign-in whose browser failed succeeded")
        } catch {
            #expect(error.code == .invalidRequest)
            #expect(error.details?.field == "params.webviewType")
            #expect(error.message.contains("exited with status 4 before the sign-in completed"))
        }
        #expect(events.kinds == ["didStartLoad", "didFinishLoad", "didFail"])
        try await finish()
    }

    /// The user refuses on the provider's page: user_canceled.
    @Test func userDeniesInTheBrowser() async throws {
        let script = try BrowserScript.write(field: "action", value: "deny", in: directory, name: "deny.sh")
        let denied = try request(.customBrowser, browser: script)
        do {
            _ = try await broker.acquireToken(denied) { _ in }
            Issue.record("a denied sign-in succeeded")
        } catch {
            #expect(error.code == .userCanceled)
            #expect(error.details?.error == "access_denied")
        }
        try await finish()
    }

    /// The provider refuses the code at its redemption (`invalid_grant`): the app hears `interaction_required`,
    /// with the provider's error, as Protocol/ §10.4 says (not `server_error`: another sign-in is what helps).
    @Test func aRefusedCodeNeedsAnotherSignIn() async throws {
        _ = try await provider.control(
            "fail-next",
            ["count": 1, "status": 400, "error": "invalid_grant", "grantType": "authorization_code"]
        )
        let browser = try EntraTestProvider.browser(signingIn: "ada@contoso.example", in: directory)
        let signIn = try request(.customBrowser, browser: browser)
        do {
            _ = try await broker.acquireToken(signIn) { _ in }
            Issue.record("a sign-in whose code was refused succeeded")
        } catch {
            #expect(error.code == .interactionRequired)
            #expect(error.details?.error == "invalid_grant")
        }
        try await finish()
    }

    /// A signed-in account named in the request is answered from the cache: no sign-in is shown.
    @Test func triesSilentFirst() async throws {
        let browser = try EntraTestProvider.browser(signingIn: "ada@contoso.example", in: directory)
        let first = try await broker.acquireToken(try request(.customBrowser, browser: browser)) { _ in }
        let events = EventLog()
        var again = try request(.customBrowser, browser: "/nonexistent/browser")
        again.account = AccountSelector(identifier: first.account.identifier)
        let second = try await broker.acquireToken(again, onEvent: events.record)
        #expect(second.tokenSource == .cache)
        #expect(events.all.isEmpty)
        again.prompt = "login"
        await #expect(throws: BrokerError.self) { _ = try await broker.acquireToken(again) { _ in } }
        try await finish()
    }

    /// Closing the connection that started a flow cancels it: its correlation id is free again (a flow still
    /// running would make a second one with that id invalid_params).
    @Test func aClosedConnectionCancelsItsFlow() async throws {
        let other = try await Broker.connect(socketPath: daemon.socketPath)
        let embedded = try request(.embedded, redirectUri: "https://app.example/cb")
        var iterator = other.acquireToken(embedded).events.makeAsyncIterator()
        guard case .didStartLoad? = await iterator.next() else {
            Issue.record("the first flow did not start")
            return
        }
        await other.close()
        var restarted = false
        var attempts = 0
        while !restarted && attempts < 100 {
            attempts += 1
            let again = broker.acquireToken(embedded)
            var events = again.events.makeAsyncIterator()
            if case .didStartLoad? = await events.next() {
                restarted = true
                #expect(try await again.cancel())
            } else {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        #expect(restarted)
        try await finish()
    }
}
