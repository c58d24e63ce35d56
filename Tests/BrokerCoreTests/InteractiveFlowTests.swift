import BrokerOAuth
import BrokerProtocol
import BrokerTestSupport
import Testing

@testable import BrokerCore

/// The interactive sign-in's state machine on its own: each event (the grant made, a redirect, the app's URL, a
/// cancel, the end) in each phase, without a browser, a provider or a socket.
struct InteractiveFlowTests {
    private static let redirectURI = "http://127.0.0.1:5555/"

    private func flow(_ webviewType: WebviewType = .systemBrowser) -> InteractiveFlow {
        InteractiveFlow(correlationId: "flow-1", owner: .none, webviewType: webviewType)
    }

    private func grant() throws -> AuthorizationCodeGrant {
        try AuthorizationCodeGrant(
            AuthorizationRequest(clientId: "client-x", redirectURI: Self.redirectURI, scopes: ["User.Read"]),
            metadata: .test()
        )
    }

    private func rejected(_ verdict: RedirectVerdict) -> String? {
        if case .reject(let reason) = verdict { return reason }
        return nil
    }

    @Test func aRedirectBeforeTheRequestIsOutIsRefused() {
        let flow = flow()
        #expect(rejected(flow.judge(redirect: Self.redirectURI + "?code=c&state=s")) == "the sign-in is not ready")
    }

    /// The redirect is judged once: another sign-in's state keeps the flow waiting, this one's moves it on and keeps
    /// its code, and any later redirect is refused.
    @Test func theRedirectIsJudgedOnce() throws {
        let flow = flow()
        let grant = try grant()
        flow.attach(grant)
        let stranger = flow.judge(redirect: Self.redirectURI + "?code=theirs&state=not-this-flows")
        #expect(rejected(stranger)?.contains("state") == true)
        #expect(throws: BrokerFailure.self) { try flow.acceptedCode() }  // still waiting
        guard case .accept(succeeded: true) = flow.judge(redirect: Self.redirectURI + "?code=ours&state=\(grant.state)")
        else {
            Issue.record("this flow's redirect was not accepted")
            return
        }
        #expect(try flow.acceptedCode().reveal() == "ours")
        let again = flow.judge(redirect: Self.redirectURI + "?code=again&state=\(grant.state)")
        #expect(rejected(again) == "the sign-in is no longer waiting for a redirect")
        #expect(try flow.acceptedCode().reveal() == "ours")
    }

    /// The provider's error in the redirect is accepted as the outcome (the flow's redirect, not a stranger's), and
    /// the sign-in fails with it.
    @Test func aRedirectWithTheProvidersErrorEndsTheSignIn() throws {
        let flow = flow()
        let grant = try grant()
        flow.attach(grant)
        let denied = flow.judge(redirect: Self.redirectURI + "?error=access_denied&state=\(grant.state)")
        guard case .accept(succeeded: false) = denied else {
            Issue.record("the provider's error was not taken as this flow's outcome: \(denied)")
            return
        }
        #expect(throws: BrokerFailure.self) { try flow.acceptedCode() }
    }

    /// A cancel before the redirect stops the flow and is heard by its race; after the redirect it changes nothing:
    /// the code is redeemed and the tokens stored.
    @Test func aCancelCountsOnlyBeforeTheRedirect() async throws {
        let waiting = flow()
        waiting.attach(try grant())
        #expect(waiting.cancel(.brokerStopping))
        #expect(waiting.cancellation == .brokerStopping)
        #expect(await waiting.canceled() == .brokerStopping)
        #expect(!waiting.cancel())  // once is enough
        #expect(rejected(waiting.judge(redirect: Self.redirectURI + "?code=late")) != nil)

        let completing = flow()
        let grant = try grant()
        completing.attach(grant)
        _ = completing.judge(redirect: Self.redirectURI + "?code=ours&state=\(grant.state)")
        #expect(!completing.cancel())
        #expect(completing.cancellation == nil)
        #expect(try completing.acceptedCode().reveal() == "ours")
        completing.finish()
        #expect(await completing.canceled() == nil)  // the race's cancel event ends without one
    }

    /// `embedded`: the app's URL is judged like a redirect, resumes the sign-in once the answer is queued, and a
    /// second URL finds nothing waiting.
    @Test func anEmbeddedFlowTakesTheAppsURLOnce() async throws {
        let flow = flow(.embedded)
        let grant = try grant()
        #expect(try !flow.complete(with: Secret(Self.redirectURI + "?code=early"), after: .opened))  // not ready
        flow.attach(grant)
        #expect(throws: BrokerFailure.self) {
            try flow.complete(with: Secret(Self.redirectURI + "?code=c&state=wrong"), after: .opened)
        }
        let gate = AnswerGate()
        #expect(try flow.complete(with: Secret(Self.redirectURI + "?code=ours&state=\(grant.state)"), after: gate))
        #expect(gate.heldCount == 1)  // the sign-in resumes after the answer
        gate.open()
        #expect(await flow.embeddedResponse())
        #expect(try !flow.complete(with: Secret(Self.redirectURI + "?code=again&state=\(grant.state)"), after: gate))
        #expect(try flow.acceptedCode().reveal() == "ours")
    }

    /// A system-browser flow does not take the app's URL (only `embedded` flows do).
    @Test func onlyEmbeddedFlowsTakeTheAppsURL() throws {
        let flow = flow(.systemBrowser)
        let grant = try grant()
        flow.attach(grant)
        #expect(try !flow.complete(with: Secret(Self.redirectURI + "?code=c&state=\(grant.state)"), after: .opened))
    }

    @Test func theRegistryRefusesASecondFlowOfOneId() throws {
        let registry = FlowRegistry()
        let first = flow()
        try registry.register(first)
        #expect(throws: BrokerFailure.self) { try registry.register(flow()) }
        registry.unregister(flow())  // another flow of the id does not remove the first
        #expect(registry.flow("flow-1") === first)
        registry.unregister(first)
        #expect(registry.isEmpty)
    }
}
