import BrokerTestSupport
import Foundation
import Logging
import Synchronization
import Testing

@testable import BrokerSystemd

/// The libsystemd wrappers, against a notify socket made by the test.
///
/// `setenv` is process-wide: serialized.
@Suite(.serialized) struct SystemdTests {
    @Test func notificationsArriveInOrder() async throws {
        let directory = try TemporaryDirectory()
        let socket = try NotifySocket(in: directory)
        setenv("NOTIFY_SOCKET", socket.path, 1)
        defer { unsetenv("NOTIFY_SOCKET") }
        #expect(Systemd.notify(["STATUS": "serving\nnow", "READY": "1"]))
        #expect(Systemd.notify(["WATCHDOG": "1"]))
        #expect(Systemd.notify(["RELOADING": "1", "MONOTONIC_USEC": "42"]))
        #expect(Systemd.status("reloaded"))
        #expect(Systemd.notify(["STOPPING": "1"]))
        let messages = try await socket.wait(for: "STOPPING=1") { $0.count == 5 }
        #expect(
            messages == [
                "READY=1\nSTATUS=serving now", "WATCHDOG=1", "RELOADING=1\nMONOTONIC_USEC=42", "STATUS=reloaded",
                "STOPPING=1",
            ]
        )
    }

    /// The daemon's services speak concurrently; once one has said `STOPPING=1`, a status another computed says
    /// nothing more, and neither does a late `READY=1`: only the watchdog's pings go on.
    @Test func nothingSaysServingAfterStopping() async throws {
        let directory = try TemporaryDirectory()
        let socket = try NotifySocket(in: directory)
        setenv("NOTIFY_SOCKET", socket.path, 1)
        defer { unsetenv("NOTIFY_SOCKET") }
        let notifier = ServiceManagerNotifier()
        notifier.send(["READY": "1", "STATUS": "Serving: 0 connections"])
        notifier.tick(ping: true) { "Serving: 0 connections" }  // unchanged: the ping alone
        notifier.tick(ping: false) { "Serving: 1 connection" }
        notifier.stopping()
        notifier.tick(ping: true) { "Serving: 2 connections" }
        notifier.send(["READY": "1", "STATUS": "Reloaded. Serving: 2 connections"])
        notifier.stopping()
        #expect(Systemd.status("end"))
        let messages = try await socket.wait(for: "the end") { $0.last == "STATUS=end" }
        #expect(
            messages == [
                "READY=1\nSTATUS=Serving: 0 connections", "WATCHDOG=1", "STATUS=Serving: 1 connection",
                "STOPPING=1\nSTATUS=Stopping: finishing the requests in flight", "WATCHDOG=1", "STATUS=end",
            ]
        )
    }

    /// The watchdog pings at half `WatchdogSec=` on the daemon's clock (a test moves it), with the status when it
    /// changed since the last one said.
    @Test func theWatchdogPingsAtHalfTheIntervalOnTheClock() async throws {
        let directory = try TemporaryDirectory()
        let socket = try NotifySocket(in: directory)
        setenv("NOTIFY_SOCKET", socket.path, 1)
        defer { unsetenv("NOTIFY_SOCKET") }
        let clock = TestClock(holdingSleepers: true)
        let status = Mutex("Serving: 0 connections")
        let service = WatchdogService(interval: .seconds(4), notifier: ServiceManagerNotifier(), clock: clock) {
            status.withLock { $0 }
        }
        let running = Task { try await service.run() }
        defer { running.cancel() }
        try await clock.waitForSleepers()
        #expect(clock.pendingSleeps == [.seconds(2)])
        #expect(socket.messages.isEmpty)  // nothing before the first half interval
        clock.advance(by: .seconds(2))
        try await socket.wait(for: "the first ping") { $0.count == 1 }
        status.withLock { $0 = "Serving: 1 connection" }
        try await clock.waitForSleepers()
        clock.advance(by: .seconds(2))
        try await socket.wait(for: "the second ping") { $0.count == 2 }
        try await clock.waitForSleepers()
        clock.advance(by: .seconds(2))
        let messages = try await socket.wait(for: "the third ping") { $0.count == 3 }
        #expect(Set(messages[0].split(separator: "\n")) == ["WATCHDOG=1", "STATUS=Serving: 0 connections"])
        #expect(Set(messages[1].split(separator: "\n")) == ["WATCHDOG=1", "STATUS=Serving: 1 connection"])
        #expect(messages[2] == "WATCHDOG=1")  // the status did not change
    }

    @Test func withoutAServiceManagerNothingIsSent() {
        unsetenv("NOTIFY_SOCKET")
        #expect(!Systemd.notify(["READY": "1"]))
        #expect(Systemd.listenFDs().isEmpty)
    }

    @Test func watchdogIntervalHonoursItsPid() {
        setenv("WATCHDOG_USEC", "3000000", 1)
        defer {
            unsetenv("WATCHDOG_USEC")
            unsetenv("WATCHDOG_PID")
        }
        #expect(Systemd.watchdogInterval() == .seconds(3))
        setenv("WATCHDOG_PID", "\(getpid())", 1)
        #expect(Systemd.watchdogInterval() == .seconds(3))
        setenv("WATCHDOG_PID", "1", 1)  // meant for another process
        #expect(Systemd.watchdogInterval() == nil)
    }

    @Test func listenFDsForAnotherProcessAreIgnored() {
        setenv("LISTEN_PID", "1", 1)
        setenv("LISTEN_FDS", "1", 1)
        defer {
            unsetenv("LISTEN_PID")
            unsetenv("LISTEN_FDS")
        }
        #expect(Systemd.listenFDs().isEmpty)
    }

    @Test func stderrIsTheJournalOnlyWhenJournalStreamNamesIt() {
        unsetenv("JOURNAL_STREAM")
        #expect(!Systemd.stderrIsJournal())
        var status = stat()
        fstat(STDERR_FILENO, &status)
        setenv("JOURNAL_STREAM", "\(status.st_dev):\(status.st_ino)", 1)
        #expect(Systemd.stderrIsJournal())
        setenv("JOURNAL_STREAM", "\(status.st_dev):\(status.st_ino + 1)", 1)
        #expect(!Systemd.stderrIsJournal())
        unsetenv("JOURNAL_STREAM")
    }

    @Test func findsTheSocketPathOfAListener() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path("s.sock")
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        #expect(listen(fd, 1) == 0)
        #expect(Systemd.socketPath(of: fd) == path)
        #expect(Systemd.isListeningUnixStream(fd))
        #expect(!Systemd.isListeningUnixStream(STDIN_FILENO))
    }
}

@Suite struct JournaldLogHandlerTests {
    @Test func makesJournalFieldsOfEverything() {
        var handler = JournaldLogHandler(label: "tokenbroker", identifier: "tokenbrokerd")
        handler[metadataKey: "peer_pid"] = "42"
        let event = LogEvent(
            level: .warning,
            message: "refresh failed",
            metadata: ["correlation_id": "c-1", "message": "clash", "9lives": "x"],
            source: "BrokerCore",
            file: "BrokerCore/TokenBroker+Refresh.swift",
            function: "refresh(_:found:correlationId:)",
            line: 120
        )
        let fields = handler.fields(for: event)
        for expected in [
            "MESSAGE=refresh failed", "PRIORITY=4", "SYSLOG_IDENTIFIER=tokenbrokerd",
            "CODE_FILE=BrokerCore/TokenBroker+Refresh.swift", "CODE_LINE=120",
            "CODE_FUNC=refresh(_:found:correlationId:)",
            "LOGGER=tokenbroker", "CORRELATION_ID=c-1", "PEER_PID=42", "TB_MESSAGE=clash", "LIVES=x",
        ] {
            #expect(fields.contains(expected), "\(expected)")
        }
    }

    @Test func mapsLevelsToSyslogPriorities() {
        let priorities = [Logger.Level.trace, .debug, .info, .notice, .warning, .error, .critical].map {
            JournaldLogHandler.priority($0)
        }
        #expect(priorities == [7, 7, 6, 5, 4, 3, 2])
    }

    @Test func followsASharedLevel() {
        let control = LogLevelControl(.info)
        let handler = JournaldLogHandler(label: "t", identifier: "t", control: control)
        #expect(handler.logLevel == .info)
        control.level = .trace
        #expect(handler.logLevel == .trace)
    }
}
