import BrokerTime
import Testing

/// The one-entry memo of what repeats from one refresh to the next.
struct LastDecodedTests {
    /// Counts the decodes it runs; refuses "bad".
    final class Decoder: @unchecked Sendable {
        var calls = 0
        func decode(_ input: String) -> Int? {
            calls += 1
            return input == "bad" ? nil : input.count
        }
    }

    @Test func decodesARepeatedInputOnceAndEveryOtherOneAfresh() {
        let memo = LastDecoded<String, Int>()
        let decoder = Decoder()
        #expect(memo.value(of: "ab", decoder.decode) == 2)
        #expect(memo.value(of: "ab", decoder.decode) == 2)
        #expect(decoder.calls == 1)
        // Alternating inputs: each answer is its own input's, decoded again.
        #expect(memo.value(of: "abc", decoder.decode) == 3)
        #expect(memo.value(of: "ab", decoder.decode) == 2)
        #expect(decoder.calls == 3)
        // A refusal is not kept: asked again, it is decoded again, and the last good entry stays.
        #expect(memo.value(of: "bad", decoder.decode) == nil)
        #expect(memo.value(of: "bad", decoder.decode) == nil)
        #expect(decoder.calls == 5)
        #expect(memo.value(of: "ab", decoder.decode) == 2)
        #expect(decoder.calls == 5)
    }

    /// The overload for a decode that refuses nothing keeps each input's answer the same way.
    @Test func aDecodeThatRefusesNothingIsKeptAlike() {
        let memo = LastDecoded<String, Int>()
        var calls = 0
        let decode = { (input: String) -> Int in
            calls += 1
            return input.count
        }
        #expect(memo.value(of: "abc", decode) == 3)
        #expect(memo.value(of: "abc", decode) == 3)
        #expect(calls == 1)
        #expect(memo.value(of: "a", decode) == 1)
        #expect(memo.value(of: "abc", decode) == 3)
        #expect(calls == 3)
    }
}
