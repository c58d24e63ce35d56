import BrokerClient
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

/// The Broker1 front end's switch and its absence, through the built daemon (Tests/broker1 runs it on a real
/// session bus with the real MSAL clients).
struct BusFrontEndTests {
    /// The front end on, but no session bus to join (a container, `ssh` without a login session): the daemon starts,
    /// serves its socket, and says why Broker1 clients cannot reach it.
    @Test func withoutASessionBusTheSocketStillServes() async throws {
        let directory = try TemporaryDirectory(prefix: "bus")
        let daemon = try await DaemonProcess.start(
            in: directory,
            environment: [
                "DBUS_SESSION_BUS_ADDRESS": "unix:path=\(directory.path("no-bus-here"))",
                "XDG_RUNTIME_DIR": directory.path("run"),
            ],
            bus: true
        )
        let broker = try await Broker.connect(socketPath: daemon.socketPath)
        // The front end joins the bus beside the socket: until it has tried, its state is `starting`.
        var status = try await broker.status()
        let deadline = ContinuousClock.now + eventTimeout
        while status.bus?.state == .starting, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
            status = try await broker.status()
        }
        await broker.close()
        #expect(status.bus?.state == .unavailable, "\(String(describing: status.bus))")
        #expect(status.bus?.message?.contains("no session bus") == true, "\(String(describing: status.bus))")
        #expect(try await daemon.stop() == 0)
    }

    /// `broker1 = off` in tokenbrokerd.conf turns the front end off, and the status says so.
    @Test func theConfigurationTurnsItOff() async throws {
        let directory = try TemporaryDirectory(prefix: "bus")
        try FileManager.default.createDirectory(
            atPath: directory.path("config/tokenbroker"),
            withIntermediateDirectories: true
        )
        try Data("broker1 = off\n".utf8).write(
            to: directory.url.appending(path: "config/tokenbroker/tokenbrokerd.conf")
        )
        let daemon = try await DaemonProcess.start(in: directory, bus: true)
        let broker = try await Broker.connect(socketPath: daemon.socketPath)
        let status = try await broker.status()
        await broker.close()
        #expect(status.bus?.state == .off)
        #expect(status.bus?.message == "turned off (broker1 = off)")
        #expect(try await daemon.stop() == 0)
    }
}
