import BrokerProtocol
import Foundation
import Testing

struct SecretTests {
    /// No way of printing a secret shows it; only `reveal()` and encoding do.
    @Test func secretsAreRedactedEverywhereButRevealAndEncoding() throws {
        let secret = Secret("super-secret-token")
        var dumped = ""
        dump(secret, to: &dumped)
        var dumpedResult = ""
        dump(Fixtures.tokenResult, to: &dumpedResult)
        for text in [
            secret.description, secret.debugDescription, "\(secret)", String(describing: secret),
            String(reflecting: secret),
            dumped, dumpedResult, "\(Fixtures.tokenResult)", String(reflecting: Fixtures.tokenResult),
        ] {
            #expect(!text.contains("super-secret-token"))
            #expect(!text.contains("at-secret-value"))
            #expect(!text.contains("id-token-value"))
        }
        #expect(secret.reveal() == "super-secret-token")
        #expect(String(decoding: try WireEncoder().encode(secret), as: UTF8.self) == #""super-secret-token""#)
    }

    /// Error objects built from failures carry no secret either (they are built from messages we write).
    @Test func errorResponsesCarryOnlyWhatTheyAreGiven() throws {
        let error = ErrorObject(
            .interactionRequired,
            "sign in",
            details: .init(error: "invalid_grant", suberror: "bad_token")
        )
        let text = String(decoding: try WireEncoder().encode(ErrorResponse(id: nil, error: error)), as: UTF8.self)
        #expect(text.contains(#""id":null"#))
        #expect(text.contains(#""code":-32000"#))
        #expect(text.contains(#""errorCode":"interaction_required""#))
    }
}
