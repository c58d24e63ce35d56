import BrokerTestSupport
import BrokerTime
import Synchronization
import Testing

/// The one single-flight of the broker (refreshes, discovery documents, signing keys, the key stores' retries).
struct SingleFlightTests {
    @Test func concurrentCallersShareOneRun() async throws {
        let flights = SingleFlight<String, Int, Never>()
        let gate = Gate()
        let runs = Counter()
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<20 {
                group.addTask {
                    await flights.run("key") {
                        runs.increment()
                        await gate.wait()
                        return 42
                    }
                }
            }
            // Every caller is in before the work may end.
            try await waitUntil("19 callers joined the run") { flights.counts.joined == 19 }
            gate.open()
            for try await value in group { #expect(value == 42) }
        }
        #expect(runs.value == 1)
        #expect(flights.counts.started == 1 && flights.counts.joined == 19)
        #expect(flights.isIdle)
    }

    @Test func aFailureIsNotRememberedAndTheNextCallerRunsAgain() async throws {
        let flights = SingleFlight<String, Int, Failed>()
        await #expect(throws: Failed.self) { try await flights.run("key") { () throws(Failed) in throw Failed() } }
        #expect(flights.isIdle)
        #expect(try await flights.run("key") { () throws(Failed) in 7 } == 7)
        #expect(flights.counts.started == 2)
    }

    @Test func keysRunApart() async throws {
        let flights = SingleFlight<String, String, Never>()
        async let a = flights.run("a") { "A" }
        async let b = flights.run("b") { "B" }
        #expect(await [a, b] == ["A", "B"])
        #expect(flights.counts.started == 2)
    }

    /// A caller that goes away (a client that hung up) does not cut the work short.
    ///
    /// A refresh's rotated token must still be stored. Another caller, or `waitForRunning`, still gets the outcome.
    @Test func aCallerThatGoesAwayDoesNotCancelTheWork() async throws {
        let flights = SingleFlight<String, Bool, Never>()
        let gate = Gate()
        let leaving = Task {
            await flights.run("key") {
                await gate.wait()
                return Task.isCancelled
            }
        }
        try await waitUntil("the run started") { flights.counts.started == 1 }
        leaving.cancel()
        let staying = Task { await flights.run("key") { true } }
        try await waitUntil("a second caller joined") { flights.counts.joined == 1 }
        gate.open()
        #expect(await staying.value == false, "the work saw the leaving caller's cancellation")
        await flights.waitForRunning()
        #expect(flights.isIdle)
    }
}

private struct Failed: Error, Equatable {}
