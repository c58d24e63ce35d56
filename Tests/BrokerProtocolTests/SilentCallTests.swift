import BrokerProtocol
import Foundation
import Testing

/// The CLI's start-up path writes and reads the silent call without Codable: what it writes is what the encoder
/// writes, and what it reads is what the decoder would.
struct SilentCallTests {
    static let parameters: [AuthParameters] = [
        AuthParameters(clientId: "app", requestedScopes: ["User.Read"]),
        AuthParameters(
            clientId: "a\"pp\n",
            authority: "https://login.microsoftonline.com/common",
            requestedScopes: ["User.Read", "é€𝄞", ""],
            resource: "https://r",
            account: AccountSelector(identifier: "uid.tid", username: "uid.tid"),
            forceRefresh: true,
            minimumValiditySeconds: 600
        ),
        AuthParameters(clientId: "", requestedScopes: [], account: AccountSelector(username: "u")),
        AuthParameters(clientId: "x", account: AccountSelector(identifier: "i"), forceRefresh: false),
        AuthParameters(clientId: "x", account: AccountSelector(), minimumValiditySeconds: -1),
    ]

    @Test(arguments: parameters)
    func writesWhatTheEncoderWrites(parameters: AuthParameters) throws {
        for id in [Int64(0), 1, .max, .min] {
            let params = AcquireTokenSilentlyParams(authParameters: parameters, correlationId: "c\u{01}\"")
            let encoded =
                try WireEncoder().encode(
                    Request(id: .number(id), method: Methods.AcquireTokenSilently.name, params: params)
                )
                + Array("\n".utf8)
            #expect(SilentCall.requestLine(parameters, correlationId: "c\u{01}\"", id: id) == encoded)
        }
    }

    /// A field a command line never sets is left to the encoder.
    @Test func leavesOtherFieldsToTheEncoder() {
        var parameters = AuthParameters(clientId: "app", requestedScopes: ["User.Read"])
        parameters.redirectUri = "http://localhost"
        #expect(SilentCall.requestLine(parameters, correlationId: "c", id: 1) == nil)
    }

    /// A token answer is read; the call's error, an answer without a token's fields, and an id-less error are
    /// other answers; another call's answer and a notification are not for this call.
    @Test func readsTheTokenAnswerAndNothingElse() throws {
        var answer = AcquireTokenResult(brokerTokenResponse: Fixtures.tokenResult)
        answer.brokerTokenResponse.accessToken = Secret("tok\"en")
        let line = try WireEncoder().encode(Response(id: .number(5), result: answer))
        #expect(
            SilentCall.read(line, id: 5)
                == .token(.init(accessToken: "tok\"en", expiresOn: 1_700_003_600_000, username: "ada@contoso.com"))
        )
        #expect(SilentCall.read(line, id: 6) == .notForThisCall)
        let error = try WireEncoder().encode(
            ErrorResponse(id: .number(5), error: ErrorObject(.interactionRequired, "sign in"))
        )
        #expect(SilentCall.read(error, id: 5) == .otherAnswer)
        let anonymous = try WireEncoder().encode(ErrorResponse(id: nil, error: ErrorObject(.timeout, "idle")))
        #expect(SilentCall.read(anonymous, id: 5) == .otherAnswer)
        #expect(SilentCall.read(Array(#"{"jsonrpc":"2.0","method":"x","params":{}}"#.utf8), id: 5) == .notForThisCall)
        #expect(SilentCall.read(Array(#"{"jsonrpc":"2.0","id":5,"result":{}}"#.utf8), id: 5) == .otherAnswer)
        #expect(SilentCall.read(Array("not json".utf8), id: 5) == .otherAnswer)
    }
}
