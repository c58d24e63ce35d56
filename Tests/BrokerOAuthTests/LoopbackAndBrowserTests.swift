import BrokerOAuth
import BrokerProtocol
import BrokerTestSupport
import BrokerTime
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
        // Closed: refused, and the error says so as the system does (not NIO's "connection reset (error set)").
        let refused = await #expect(throws: TransportError.self) { _ = try await get("\(base)/?code=c&state=right") }
        #expect(refused?.kind == .connection)
        #expect(refused?.reason == "could not connect to 127.0.0.1:\(receiver.port): Connection refused (errno 111)")
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

    /// The start page sends the browser on to the authorization URL with a 302, once; the address holds only a
    /// random path, and other paths of that shape are not found.
    @Test func servesTheStartPage() async throws {
        let receiver = try await LoopbackRedirectReceiver.start { _ in .reject("no") }
        let target = testURL("https://idp.example/authorize?client_id=x&state=secret-state&code_challenge=c")
        let start = receiver.startPage(redirectingTo: target)
        #expect(start.absoluteString.hasPrefix("http://127.0.0.1:\(receiver.port)/tokenbroker/start/"))
        #expect(!start.absoluteString.contains("state") && !start.absoluteString.contains("idp.example"))
        let response = try await AsyncHTTPTransport.shared.send(
            HTTPRequest(method: .get, url: start),
            timeout: .seconds(5)
        )
        #expect(response.status == 302)
        #expect(response.header("Location") == target.absoluteString)
        #expect(response.header("Cache-Control") == "no-store" && response.header("Referrer-Policy") == "no-referrer")
        #expect(try await get("http://127.0.0.1:\(receiver.port)/tokenbroker/start/guessed") == 404)
        #expect(try await get(start.absoluteString) == 404)  // served once: a later reader of argv finds nothing
        await receiver.close()
    }

    /// With localhost, the listener answers on ::1 as well, where the machine has IPv6: a browser may resolve
    /// localhost to either.
    @Test func listensOnBothLoopbacksForLocalhost() async throws {
        let receiver = try await LoopbackRedirectReceiver.start(host: "localhost", path: "/cb") { _ in
            .accept(succeeded: true)
        }
        let ipv6 = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
        var any = sockaddr_in6()
        any.sin6_family = sa_family_t(AF_INET6)
        any.sin6_addr = in6addr_loopback
        let hasIPv6 = withUnsafePointer(to: &any) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(ipv6, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) == 0
            }
        }
        close(ipv6)
        if hasIPv6 {
            #expect(try await get("http://[::1]:\(receiver.port)/elsewhere") == 404)
        }
        #expect(try await get("http://127.0.0.1:\(receiver.port)/elsewhere") == 404)
        await receiver.close()
    }

    /// A flood is held to 16 connections at once (the 17th is closed unanswered); closing the receiver closes every
    /// connection still open. (The request timeout is long here: none may close by itself while the test counts.)
    @Test func boundsItsConnectionsAndClosesThemAll() async throws {
        let receiver = try await LoopbackRedirectReceiver.start(requestTimeout: .seconds(600)) { _ in .reject("no") }
        var held: [Int32] = []
        defer { for fd in held { close(fd) } }
        for _ in 0..<LoopbackRedirectReceiver.maximumConnections {
            held.append(try tcpConnect(port: receiver.port))
        }
        try await waitUntil("the listener holds its most connections") {
            receiver.openConnections == LoopbackRedirectReceiver.maximumConnections
        }
        let extra = try tcpConnect(port: receiver.port)
        defer { close(extra) }
        #expect(await UnixSocket.isClosedByPeer(extra))
        #expect(receiver.openConnections == LoopbackRedirectReceiver.maximumConnections)
        await receiver.close()
        #expect(receiver.openConnections == 0)
        for fd in held { #expect(await UnixSocket.isClosedByPeer(fd)) }
    }

    /// A connection that sends no request is closed after the request timeout, and its slot is free again.
    @Test func closesAConnectionThatSendsNothing() async throws {
        let rejectAll: @Sendable (String) -> RedirectVerdict = { _ in .reject("no") }
        let receiver = try await LoopbackRedirectReceiver.start(requestTimeout: .milliseconds(200), judge: rejectAll)
        let silent = try tcpConnect(port: receiver.port)
        defer { close(silent) }
        #expect(await UnixSocket.isClosedByPeer(silent))
        try await waitUntil("every connection closed") { receiver.openConnections == 0 }
        await receiver.close()
    }

    /// A TCP connection to 127.0.0.1:`port`, with a receive timeout.
    func tcpConnect(port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(fd)
            throw TestSetupError("connect: \(errno)")
        }
        var timeout = timeval(tv_sec: 15, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
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
    let url = testURL("http://127.0.0.1:4711/tokenbroker/start/0123")

    /// A script that records its arguments and exits with `status`.
    func recorder(in directory: TemporaryDirectory, status: Int = 0) throws -> (script: String, log: String) {
        let log = directory.path("args.log")
        let script = directory.path("browser.sh")
        try "#!/bin/sh\nprintf '%s\\n' \"$@\" > \(log)\nexit \(status)\n".write(
            toFile: script,
            atomically: false,
            encoding: .utf8
        )
        chmod(script, 0o700)
        return (script, log)
    }

    /// Settings as the daemon builds them: the configuration's profiles and system browser, its own environment.
    func settings(
        profiles: [String: [String]] = [:],
        systemBrowser: [String]? = nil,
        environment: [String: String] = ["PATH": "/usr/bin:/bin"]
    ) -> BrowserSettings {
        BrowserSettings(profiles: profiles, systemBrowser: systemBrowser, environment: environment)
    }

    @Test func runsTheProfileWithTheURLLastOrInPlaceOfPercentS() async throws {
        let directory = try TemporaryDirectory()
        let (script, log) = try recorder(in: directory)
        let browser = try await BrowserLauncher.open(
            url,
            profile: [script, "--new-window", "with space"],
            settings: settings(),
            display: [:],
            clock: .system
        )
        #expect(await browser.exitStatus() == 0)
        let arguments = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(arguments == ["--new-window", "with space", url.absoluteString])
        let again = try await BrowserLauncher.open(
            url,
            profile: [script, "--app=%s", "x"],
            settings: settings(),
            display: [:],
            clock: .system
        )
        #expect(await again.exitStatus() == 0)
        let replaced = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(replaced == ["--app=\(url.absoluteString)", "x"])
    }

    /// The browser gets a session's process state, not the daemon's: no blocked or ignored signals (so Ctrl-C and
    /// SIGTERM reach it), its own process group, stdin on /dev/null, and no descriptor of the daemon's beyond 0–2.
    @Test func startsTheBrowserWithSignalsUnblockedAndNoDescriptorOfOurs() async throws {
        let directory = try TemporaryDirectory()
        let report = directory.path("state.txt")
        let script = directory.path("browser.sh")
        // The browser's state is read from outside, once the script has exec'd a program that waits: a shell
        // looking at itself would see what it holds for a moment (dash blocks every signal while it forks, and
        // keeps a saved copy of a descriptor while it redirects one).
        try """
        #!/bin/sh
        echo "pgid $(ps -o pgid= -p $$ | tr -d ' ') pid $$" > \(report)
        readlink /proc/$$/fd/0 >> \(report)
        exec sleep 30

        """.write(toFile: script, atomically: false, encoding: .utf8)
        chmod(script, 0o700)
        // A descriptor of ours without close-on-exec, as an inherited one would be: the browser must not get it.
        let leaked = open("/dev/null", O_RDONLY)
        defer { close(leaked) }
        // Block every signal on this thread first, as a server's threads may have them: the child must not
        // inherit that.
        var all = sigset_t()
        sigfillset(&all)
        var previous = sigset_t()
        pthread_sigmask(SIG_SETMASK, &all, &previous)
        let browser: LaunchedBrowser
        do {
            browser = try await BrowserLauncher.open(
                url,
                profile: [script],
                settings: settings(),
                display: [:],
                clock: .system
            )
        } catch {
            pthread_sigmask(SIG_SETMASK, &previous, nil)
            throw error
        }
        pthread_sigmask(SIG_SETMASK, &previous, nil)
        let pid = try await waitForExec(of: "sleep", reportedIn: report)
        var reaped = false
        // Only while the process is ours: once reaped, its pid may be another process's.
        defer { if !reaped { kill(pid, SIGKILL) } }
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8).split(separator: "\n")
        #expect(status.contains("SigBlk:\t0000000000000000"), "\(status)")
        // No standard signal (1–31) ignored. glibc keeps its two internal real-time signals (32, 33) out of
        // reach of posix_spawn's reset, so whatever the test runner did with those shows through.
        let ignored = status.first { $0.hasPrefix("SigIgn:") }.flatMap { UInt64($0.dropFirst(8), radix: 16) }
        #expect(ignored.map { $0 & 0x7FFF_FFFF } == 0, "\(status)")
        let lines = try String(contentsOfFile: report, encoding: .utf8).split(separator: "\n").map(String.init)
        let group = lines.first { $0.hasPrefix("pgid ") }?.split(separator: " ")
        #expect(group?.count == 4 && group?[1] == group?[3], "\(lines)")
        #expect(lines.contains("/dev/null"))
        let descriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").compactMap {
            Int($0)
        }
        #expect(descriptors.sorted() == [0, 1, 2], "\(descriptors)")
        kill(pid, SIGTERM)
        let exit = await browser.exitStatus(within: .seconds(10), clock: .system)
        reaped = exit != nil
        #expect(exit == 128 + SIGTERM, "the browser ended with \(exit.map(String.init) ?? "no status")")
    }

    /// The pid the script reported, once that process runs `program`.
    private func waitForExec(of program: String, reportedIn report: String) async throws -> Int32 {
        let deadline = ContinuousClock.now + eventTimeout
        while ContinuousClock.now < deadline {
            let text = (try? String(contentsOfFile: report, encoding: .utf8)) ?? ""
            if let pid = text.split(separator: " ").last.flatMap({ Int32($0.split(separator: "\n")[0]) }),
                let command = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8),
                command == program + "\n"
            {
                return pid
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw TestSetupError("the browser script never ran \(program)")
    }

    @Test func failsClearlyWhenTheCommandFailsOrIsMissing() async throws {
        let directory = try TemporaryDirectory()
        let (script, _) = try recorder(in: directory, status: 3)
        await #expect {
            _ = try await BrowserLauncher.open(
                url,
                profile: [script],
                settings: settings(),
                display: [:],
                clock: .system
            )
        } throws: { error in
            "\(error)".contains("exited with status 3")
        }
        await #expect {
            _ = try await BrowserLauncher.open(
                url,
                profile: ["/nonexistent/browser"],
                settings: settings(),
                display: [:],
                clock: .system
            )
        } throws: { error in
            "\(error)".contains("not found")
        }
    }

    /// systemBrowser: the configuration's system-browser, then each entry of the daemon's own $BROWSER, then
    /// xdg-open; the first that starts wins.
    @Test func triesTheConfiguredBrowserThenBROWSERThenXdgOpen() async throws {
        let directory = try TemporaryDirectory()
        let (script, log) = try recorder(in: directory)
        let browser = try await BrowserLauncher.openSystemBrowser(
            url,
            settings: settings(
                systemBrowser: ["/nonexistent/configured"],
                environment: ["BROWSER": "/nonexistent/first:\(script) --private %s", "PATH": "/usr/bin:/bin"]
            ),
            display: [:],
            clock: .system
        )
        #expect(await browser.exitStatus() == 0)
        let arguments = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(arguments == ["--private", url.absoluteString])
    }

    /// The browser's display comes from the caller, and nothing else does: no program, no PATH, no library to
    /// preload; the daemon passes its own few basic variables (PATH, HOME, the language), and not the rest of its
    /// environment (a service's variables, secrets).
    @Test func takesTheDisplayFromTheCallerAndLittleElse() {
        let own = [
            "DISPLAY": ":0", "BROWSER": "daemon-browser", "PATH": "/usr/bin", "HOME": "/home/u", "LC_TIME": "C",
            "AWS_SECRET_ACCESS_KEY": "s3cr3t", "NOTIFY_SOCKET": "/run/n", "TERM": "x",
        ]
        let caller = [
            "WAYLAND_DISPLAY": "wayland-1", "PATH": "/opt/bin", "LD_PRELOAD": "/tmp/evil.so", "BROWSER": "/tmp/evil",
            "XAUTHORITY": "/run/user/1/xauth",
        ]
        let environment = BrowserLauncher.childEnvironment(display: caller, own: own)
        #expect(environment["WAYLAND_DISPLAY"] == "wayland-1" && environment["XAUTHORITY"] == "/run/user/1/xauth")
        #expect(environment["DISPLAY"] == nil && environment["BROWSER"] == nil)
        #expect(environment["PATH"] == "/usr/bin" && environment["HOME"] == "/home/u" && environment["LC_TIME"] == "C")
        #expect(environment["LD_PRELOAD"] == nil && environment["AWS_SECRET_ACCESS_KEY"] == nil)
        #expect(environment["NOTIFY_SOCKET"] == nil && environment["TERM"] == nil)
    }

    @Test func failsClearlyWhenNoBrowserStarts() async throws {
        // An empty PATH: neither $BROWSER's program nor xdg-open can be found.
        await #expect {
            _ = try await BrowserLauncher.openSystemBrowser(
                url,
                settings: settings(environment: ["BROWSER": "nobrowser", "PATH": "/nonexistent"]),
                display: [:],
                clock: .system
            )
        } throws: { error in
            let text = "\(error)"
            return text.contains("no browser could be started") && text.contains("nobrowser was not found")
                && text.contains("xdg-open was not found")
        }
    }
}
