import BrokerClient
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

/// The built daemon as systemd runs it, without systemd: a notify socket made by the test, and
/// `systemd-socket-activate` handing it the listening socket. (`Tests/systemd/` runs the installed units under a
/// real `systemd --user`.)
@Suite(.serialized) struct ServiceManagerTests {
    let directory: TemporaryDirectory

    init() throws {
        directory = try TemporaryDirectory(prefix: "sd")
    }

    /// READY=1 once the socket is served, with a STATUS= a person can read; WATCHDOG=1 at half the interval;
    /// RELOADING=1 then READY=1 around SIGHUP; STOPPING=1 on SIGTERM; in that order.
    @Test func notifiesTheServiceManagerInOrder() async throws {
        let notify = try NotifySocket(in: directory)
        let daemon = try await DaemonProcess.start(
            in: directory,
            environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"]
        )
        let ready = try await notify.wait(for: "READY=1") { $0.contains { $0.hasPrefix("READY=1") } }
        let first = try #require(ready.first)
        #expect(first.hasPrefix("READY=1\nSTATUS=Serving \(daemon.socketPath) (bound by the daemon)"), "\(first)")
        #expect(UnixSocket.canConnect(daemon.socketPath))
        try await notify.wait(for: "two watchdog pings") { $0.filter { $0.hasPrefix("WATCHDOG=1") }.count >= 2 }

        kill(daemon.pid, SIGHUP)
        let reloaded = try await notify.wait(for: "READY=1 after RELOADING=1") { messages in
            guard let reloading = messages.firstIndex(where: { $0.hasPrefix("RELOADING=1") }) else { return false }
            return messages[reloading...].contains { $0.hasPrefix("READY=1") && $0.contains("; reloaded (log level") }
        }
        #expect(reloaded.contains { $0.hasPrefix("RELOADING=1\nMONOTONIC_USEC=") })
        #expect(UnixSocket.canConnect(daemon.socketPath))  // a reload is not a restart

        #expect(try await daemon.stop() == 0)
        // The daemon has exited, but the reader may not have taken its last datagram off the socket yet.
        let all = try await notify.wait(for: "STOPPING=1") { $0.contains { $0.hasPrefix("STOPPING=1") } }
        let order = all.compactMap { message -> String? in
            for kind in ["READY=1", "RELOADING=1", "STOPPING=1"] where message.hasPrefix(kind) { return kind }
            return nil
        }
        #expect(order == ["READY=1", "RELOADING=1", "READY=1", "STOPPING=1"], "\(all)")
        // The watchdog pings on while the requests in flight finish, but no status says it is serving any more.
        let afterStopping = all.drop { !$0.hasPrefix("STOPPING=1") }.dropFirst()
        #expect(afterStopping.allSatisfy { $0.hasPrefix("WATCHDOG=1") && !$0.contains("Serving") }, "\(all)")
    }

    /// A notify socket nobody drains must not stall the daemon: libsystemd's send blocks after ten datagrams,
    /// and systemd always drains, but a daemon without a manager never sends any.
    @Test func withoutAManagerNothingIsSentAndNothingWaits() async throws {
        let daemon = try await DaemonProcess.start(in: directory, environment: ["WATCHDOG_USEC": "200000"])
        let broker = try await Broker.connect(socketPath: daemon.socketPath)
        for _ in 0..<5 { _ = try await broker.status() }
        await broker.close()
        #expect(try await daemon.stop() == 0)
    }

    /// `systemd-socket-activate` starts the daemon on the first connection and hands it the socket (fd named
    /// `broker`); the daemon serves it, says so in getStatus, and with --idle-exit leaves when idle, exit 0.
    @Test func servesASocketSystemdPasses() async throws {
        let socketPath = directory.path("activated.sock")
        let notify = try NotifySocket(in: directory)
        let log = directory.url.appending(path: "activate.log")
        let activator = try ChildProcess.spawn(
            "/usr/bin/systemd-socket-activate",
            [
                "--listen=\(socketPath)", "--fdname=broker", "-E", "NOTIFY_SOCKET=\(notify.path)",
                try Binaries.url("tokenbrokerd").path, "--state-directory", directory.path("state"), "--idle-exit", "1",
            ],
            environment: childEnvironment([:]),
            stdout: .file(log.path),
            stderr: .file(log.path)
        )
        defer { activator.signal(SIGTERM) }
        let deadline = ContinuousClock.now + eventTimeout
        while !FileManager.default.fileExists(atPath: socketPath) && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(notify.messages.isEmpty)  // nothing runs before the first connection

        let broker = try await connectOnceListening(socketPath, before: deadline)
        let status = try await broker.status()
        #expect(status.activation == "systemd")
        #expect(status.socketPath == socketPath)
        #expect(status.pid == activator.pid)  // exec'd in place by systemd-socket-activate
        let ready = try await notify.wait(for: "READY=1") { $0.contains { $0.hasPrefix("READY=1") } }
        #expect(ready.contains { $0.contains("(socket-activated)") })
        await broker.close()

        // Idle for a second with no connection: exits 0 (the socket stays with the manager in real life).
        let exit = try await activator.waitForExit(timeout: .seconds(15))
        #expect(exit == 0, "\((try? String(contentsOf: log, encoding: .utf8)) ?? "")")
        try await notify.wait(for: "STOPPING=1") { $0.contains { $0.hasPrefix("STOPPING=1") } }
    }

    /// While a grant of the managed-identity endpoint lives, the socket-activated daemon does not leave when idle
    /// (its holders would lose the endpoint, which nothing would start again); once the last one is revoked, it does.
    @Test func staysWhileAGrantLives() async throws {
        let socketPath = directory.path("granted.sock")
        let log = directory.url.appending(path: "granted.log")
        let activator = try ChildProcess.spawn(
            "/usr/bin/systemd-socket-activate",
            [
                "--listen=\(socketPath)", "--fdname=broker", try Binaries.url("tokenbrokerd").path, "--no-bus",
                "--state-directory", directory.path("granted-state"), "--idle-exit", "1",
            ],
            environment: childEnvironment([:]),
            stdout: .file(log.path),
            stderr: .file(log.path)
        )
        defer { activator.signal(SIGTERM) }
        let broker = try await connectOnceListening(socketPath, before: ContinuousClock.now + eventTimeout)
        _ = try await broker.importCache(Secret(CacheFixtures.text(CacheFixtures.msalCache())))
        let created = try await broker.createGrant(
            CreateGrantParams(
                clientId: CacheFixtures.clientId,
                authority: CacheFixtures.authority,
                resources: ["https://graph.microsoft.com"],
                label: "stays"
            )
        )
        #expect(created.grant.listening)
        await broker.close()

        // Idle past --idle-exit, the daemon says it stays for the grant (the event waited for), and still runs.
        let deadline = ContinuousClock.now + .seconds(30)
        while !((try? String(contentsOf: log, encoding: .utf8)) ?? "").contains("idle, but staying") {
            guard activator.isRunning, ContinuousClock.now < deadline else { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        let said = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        #expect(said.contains("idle, but staying: a grant of the managed-identity endpoint lives"), "\(said)")
        #expect(activator.isRunning, "\(said)")

        let again = try await Broker.connect(socketPath: socketPath)
        #expect(try await again.grants().map(\.label) == ["stays"])
        _ = try await again.revokeGrant("stays")
        await again.close()
        let exit = try await activator.waitForExit(timeout: .seconds(15))
        #expect(exit == 0, "\((try? String(contentsOf: log, encoding: .utf8)) ?? "")")
    }

    /// Two sockets without a `broker` name: the daemon refuses to guess, and says why.
    @Test func refusesAmbiguousSockets() async throws {
        let first = directory.path("a.sock")
        let log = directory.url.appending(path: "ambiguous.log")
        let activator = try ChildProcess.spawn(
            "/usr/bin/systemd-socket-activate",
            [
                "--listen=\(first)", "--listen=\(directory.path("b.sock"))", try Binaries.url("tokenbrokerd").path,
                "--state-directory", directory.path("state"),
            ],
            environment: childEnvironment([:]),
            stderr: .file(log.path)
        )
        defer { activator.signal(SIGTERM) }
        // The first connection starts it. The file appears at bind(), a moment before listen(): until then a
        // connection is refused, and nothing starts.
        let deadline = ContinuousClock.now + eventTimeout
        while !UnixSocket.canConnect(first) && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        let exit = try await activator.waitForExit(timeout: .seconds(15))
        #expect(exit == 1)
        let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        #expect(text.contains("none is named \"broker\""), "\(text)")
    }
}

/// Connects to the broker at `socketPath` as soon as it listens.
///
/// The file appears at bind(), a moment before listen(), and until then a connection is refused. Throws the last
/// refusal after `deadline`.
private func connectOnceListening(_ socketPath: String, before deadline: ContinuousClock.Instant) async throws -> Broker
{
    while true {
        do {
            return try await Broker.connect(socketPath: socketPath)
        } catch {
            guard ContinuousClock.now < deadline else { throw error }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}
