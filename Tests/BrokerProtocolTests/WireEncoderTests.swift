import BrokerProtocol
import Foundation
import Testing

struct WireEncoderTests {
    /// The bytes the wire encoder writes parse to the same JSON as Foundation's encoder writes.
    @Test func encodesTokenResultsLikeFoundation() throws {
        let result = Response(id: .number(7), result: AcquireTokenResult(brokerTokenResponse: Fixtures.tokenResult))
        let ours = try WireEncoder().encode(result)
        let foundation = try JSONEncoder().encode(result)
        #expect(try Fixtures.parse(Data(ours)) == Fixtures.parse(foundation))
    }

    /// Keys come out in declaration order, with no whitespace: the wire form is stable and compact.
    @Test func writesKeysInDeclarationOrderWithoutWhitespace() throws {
        let text = String(
            decoding: try WireEncoder().encode(Response(id: .string("a"), result: FlowControlResult(accepted: true))),
            as: UTF8.self
        )
        #expect(text == #"{"jsonrpc":"2.0","id":"a","result":{"accepted":true}}"#)
    }

    /// Every string escape JSON needs, around the eight-byte fast path's boundaries.
    @Test(arguments: [
        ("plain", #""plain""#),
        ("quote\"here", #""quote\"here""#),
        ("back\\slash", #""back\\slash""#),
        ("line\nbreak\ttab\rret", #""line\nbreak\ttab\rret""#),
        ("\u{08}\u{0C}\u{01}\u{1F}", #""\b\f\u0001\u001f""#),
        ("slash/stays", #""slash/stays""#),
        ("ünïcödé ✓ 🔑", "\"ünïcödé ✓ 🔑\""),
        ("12345678\"", #""12345678\"""#),
        ("1234567\"8", #""1234567\"8""#),
        ("123456789012345\u{00}", #""123456789012345\u0000""#),
        ("", #""""#),
    ])
    func escapesStrings(input: String, expected: String) throws {
        #expect(String(decoding: try WireEncoder().encode(input), as: UTF8.self) == expected)
    }

    /// Every integer width goes through its own overload (a missing one once recursed forever).
    @Test func encodesEveryIntegerWidthAndFloat() throws {
        struct Widths: Encodable {
            var a: Int8 = -8
            var b: Int16 = -16
            var c: Int32 = -32
            var d: Int64 = -64
            var e: UInt8 = 8
            var f: UInt16 = 16
            var g: UInt32 = 32
            var h: UInt64 = 64
            var i: UInt = 1
            var j: Int = -1
            var k: Float = 1.5
            var l: Double = 2
            var list: [Int32] = [1, 2]
            var single: Int16Box = Int16Box(value: 3)
        }
        struct Int16Box: Encodable {
            var value: Int16
            func encode(to encoder: any Encoder) throws {
                var container = encoder.singleValueContainer()
                try container.encode(value)
            }
        }
        let text = String(decoding: try WireEncoder().encode(Widths()), as: UTF8.self)
        #expect(
            text
                == #"{"a":-8,"b":-16,"c":-32,"d":-64,"e":8,"f":16,"g":32,"h":64,"i":1,"j":-1,"k":1.5,"l":2,"list":[1,2],"single":3}"#
        )
    }

    /// Nested and empty containers, optionals and nulls come out as JSON expects.
    @Test func encodesNestingEmptyContainersAndNull() throws {
        let value: JSONValue = .object([
            "empty": .object([:]), "list": .array([.null, .bool(false), .array([])]), "n": .number(0.25),
        ])
        let data = try WireEncoder().encode(value)
        #expect(
            try Fixtures.parse(Data(data))
                == Fixtures.parse(Data(#"{"empty":{},"list":[null,false,[]],"n":0.25}"#.utf8))
        )
    }

    /// A JSONValue inside a Codable type (written straight, not through its conformance) comes out as Foundation's
    /// encoder writes it, at every depth and in keyed, unkeyed and single-value places.
    @Test func writesJSONValuesInsideOtherValuesLikeFoundation() throws {
        struct Holder: Encodable {
            var before = 1
            var claims: JSONValue
            var list: [JSONValue]
            var optional: JSONValue?
            var after = "end"
        }
        let claims: JSONValue = .object([
            "name": .string("Zoë \"Q\" \\ \n\u{01}"), "age": .integer(-42), "ratio": .number(0.5),
            "big": .number(1e300),
            "ok": .bool(true), "none": .null, "roles": .array([.string("a"), .array([]), .object([:])]),
            "nested": .object(["deeper": .object(["x": .integer(Int64.max)])]),
        ])
        let holder = Holder(claims: claims, list: [.integer(1), claims, .null], optional: .string("s"))
        let ours = try WireEncoder().encode(holder)
        #expect(try Fixtures.parse(Data(ours)) == Fixtures.parse(try JSONEncoder().encode(holder)))
        let single = Holder(claims: .object(["k": .array([.string("v"), .number(2.5)])]), list: [], optional: nil)
        #expect(
            String(decoding: try WireEncoder().encode(single), as: UTF8.self)
                == #"{"before":1,"claims":{"k":["v",2.5]},"list":[],"after":"end"}"#
        )
        #expect(throws: WireEncodingError.self) { try WireEncoder().encode(Holder(claims: .number(.nan), list: [])) }
    }

    /// NaN and infinity have no JSON spelling: encoding them fails instead of writing garbage.
    @Test func refusesNonFiniteNumbers() {
        #expect(throws: WireEncodingError.self) { try WireEncoder().encode([Double.nan]) }
        #expect(throws: WireEncodingError.self) { try WireEncoder().encode(JSONValue.number(.infinity)) }
    }
}
