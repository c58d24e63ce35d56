import BrokerProtocol
import Foundation
import Testing

struct CompactJWSTests {
    /// Three parts, empty ones included, at the bytes between the dots; anything else is not a compact JWS.
    @Test(arguments: [
        ("aGVhZA.cGF5bG9hZA.c2ln", ["aGVhZA", "cGF5bG9hZA", "c2ln"]),
        ("..", ["", "", ""]),
        ("a..c", ["a", "", "c"]),
        ("é.ü.🔑", ["é", "ü", "🔑"]),
        (
            String(repeating: "h", count: 1001) + "." + String(repeating: "p", count: 703) + "."
                + String(repeating: "s", count: 342),
            [
                String(repeating: "h", count: 1001), String(repeating: "p", count: 703),
                String(repeating: "s", count: 342),
            ]
        ),
    ])
    func splitsAtTheTwoDots(compact: String, parts: [String]) throws {
        let jws = try #require(CompactJWS.parts(of: compact))
        let found = [jws.header, jws.payload, jws.signature].map { String(decoding: jws.bytes[$0], as: UTF8.self) }
        #expect(found == parts)
        #expect(jws.bytes == Array(compact.utf8))
    }

    @Test(arguments: [
        "", "a", "a.b", "a.b.c.d", "...", "a.b.c.",
        String(repeating: "h", count: 1001) + "." + String(repeating: "p", count: 703),
        "a.b." + String(repeating: "s", count: 342) + ".", String(repeating: "x", count: 2000),
    ])
    func refusesAnythingButThreeParts(compact: String) {
        #expect(CompactJWS.parts(of: compact) == nil)
    }

    /// The payload of a real-shaped token decodes through its range.
    @Test func thePayloadDecodes() throws {
        let payload = Base64URL.encode(Data(#"{"sub":"x"}"#.utf8))
        let jws = try #require(CompactJWS.parts(of: "eyJhbGciOiJub25lIn0.\(payload).sig"))
        #expect(Base64URL.decode(utf8: jws.bytes[jws.payload]) == Data(#"{"sub":"x"}"#.utf8))
    }

    /// base64url decodes as it did by way of Foundation (translated to the standard alphabet, padded, decoded), on
    /// every length, with and without padding, and with bytes outside the alphabet anywhere; except that padding
    /// before the end is refused, which Foundation let through.
    @Test func decodesBase64URLAsFoundationDoes() {
        func foundation(_ text: [UInt8]) -> Data? {
            var bytes = text
            while bytes.last == UInt8(ascii: "=") { bytes.removeLast() }
            guard !bytes.contains(where: { Array("+/=".utf8).contains($0) }) else { return nil }
            bytes = bytes.map {
                $0 == UInt8(ascii: "-") ? UInt8(ascii: "+") : $0 == UInt8(ascii: "_") ? UInt8(ascii: "/") : $0
            }
            bytes += repeatElement(UInt8(ascii: "="), count: (4 - bytes.count % 4) % 4)
            return Data(base64Encoded: Data(bytes))
        }
        // Seeded, as the differential tests are: a failure shows again on the next run.
        var random = JSONDifferentialTests.Generator(state: 64)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        let strays = Array("=+/ .\n\u{7F}".utf8) + [0x00, 0x80, 0xFF]
        for length in 0..<40 {
            for _ in 0..<200 {
                var text = (0..<length).map { _ in alphabet.randomElement(using: &random)! }
                if !text.isEmpty, Bool.random(using: &random) {
                    text[Int.random(in: 0..<text.count, using: &random)] = strays.randomElement(using: &random)!
                }
                if Bool.random(using: &random) {
                    text += repeatElement(UInt8(ascii: "="), count: Int.random(in: 1...3, using: &random))
                }
                #expect(Base64URL.decode(utf8: text) == foundation(text), "\(String(decoding: text, as: UTF8.self))")
            }
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
            #expect(Base64URL.decode(Base64URL.encode(Data(bytes))) == Data(bytes))
        }
    }
}
