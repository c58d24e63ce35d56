import BrokerProtocol
import Foundation
import Testing

struct StrictJSONTests {
    /// What RFC 8259 allows parses to the value it spells.
    @Test(arguments: [
        (
            #"{"a":[1,-2,3.5e2,true,false,null,"x"]}"#,
            JSONValue.object([
                "a": .array([.integer(1), .integer(-2), .number(350), .bool(true), .bool(false), .null, .string("x")])
            ])
        ),
        (#" "\u00e9\ud83d\udd11\n" "#, JSONValue.string("é🔑\n")),
        ("[]", JSONValue.array([])),
        ("0", JSONValue.integer(0)),
        ("-0.5", JSONValue.number(-0.5)),
        ("9223372036854775808", JSONValue.number(9_223_372_036_854_775_808)),
    ])
    func parsesValidJSON(text: String, expected: JSONValue) throws {
        #expect(try JSONValue.parse(Array(text.utf8)) == expected)
    }

    /// Everything else is refused with a reason, never a guess.
    @Test(arguments: [
        ("", "unexpected end"),
        ("{", "expected a quoted key"),
        (#"{"a":1,"a":2}"#, "duplicate key"),
        (#"{"a":1,"\u0061":2}"#, "duplicate key"),
        ("[1,]", "unexpected character"),
        ("01", "unexpected data"),
        ("1.", "invalid number"),
        ("nul", "invalid literal"),
        ("\"a\u{01}b\"", "control character"),
        (#""\x""#, "invalid escape"),
        (#""\ud800""#, "unpaired surrogate"),
        ("{} {}", "unexpected data"),
        ("'single'", "unexpected character"),
    ])
    func refusesInvalidJSON(text: String, reason: String) {
        #expect {
            try JSONValue.parse(Array(text.utf8))
        } throws: { error in
            (error as? JSONSyntaxError)?.reason.contains(reason) == true
        }
    }

    /// Bytes that are not UTF-8 are refused, inside strings too.
    @Test func refusesInvalidUTF8() {
        #expect(throws: JSONSyntaxError.self) { try JSONValue.parse([0x22, 0xC3, 0x28, 0x22]) }
        #expect(throws: JSONSyntaxError.self) { try JSONValue.parse([0x22, 0xFF, 0x22]) }
    }

    /// Deep nesting is refused instead of recursing without bound.
    @Test func refusesExcessiveNesting() throws {
        let fine = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        _ = try JSONValue.parse(Array(fine.utf8))
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect {
            try JSONValue.parse(Array(deep.utf8))
        } throws: { error in
            (error as? JSONSyntaxError)?.reason == "nested deeper than 128 arrays and objects"
        }
    }

    /// The Codable decoder over the same parser reports field paths and accepts Foundation's shapes.
    @Test func decodesProtocolTypesWithPaths() throws {
        let text =
            #"{"authParameters":{"clientId":"app","requestedScopes":["a","b"],"minimumValiditySeconds":600},"correlationId":"c"}"#
        let params = try WireDecoder().decode(AcquireTokenSilentlyParams.self, from: Array(text.utf8))
        #expect(params.authParameters.clientId == "app")
        #expect(params.authParameters.requestedScopes == ["a", "b"])
        #expect(params.authParameters.minimumValiditySeconds == 600)
        let wrong = #"{"authParameters":{"clientId":"app","requestedScopes":["a",3]}}"#
        #expect {
            try WireDecoder().decode(AcquireTokenSilentlyParams.self, from: Array(wrong.utf8))
        } throws: { error in
            guard case DecodingError.typeMismatch(_, let context) = error else { return false }
            return context.codingPath.map(\.stringValue) == ["authParameters", "requestedScopes", "1"]
        }
    }

    /// What the wire encoder writes, the wire decoder reads back unchanged.
    @Test func roundTripsTokenResults() throws {
        let result = AcquireTokenResult(brokerTokenResponse: Fixtures.tokenResult)
        let decoded = try WireDecoder().decode(AcquireTokenResult.self, from: try WireEncoder().encode(result))
        #expect(decoded == result)
    }
}
