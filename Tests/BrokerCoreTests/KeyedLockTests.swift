import BrokerCore
import BrokerTestSupport
import Synchronization
import Testing

/// One holder of a key at a time (the broker's redemptions of one refresh token), first come first served.
struct KeyedLockTests {
    @Test func callersOfOneKeyTakeTurnsInTheOrderTheyCame() async throws {
        let lock = KeyedLock<String>()
        let gate = Gate()
        let order = Turns()
        let holding = Counter()
        let overlapped = Counter()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                await lock.withLock("token") {
                    await gate.wait()
                    order.append(0)
                }
            }
            try await waitUntil("the first caller holds the key") { !lock.isIdle }
            for caller in 1...5 {
                group.addTask {
                    await lock.withLock("token") {
                        holding.increment()
                        if holding.value > 1 { overlapped.increment() }
                        order.append(caller)
                        await Task.yield()
                        holding.decrement()
                    }
                }
                // Each comes after the one before is in line.
                try await waitUntil("caller \(caller) waits for its turn") { lock.waited == caller }
            }
            gate.open()
            try await group.waitForAll()
        }
        #expect(order.values == [0, 1, 2, 3, 4, 5])
        #expect(overlapped.value == 0)
        #expect(lock.isIdle)
    }

    @Test func keysApartDoNotWait() async throws {
        let lock = KeyedLock<String>()
        let gate = Gate()
        let held = Task { await lock.withLock("a") { await gate.wait() } }
        try await waitUntil("a is held") { !lock.isIdle }
        #expect(await lock.withLock("b") { "b ran while a was held" } == "b ran while a was held")
        #expect(lock.waited == 0)
        gate.open()
        await held.value
        #expect(lock.isIdle)
    }

    /// A holder that throws hands the key on like one that returns.
    @Test func aFailureHandsTheKeyOn() async throws {
        let lock = KeyedLock<String>()
        await #expect(throws: Refused.self) {
            try await lock.withLock("token") { () async throws(Refused) in throw Refused() }
        }
        #expect(lock.isIdle)
        #expect(await lock.withLock("token") { 7 } == 7)
    }
}

private struct Refused: Error {}

/// The order in which callers had their turns.
private final class Turns: Sendable {
    private let turns = Mutex<[Int]>([])
    var values: [Int] { turns.withLock { $0 } }
    func append(_ caller: Int) { turns.withLock { $0.append(caller) } }
}
