import BrokerProtocol
import Testing

struct ServerMessageDecoderTests {
    private let decoder = ServerMessageDecoder { id in id == .number(1) ? AccountsResult.self : nil }

    /// A response is decoded as the type registered for its id.
    @Test func decodesResultsByRegisteredType() throws {
        let message = try decoder.decode(Array(#"{"jsonrpc":"2.0","id":1,"result":{"accounts":[]}}"#.utf8))
        guard case .result(.number(1), let result) = message else {
            Issue.record("not a result: \(message)")
            return
        }
        #expect((result as? AccountsResult)?.accounts == [])
    }

    /// Errors, notifications (known and unknown) and responses to forgotten calls are told apart.
    @Test func decodesErrorsNotificationsAndRefusesStrangers() throws {
        let error = try decoder.decode(
            Array(#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#.utf8)
        )
        guard case .error(nil, let object) = error else {
            Issue.record("not an error")
            return
        }
        #expect(object.errorCode == .parseError)
        let prompt = try decoder.decode(
            Array(
                #"{"jsonrpc":"2.0","method":"deviceCode/prompt","params":{"correlationId":"c","userCode":"ABCD","verificationUri":"https://example.com/device","message":"go","expiresIn":900}}"#
                    .utf8
            )
        )
        guard case .notification(.deviceCodePrompt(let params)) = prompt else {
            Issue.record("not a prompt")
            return
        }
        #expect(params.userCode == "ABCD")
        let future = try decoder.decode(Array(#"{"jsonrpc":"2.0","method":"future/thing","params":{}}"#.utf8))
        guard case .notification(.unknown("future/thing")) = future else {
            Issue.record("unknown notification not tolerated")
            return
        }
        let orphan = try decoder.decode(Array(#"{"jsonrpc":"2.0","id":99,"result":{}}"#.utf8))
        guard case .orphanResponse(.number(99)) = orphan else {
            Issue.record("a response to a forgotten call must be tolerated, not fail the connection")
            return
        }
    }
}
