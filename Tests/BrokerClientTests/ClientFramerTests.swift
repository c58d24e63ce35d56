import BrokerProtocol
import NIOCore
import NIOEmbedded
import Synchronization
import Testing

@testable import BrokerClient

/// The client's framer and router on an `EmbeddedChannel`: the broker's bytes in one at a time, answers routed to
/// the calls that wait for them.
@Suite struct ClientFramerTests {
    let channel = EmbeddedChannel()
    let pending = PendingCalls()

    init() throws {
        try channel.pipeline.syncOperations.addHandlers(
            ByteToMessageHandler(LineDecoder()),
            MessageRouter(pending: pending)
        )
    }

    /// Registers a call waiting for a `FlowControlResult`.
    func call() throws -> (RequestID, EventLoopFuture<any Sendable>) {
        let promise = channel.eventLoop.makePromise(of: (any Sendable).self)
        let id = try pending.register(resultType: FlowControlResult.self, promise: promise).get()
        return (id, promise.futureResult)
    }

    func feedByteByByte(_ text: String) throws {
        for byte in text.utf8 { try channel.writeInbound(ByteBuffer(bytes: [byte])) }
    }

    /// Settles a future on the embedded loop.
    func outcome(_ future: EventLoopFuture<any Sendable>) -> Result<any Sendable, any Error>? {
        let settled = Mutex<Result<any Sendable, any Error>?>(nil)
        future.whenComplete { result in settled.withLock { $0 = result } }
        channel.embeddedEventLoop.run()
        return settled.withLock { $0 }
    }

    /// Two answers in one stream, fed a byte at a time and out of order, each reach their own call; nothing is
    /// answered before its newline.
    @Test func routesAnswersFedByteByByte() throws {
        let (first, firstAnswer) = try call()
        let (second, secondAnswer) = try call()
        #expect(first != second)
        let secondLine = #"{"jsonrpc":"2.0","id":2,"result":{"accepted":false}}"#
        try feedByteByByte(secondLine)
        #expect(outcome(secondAnswer) == nil)
        try feedByteByByte("\n" + #"{"jsonrpc":"2.0","id":1,"result":{"accepted":true}}"# + "\n")
        let one = try #require(outcome(firstAnswer))
        let two = try #require(outcome(secondAnswer))
        #expect(try one.get() as? FlowControlResult == FlowControlResult(accepted: true))
        #expect(try two.get() as? FlowControlResult == FlowControlResult(accepted: false))
    }

    /// An error answer fails its call with the broker's code and message.
    @Test func errorAnswersFailTheirCall() throws {
        let (_, answer) = try call()
        try feedByteByByte(
            #"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad scope","data":{"code":"invalid_params"}}}"#
                + "\n"
        )
        let result = try #require(outcome(answer))
        #expect(throws: BrokerError.self) { try result.get() }
    }

    /// A notification reaches the listener of its correlation id, and only that one.
    @Test func deliversNotificationsToTheirListener() throws {
        let heard = Mutex<[String: [ServerNotification]]>([:])
        for id in ["c", "other"] {
            pending.listen(to: id) { notification in heard.withLock { $0[id, default: []].append(notification) } }
        }
        try feedByteByByte(#"{"jsonrpc":"2.0","method":"webAuth/didComplete","params":{"correlationId":"c"}}"# + "\n")
        #expect(
            heard.withLock { $0 } == ["c": [.webAuthDidComplete(WebAuthCompleteNotification(correlationId: "c"))]]
        )
    }

    /// A line the library cannot read fails every waiting call and closes the connection; later calls are refused.
    @Test func unreadableLineClosesTheConnection() throws {
        let (_, answer) = try call()
        try channel.writeInbound(ByteBuffer(string: "not json\n"))
        let result = try #require(outcome(answer))
        #expect(throws: BrokerError.self) { try result.get() }
        #expect(!channel.isActive)
        let promise = channel.eventLoop.makePromise(of: (any Sendable).self)
        #expect(throws: BrokerError.self) {
            try pending.register(resultType: FlowControlResult.self, promise: promise).get()
        }
        promise.fail(BrokerError(.internal, "unused"))
    }

    /// A message larger than the protocol allows, with no newline in sight, is refused rather than buffered on.
    @Test func oversizedMessageIsRefused() throws {
        let (_, answer) = try call()
        let chunk = ByteBuffer(repeating: UInt8(ascii: "x"), count: 1 << 20)
        var refused = false
        for _ in 0...(WireProtocol.maximumResponseBytes >> 20) where !refused {
            do {
                try channel.writeInbound(chunk)
            } catch {
                refused = true
            }
        }
        let result = try #require(outcome(answer))
        #expect(throws: BrokerError.self) { try result.get() }
        #expect(!channel.isActive)
    }

    /// When the broker closes, waiting calls end with `connectionLost`.
    @Test func closeFailsWaitingCalls() throws {
        let (_, answer) = try call()
        try feedByteByByte(#"{"jsonrpc":"2.0","id":1,"res"#)
        channel.pipeline.fireChannelInactive()
        let result = try #require(outcome(answer))
        #expect {
            try result.get()
        } throws: { error in
            (error as? BrokerError)?.code == .connectionLost
        }
    }
}
