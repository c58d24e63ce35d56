import BrokerSystemd
import BrokerTestSupport
import Logging
import Synchronization
import Testing

/// What moved out of the daemon's executable: choosing the socket systemd passed, and leaving when idle.
struct ServiceTests {
    /// The socket named `broker`, else the only one; nothing passed is nil; several unnamed ones are refused.
    @Test func choosesTheBrokerSocket() throws {
        #expect(try Systemd.brokerSocket(among: []) == nil)
        #expect(try Systemd.brokerSocket(among: [(3, "unknown")])?.fd == 3)
        #expect(try Systemd.brokerSocket(among: [(3, "other"), (4, "broker"), (5, "x")])?.fd == 4)
        let error = try #require(throws: Systemd.AmbiguousSockets.self) {
            try Systemd.brokerSocket(among: [(3, "a"), (4, "b")])
        }
        #expect(error.description.contains("FileDescriptorName=broker"))
    }

    /// Idle long enough but busy (a refresh under way): it waits; once not busy, it ends.
    @Test func leavesWhenIdleAndNotBusy() async throws {
        let asked = Atomic<Int>(0)
        let service = IdleExitService(
            after: .seconds(5),
            idleFor: { .seconds(6) },
            isBusy: { asked.add(1, ordering: .relaxed).newValue < 4 },
            logger: Logger(label: "test"),
            pollInterval: .milliseconds(1)
        )
        try await service.run()
        #expect(asked.load(ordering: .relaxed) == 4)
    }

    /// Idle time is measured on the clock: the service polls every 250 ms of it and leaves once 30 s have passed.
    @Test func measuresIdlenessOnTheClock() async throws {
        let clock = TestClock()
        let lastActivity = clock.elapsed
        let service = IdleExitService(
            after: .seconds(30),
            idleFor: { clock.elapsed - lastActivity },
            isBusy: { false },
            logger: Logger(label: "test"),
            clock: clock
        )
        try await service.run()
        #expect(clock.elapsed == .seconds(30))
        #expect(clock.sleeps.count == 120 && clock.sleeps.allSatisfy { $0 == .milliseconds(250) })
    }

    /// Not idle long enough, or a connection open (nil): busy is not even asked.
    @Test func staysWhileNotIdle() async throws {
        let polls = Atomic<Int>(0)
        let asked = Atomic<Int>(0)
        let service = IdleExitService(
            after: .seconds(5),
            idleFor: {
                let poll = polls.add(1, ordering: .relaxed).newValue
                return poll < 3 ? nil : poll < 6 ? .seconds(1) : .seconds(5)
            },
            isBusy: {
                asked.add(1, ordering: .relaxed)
                return false
            },
            logger: Logger(label: "test"),
            pollInterval: .milliseconds(1)
        )
        try await service.run()
        #expect(polls.load(ordering: .relaxed) == 6)
        #expect(asked.load(ordering: .relaxed) == 1)
    }

    /// Idle and not busy, but held on (a grant lives): it stays, says why once, and leaves once released.
    @Test func staysWhileHeldOnAndSaysWhyOnce() async throws {
        let polls = Atomic<Int>(0)
        let logs = LogCapture()
        let service = IdleExitService(
            after: .seconds(5),
            idleFor: { .seconds(6) },
            isBusy: { false },
            holdsOn: { polls.add(1, ordering: .relaxed).newValue < 5 ? "a grant lives" : nil },
            logger: logs.logger(label: "test"),
            pollInterval: .milliseconds(1)
        )
        try await service.run()
        #expect(polls.load(ordering: .relaxed) == 5)
        #expect(logs.lines(containing: "idle, but staying: a grant lives").count == 1)
        #expect(logs.lines(containing: "idle: exiting").count == 1)
    }
}
