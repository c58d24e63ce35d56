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
    ])
    func splitsAtTheTwoDots(compact: String, parts: [String]) throws {
        let jws = try #require(CompactJWS.parts(of: compact))
        let found = [jws.header, jws.payload, jws.signature].map { String(decoding: jws.bytes[$0], as: UTF8.self) }
        #expect(found == parts)
        #expect(jws.bytes == Array(compact.utf8))
    }

    @Test(arguments: ["", "a", "a.b", "a.b.c.d", "...", "a.b.c."])
    func refusesAnythingButThreeParts(compact: String) {
        #expect(CompactJWS.parts(of: compact) == nil)
    }

    /// The payload of a real-shaped token decodes through its range.
    @Test func thePayloadDecodes() throws {
        let payload = Base64URL.encode(Data(#"{"sub":"x"}"#.utf8))
        let jws = try #require(CompactJWS.parts(of: "eyJhbGciOiJub25lIn0.\(payload).sig"))
        #expect(Base64URL.decode(utf8: jws.bytes[jws.payload]) == Data(#"{"sub":"x"}"#.utf8))
    }
}
