import BrokerProtocol
import BrokerTestSupport
import NIOCore
import NIOEmbedded
import Synchronization
import Testing

@testable import BrokerClient

/// The client keeps to the protocol's requests in flight per connection: a call past them waits for a slot, and a
/// slot is free once the broker is done with its request, not when its caller stops waiting.
struct CallSlotsTests {
    @Test func aCallPastTheLimitWaitsForASlotInTurn() async throws {
        let slots = CallSlots(1)
        try await slots.acquire()
        let order = Order()
        let second = Task {
            try await slots.acquire()
            order.append(2)
        }
        try await waitUntil("the second call waits") { slots.waiting == 1 }
        let third = Task {
            try await slots.acquire()
            order.append(3)
        }
        try await waitUntil("the third call waits behind it") { slots.waiting == 2 }
        slots.release()
        try await second.value
        #expect(order.all == [2] && slots.waiting == 1)  // the one that waited longest
        slots.release()
        try await third.value
        #expect(order.all == [2, 3])
    }

    @Test func aWaitingCallCanBeCancelled() async throws {
        let slots = CallSlots(1)
        try await slots.acquire()
        let waiting = Task { try await slots.acquire() }
        try await waitUntil("the call waits") { slots.waiting == 1 }
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        #expect(slots.waiting == 0)
        slots.release()
        try await slots.acquire()  // the cancelled waiter took nothing
    }

    /// A call its caller gave up on keeps its slot until the broker's answer comes: otherwise the client would send
    /// one more than the broker takes and get broker_busy.
    @Test func anAbandonedCallHoldsItsSlotUntilTheAnswer() async throws {
        let pending = PendingCalls()
        let loop = EmbeddedEventLoop()
        var ids: [RequestID] = []
        for _ in 0..<WireProtocol.maximumRequestsInFlight {
            try await pending.slots.acquire()
            let promise = loop.makePromise(of: (any Sendable).self)
            ids.append(try pending.register(resultType: VersionResult.self, promise: promise).get())
        }
        pending.abandon(ids[0], with: BrokerError(.timeout, "cancelled"))
        let next = Task { try await pending.slots.acquire() }
        try await waitUntil("a call past the limit waits") { pending.slots.waiting == 1 }
        pending.complete(ids[0], with: .failure(BrokerError(.internal, "the late answer")))
        try await next.value
        // The connection's end frees every slot, abandoned or not.
        pending.abandon(ids[1], with: BrokerError(.timeout, "cancelled"))
        pending.closeAll(BrokerError(.connectionLost, "gone"))
        for _ in 0..<WireProtocol.maximumRequestsInFlight - 1 { try await pending.slots.acquire() }
        #expect(pending.slots.waiting == 0)
    }
}

private final class Order: Sendable {
    private let list = Mutex<[Int]>([])
    var all: [Int] { list.withLock { $0 } }
    func append(_ value: Int) { list.withLock { $0.append(value) } }
}
