import BrokerCache
import BrokerProtocol
import BrokerTestSupport
import BrokerTime
import Foundation
import Synchronization
import Testing

@testable import BrokerCore

/// The answer to `completeInteractiveFlow` comes before the `webAuth/didComplete` of the sign-in it resumes.
///
/// Protocol §10.3 step 4. The sign-in waits for the request's ``AnswerGate``, which the front end opens once the
/// answer is queued; a sign-in resumed at once raced the answer onto the connection.
struct FlowOrderTests {
    /// What the app sees on its connection, in order.
    private final class Wire: Sendable {
        private let lines = Mutex<[String]>([])
        private let started = AsyncStream<String>.makeStream()

        func notify(_ notification: ServerNotification) {
            switch notification {
            case .webAuthDidStartLoad(let params):
                record("didStartLoad")
                started.continuation.yield(params.url)
            case .webAuthDidComplete: record("didComplete")
            case .webAuthDidFail: record("didFail")
            default: record("other")
            }
        }

        func record(_ line: String) {
            lines.withLock { $0.append(line) }
        }

        var seen: [String] {
            lines.withLock { $0 }
        }

        /// The authorization URL of didStartLoad.
        func authorizationURL() async -> String? {
            var iterator = started.stream.makeAsyncIterator()
            return await iterator.next()
        }
    }

    private static let caller = Caller(pid: 4242, uid: getuid(), gid: getgid(), executable: "/usr/bin/test-app")
    private static let redirectUri = "https://app.example/cb"

    /// A broker whose sign-ins race their time limit on `clock`, which only the test moves.
    private func broker(_ clock: TestClock) async throws -> TokenBroker {
        TokenBroker(
            cache: try await TokenCache(store: InMemoryTokenStore([])),
            configuration: BrokerConfiguration(),
            logger: LogCapture().logger(label: "tokenbroker"),
            transport: ScriptedTransport.refusingProvider(),
            clock: clock
        )
    }

    private static let embedded = AcquireTokenInteractivelyParams(
        authParameters: AuthParameters(
            clientId: CacheFixtures.clientId,
            authority: CacheFixtures.authority,
            requestedScopes: ["https://graph.microsoft.com/User.Read"],
            redirectUri: redirectUri
        ),
        webviewType: .embedded,
        correlationId: "flow-order"
    )

    @Test func theSignInResumesOnlyAfterTheAnswerIsQueued() async throws {
        let broker = try await broker(TestClock(holdingSleepers: true))
        let caller = Self.caller
        let handlers = broker.handlers(status: nil)
        let wire = Wire()
        let owner = FlowOwner(connection: 7) { wire.notify($0) }
        let redirectUri = Self.redirectUri
        let params = Self.embedded
        let interactive = try #require(handlers.handler(for: Methods.AcquireTokenInteractively.self))
        let signIn = Task {
            try await interactive.answer(params, caller).value(owner: owner)
        }
        let url = try #require(await wire.authorizationURL())
        let state = try #require(URLComponents(string: url)?.queryItems?.first { $0.name == "state" }?.value)

        let complete = try #require(handlers.handler(for: Methods.CompleteInteractiveFlow.self))
        let gate = AnswerGate()
        let answer = try await complete.answer(
            CompleteInteractiveFlowParams(
                correlationId: "flow-order",
                responseUrl: Secret("\(redirectUri)?code=the-code&state=\(state)")
            ),
            caller
        ).value(owner: owner.answering(through: gate))
        #expect(answer == FlowControlResult(accepted: true))
        // Accepted, and the sign-in held back until the answer is out.
        #expect(gate.heldCount == 1)
        wire.record("answer")
        gate.open()

        // The scripted provider refuses the code: the sign-in fails after saying didComplete.
        await #expect(throws: BrokerFailure.self) { try await signIn.value }
        #expect(wire.seen == ["didStartLoad", "answer", "didComplete", "didFail"])
    }

    /// A sign-in nobody completes ends at its time limit, on the broker's clock: not before, and with `timeout`.
    @Test func aSignInTimesOutOnTheBrokersClock() async throws {
        let clock = TestClock(holdingSleepers: true)
        let broker = try await broker(clock)
        let wire = Wire()
        let signIn = Task {
            try await broker.acquireTokenInteractively(
                Self.embedded,
                caller: Self.caller,
                owner: FlowOwner(connection: 7) { wire.notify($0) }
            )
        }
        _ = await wire.authorizationURL()
        try await clock.waitForSleepers()
        let limit = BrokerConfiguration().interactiveTimeout
        #expect(clock.pendingSleeps == [limit])
        clock.advance(by: limit - .seconds(1))
        #expect(clock.pendingSleeps == [.seconds(1)])  // still waiting for the app
        clock.advance(by: .seconds(1))
        do {
            _ = try await signIn.value
            Issue.record("a sign-in nobody completed succeeded")
        } catch let failure as BrokerFailure {
            #expect(failure.code == .timeout)
        }
        #expect(wire.seen == ["didStartLoad", "didFail"])
    }

    @Test func anOpenGateRunsWorkAtOnceAndAClosedOneInOrder() {
        let ran = Mutex<[Int]>([])
        AnswerGate.opened.afterAnswer { ran.withLock { $0.append(0) } }
        #expect(ran.withLock { $0 } == [0])
        let gate = AnswerGate()
        gate.afterAnswer { ran.withLock { $0.append(1) } }
        gate.afterAnswer { ran.withLock { $0.append(2) } }
        #expect(ran.withLock { $0 } == [0])
        gate.open()
        #expect(ran.withLock { $0 } == [0, 1, 2])
        #expect(gate.heldCount == 0)
        gate.afterAnswer { ran.withLock { $0.append(3) } }
        #expect(ran.withLock { $0 } == [0, 1, 2, 3])
    }
}
