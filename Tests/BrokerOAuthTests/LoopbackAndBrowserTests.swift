import BrokerOAuth
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

@Suite struct LoopbackRedirectReceiverTests {
    /// GETs a URL over a real socket; returns the status.
    func get(_ url: String) async throws -> Int {
        try await AsyncHTTPTransport.shared.send(
            HTTPRequest(method: .get, url: testURL(url)),
            timeout: .seconds(5)
        )
        .status
    }

    @Test func acceptsOneRedirectWithTheRightStateAndRefusesTheRest() async throws {
        let receiver = try await LoopbackRedirectReceiver.start { url in
            url.contains("state=right") ? .accept(succeeded: true) : .reject("the state is not this sign-in's")
        }
        #expect(receiver.redirectURI == "http://127.0.0.1:\(receiver.port)/")
        let base = "http://127.0.0.1:\(receiver.port)"
        #expect(try await get("\(base)/favicon.ico") == 404)
        #expect(try await get("\(base)/?code=c&state=wrong") == 400)
        #expect(try await get("\(base)/?code=c&state=right") == 200)
        #expect(try await get("\(base)/?code=c2&state=right") == 400)
        let redirect = await receiver.redirect()
        #expect(redirect == "\(base)/?code=c&state=right")
        await receiver.close()
        await #expect(throws: TransportError.self) { _ = try await get("\(base)/?code=c&state=right") }
    }

    @Test func usesTheAppsLoopbackHostAndPath() async throws {
        let receiver = try await LoopbackRedirectReceiver.start(host: "localhost", path: "/callback") { _ in
            .accept(succeeded: false)
        }
        #expect(receiver.redirectURI == "http://localhost:\(receiver.port)/callback")
        #expect(try await get("http://127.0.0.1:\(receiver.port)/") == 404)
        #expect(try await get("http://127.0.0.1:\(receiver.port)/callback?error=access_denied&state=s") == 200)
        #expect(await receiver.redirect()?.hasSuffix("/callback?error=access_denied&state=s") == true)
        await receiver.close()
    }

    @Test func waitingEndsWhenTheTaskIsCanceled() async throws {
        let receiver = try await LoopbackRedirectReceiver.start { _ in .reject("no") }
        let waiter = Task { await receiver.redirect() }
        try await Task.sleep(for: .milliseconds(50))
        waiter.cancel()
        #expect(await waiter.value == nil)
        await receiver.close()
    }
}

@Suite(.serialized) struct BrowserLauncherTests {
    let url = testURL("https://idp.example/authorize?client_id=x&state=s")

    /// A script that records its arguments and exits with `status`.
    func recorder(in directory: TemporaryDirectory, status: Int = 0) throws -> (script: String, log: String) {
        let log = directory.path("args.log")
        let script = directory.path("browser.sh")
        try "#!/bin/sh\nprintf '%s\\n' \"$@\" > \(log)\nexit \(status)\n".write(
            toFile: script,
            atomically: true,
            encoding: .utf8
        )
        chmod(script, 0o700)
        return (script, log)
    }

    @Test func runsTheCustomCommandWithTheURLLast() async throws {
        let directory = try TemporaryDirectory()
        let (script, log) = try recorder(in: directory)
        let browser = try await BrowserLauncher.openCustomBrowser(
            url,
            command: [script, "--new-window", "with space"],
            environment: [:]
        )
        #expect(await browser.exitStatus() == 0)
        let arguments = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(arguments == ["--new-window", "with space", url.absoluteString])
    }

    /// The browser gets a session's process state, not the daemon's: no blocked or ignored signals (so Ctrl-C and
    /// SIGTERM reach it), its own process group, stdin on /dev/null.
    @Test func startsTheBrowserWithSignalsUnblocked() async throws {
        let directory = try TemporaryDirectory()
        let report = directory.path("state.txt")
        let script = directory.path("browser.sh")
        // The signal state is read by an exec'd grep from /proc/self: dash blocks every signal for a moment
        // whenever it forks, so a forked command reading the shell's own status would sometimes see that.
        try """
        #!/bin/sh
        echo "pgid $(ps -o pgid= -p $$ | tr -d ' ') pid $$" > \(report)
        readlink /proc/$$/fd/0 >> \(report)
        exec grep -E '^Sig(Blk|Ign):' /proc/self/status >> \(report)

        """.write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o700)
        // Block every signal on this thread first, as a server's threads may have them: the child must not
        // inherit that.
        var all = sigset_t()
        sigfillset(&all)
        var previous = sigset_t()
        pthread_sigmask(SIG_SETMASK, &all, &previous)
        let browser: LaunchedBrowser
        do {
            browser = try await BrowserLauncher.openCustomBrowser(url, command: [script], environment: [:])
        } catch {
            pthread_sigmask(SIG_SETMASK, &previous, nil)
            throw error
        }
        pthread_sigmask(SIG_SETMASK, &previous, nil)
        #expect(await browser.exitStatus() == 0)
        let lines = try String(contentsOfFile: report, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(lines.contains("SigBlk:\t0000000000000000"), "\(lines)")
        // No standard signal (1–31) ignored. glibc keeps its two internal real-time signals (32, 33) out of
        // reach of posix_spawn's reset, so whatever the test runner did with those shows through.
        let ignored = lines.first { $0.hasPrefix("SigIgn:") }.flatMap { UInt64($0.dropFirst(8), radix: 16) }
        #expect(ignored.map { $0 & 0x7FFF_FFFF } == 0, "\(lines)")
        let group = lines.first { $0.hasPrefix("pgid ") }?.split(separator: " ")
        #expect(group?.count == 4 && group?[1] == group?[3], "\(lines)")
        #expect(lines.contains("/dev/null"))
    }

    @Test func failsClearlyWhenTheCommandFailsOrIsMissing() async throws {
        let directory = try TemporaryDirectory()
        let (script, _) = try recorder(in: directory, status: 3)
        await #expect {
            _ = try await BrowserLauncher.openCustomBrowser(url, command: [script], environment: [:])
        } throws: { error in
            "\(error)".contains("exited with status 3")
        }
        await #expect {
            _ = try await BrowserLauncher.openCustomBrowser(url, command: ["/nonexistent/browser"], environment: [:])
        } throws: { error in
            "\(error)".contains("not found")
        }
    }

    @Test func triesEachBrowserEntryThenXdgOpen() async throws {
        let directory = try TemporaryDirectory()
        let (script, log) = try recorder(in: directory)
        let browser = try await BrowserLauncher.openSystemBrowser(
            url,
            environment: ["BROWSER": "/nonexistent/first:\(script) --private %s", "PATH": "/usr/bin:/bin"]
        )
        #expect(await browser.exitStatus() == 0)
        let arguments = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(arguments == ["--private", url.absoluteString])
    }

    /// The browser's session comes from the caller only; the daemon's own display never leaks in, and the caller
    /// cannot inject arbitrary variables.
    @Test func takesTheSessionFromTheCallerOnly() {
        let own = ["DISPLAY": ":0", "BROWSER": "daemon-browser", "PATH": "/usr/bin", "HOME": "/home/u", "TERM": "x"]
        let caller = ["WAYLAND_DISPLAY": "wayland-1", "PATH": "/opt/bin:/usr/bin", "LD_PRELOAD": "/tmp/evil.so"]
        let environment = BrowserLauncher.childEnvironment(caller, own: own)
        #expect(environment["DISPLAY"] == nil && environment["BROWSER"] == nil)
        #expect(environment["WAYLAND_DISPLAY"] == "wayland-1")
        #expect(environment["PATH"] == "/opt/bin:/usr/bin")
        #expect(environment["HOME"] == "/home/u" && environment["TERM"] == "x")
        #expect(environment["LD_PRELOAD"] == nil)
    }

    @Test func failsClearlyWhenNoBrowserStarts() async throws {
        // An empty PATH: neither $BROWSER's program nor xdg-open can be found.
        await #expect {
            _ = try await BrowserLauncher.openSystemBrowser(
                url,
                environment: ["BROWSER": "nobrowser", "PATH": "/nonexistent"]
            )
        } throws: { error in
            let text = "\(error)"
            return text.contains("no browser could be started") && text.contains("nobrowser was not found")
                && text.contains("xdg-open was not found")
        }
    }
}
