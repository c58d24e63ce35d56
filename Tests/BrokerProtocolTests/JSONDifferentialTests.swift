import BrokerProtocol
import Foundation
import Testing

/// The wire JSON engine against Foundation's, on generated documents: what both accept parses to the same value,
/// what the wire encoder writes Foundation reads back as what Foundation would have written, and the other way
/// round. (Where they differ on purpose — duplicate keys, numbers out of range — the wire side refuses.)
struct JSONDifferentialTests {
    /// A small deterministic generator (SplitMix64), so a failure names the seed that shows it.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static let alphabet: [String] = [
        "a", "Z", "0", " ", "\"", "\\", "/", "\n", "\t", "\u{01}", "é", "€", "𝄞", "\u{7F}",
    ]

    /// A string of characters that need escaping and characters that do not, from every UTF-8 length.
    static func string(_ random: inout Generator) -> String {
        (0..<Int.random(in: 0...12, using: &random)).map { _ in alphabet.randomElement(using: &random) ?? "a" }
            .joined()
    }

    /// JSON text for a random value, with random whitespace and escapes Foundation and the wire engine both read.
    static func document(_ random: inout Generator, depth: Int = 0) -> String {
        let kind = depth > 3 ? Int.random(in: 0...4, using: &random) : Int.random(in: 0...6, using: &random)
        switch kind {
        case 0: return "null"
        case 1: return Bool.random(using: &random) ? "true" : "false"
        case 2: return String(Int64.random(in: -1_000_000_000_000...1_000_000_000_000, using: &random))
        case 3:
            let mantissa = Double.random(in: -1000...1000, using: &random)
            let exponent = Int.random(in: -30...30, using: &random)
            return "\(mantissa)e\(exponent)"
        case 4: return quoted(string(&random), &random)
        case 5:
            let count = Int.random(in: 0...5, using: &random)
            return "[" + (0..<count).map { _ in document(&random, depth: depth + 1) }.joined(separator: " , ") + "]"
        default:
            var keys = Set<String>()
            for _ in 0..<Int.random(in: 0...5, using: &random) { keys.insert(string(&random)) }
            let members = keys.sorted().map { quoted($0, &random) + ":" + document(&random, depth: depth + 1) }
            return "{ " + members.joined(separator: ",\n") + " }"
        }
    }

    /// `text` as a JSON string, each character escaped as `\uXXXX` or not at random where that is allowed.
    static func quoted(_ text: String, _ random: inout Generator) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
            case _ where Bool.random(using: &random):
                for unit in String(scalar).utf16 { out += String(format: "\\u%04X", unit) }
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// Whether two values are the same JSON: an integer and a float of the same value are (Foundation's decoder
    /// reads `1e2` as an integer where it can).
    static func same(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (a, b) {
        case (.integer(let x), .number(let y)), (.number(let y), .integer(let x)): return Double(x) == y
        case (.array(let x), .array(let y)): return x.count == y.count && zip(x, y).allSatisfy { same($0, $1) }
        case (.object(let x), .object(let y)):
            return x.count == y.count && x.allSatisfy { key, value in y[key].map { same(value, $0) } ?? false }
        default: return a == b
        }
    }

    /// What both parse, they parse alike.
    @Test(arguments: 0..<8)
    func parsesGeneratedDocumentsAsFoundationDoes(batch: UInt64) throws {
        var random = Generator(state: batch)
        for index in 0..<200 {
            let text = Self.document(&random)
            let wire = try JSONValue.parse(Array(text.utf8))
            let foundation = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
            #expect(Self.same(wire, foundation), "batch \(batch), document \(index): \(text)")
        }
    }

    /// A `JSONValue` inside a Codable type, read by WireDecoder (straight from the tape), is what Foundation's
    /// decoder reads through `JSONValue.init(from:)`.
    @Test(arguments: 0..<4)
    func decodesJSONValueFieldsAsFoundationDoes(batch: UInt64) throws {
        struct Holder: Decodable {
            let value: JSONValue
            let values: [JSONValue]
        }
        var random = Generator(state: batch + 100)
        for index in 0..<100 {
            let one = Self.document(&random)
            let two = Self.document(&random)
            let text = "{\"value\":\(one),\"values\":[\(two),\(one)]}"
            let wire = try WireDecoder().decode(Holder.self, from: Array(text.utf8))
            let foundation = try JSONDecoder().decode(Holder.self, from: Data(text.utf8))
            #expect(Self.same(wire.value, foundation.value), "batch \(batch), document \(index): \(text)")
            #expect(wire.values.count == 2 && zip(wire.values, foundation.values).allSatisfy { Self.same($0, $1) })
        }
        // Keys equal after Unicode normalization are refused inside a field too, not merged.
        let merged = "{\"value\":{\"caf\u{E9}\":1,\"cafe\u{301}\":2},\"values\":[]}"
        #expect(throws: DecodingError.self) { try WireDecoder().decode(Holder.self, from: Array(merged.utf8)) }
    }

    /// A number beyond a double's range is refused, as Foundation refuses it, instead of read as infinity (which
    /// could not be written back).
    @Test(arguments: ["1e400", "-1e400", "[0, 1E+309]", "{\"a\": 2e99999}", String(repeating: "9", count: 400)])
    func refusesNumbersOutOfRange(text: String) throws {
        #expect(throws: JSONSyntaxError.self) { try JSONValue.parse(Array(text.utf8)) }
        #expect(throws: (any Error).self) { try WireDecoder().decode(JSONValue.self, from: Array(text.utf8)) }
        #expect(throws: (any Error).self) { try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) }
    }

    /// A number too small for a double is zero, as in Foundation: only overflow is refused.
    @Test func readsUnderflowAsZero() throws {
        #expect(try JSONValue.parse(Array("1e-400".utf8)) == .number(0))
        #expect(Self.same(try JSONDecoder().decode(JSONValue.self, from: Data("1e-400".utf8)), .number(0)))
    }

    struct Sample: Codable, Equatable {
        var text: String
        var count: Int
        var ratio: Double
        var flag: Bool
        var maybe: String?
        var list: [Int64]
        var map: [String: String]
        var link: URL
        var blob: Data
        var optionalLink: URL?
    }

    static func sample(_ random: inout Generator) -> Sample {
        let path = string(&random).addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "x"
        return Sample(
            text: string(&random),
            count: Int.random(in: -1_000_000...1_000_000, using: &random),
            ratio: Double.random(in: -1e6...1e6, using: &random),
            flag: Bool.random(using: &random),
            maybe: Bool.random(using: &random) ? string(&random) : nil,
            list: (0..<Int.random(in: 0...4, using: &random)).map { _ in Int64.random(in: .min ... .max, using: &random)
            },
            map: Dictionary(uniqueKeysWithValues: (0..<3).map { ("k\($0)", string(&random)) }),
            link: URL(string: "https://login.example/\(path)?q=\(path)") ?? URL(fileURLWithPath: "/"),
            blob: Data(
                (0..<Int.random(in: 0...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            ),
            optionalLink: Bool.random(using: &random) ? URL(string: "http://127.0.0.1:8400/cb") : nil
        )
    }

    /// What the wire encoder writes, Foundation reads back unchanged, and it is the JSON Foundation would have
    /// written (a URL as its string, Data as Base64); what Foundation writes, the wire decoder reads back unchanged.
    @Test(arguments: 0..<4)
    func encodesAndDecodesAsFoundationDoes(batch: UInt64) throws {
        var random = Generator(state: 1000 + batch)
        for index in 0..<100 {
            let value = Self.sample(&random)
            let wire = try WireEncoder().encode(value)
            let foundation = try JSONEncoder().encode(value)
            #expect(try JSONDecoder().decode(Sample.self, from: Data(wire)) == value, "sample \(index)")
            #expect(try WireDecoder().decode(Sample.self, from: foundation) == value, "sample \(index)")
            let wireJSON = try JSONValue.parse(wire)
            let foundationJSON = try JSONValue.parse(Array(foundation))
            #expect(Self.same(wireJSON, foundationJSON), "sample \(index): \(String(decoding: wire, as: UTF8.self))")
        }
    }

    class Base: Codable {
        var name = "base"
    }

    final class Derived: Base {
        var extra = 7
        var skipSuper = false

        private enum CodingKeys: String, CodingKey { case extra }

        override func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(extra, forKey: .extra)
            let superEncoder = container.superEncoder()
            if !skipSuper { try super.encode(to: superEncoder) }
        }
    }

    /// A class that encodes its superclass through superEncoder() gets Foundation's JSON (under `super`; `{}` when
    /// the superclass writes nothing), where the wire encoder used to trap.
    @Test(arguments: [false, true])
    func superEncodersWriteWhatFoundationWrites(skipSuper: Bool) throws {
        let value = Derived()
        value.skipSuper = skipSuper
        let wire = try JSONValue.parse(try WireEncoder().encode([value, value]))
        let foundation = try JSONValue.parse(Array(try JSONEncoder().encode([value, value])))
        #expect(wire == foundation, "\(wire) vs \(foundation)")
    }
}
