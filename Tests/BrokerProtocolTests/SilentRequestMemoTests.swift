import BrokerProtocol
import Foundation
import Testing

/// The memo in front of the silent reader: a line it has read before, with another id, is read from memory; and
/// whatever it answers, the strict decoder reads the same.
struct SilentRequestMemoTests {
    typealias Generator = JSONDifferentialTests.Generator

    private static let line =
        #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"app","authority":"https://login.microsoftonline.com/common","requestedScopes":["User.Read"],"account":{"username":"ada@contoso.com"}}}}"#

    private static func line(id: String) -> [UInt8] {
        Array(line.replacingOccurrences(of: #""id":1,"#, with: #""id":\#(id),"#).utf8)
    }

    /// The request in `bytes` as the socket's fast path reads it: from `memo` when it has the line, else from the
    /// reader (remembered for the next time), with the key of its auth parameters.
    private func silentRead(
        _ memo: SilentRequestMemo,
        _ bytes: [UInt8]
    ) -> (id: RequestID, params: AcquireTokenSilentlyParams, key: HashedAuthParameters)? {
        if let (id, request) = bytes.withUnsafeBytes({ memo.remembered($0) }) {
            return (id, request.params, request.key)
        }
        return memo.readAndRemember(bytes)
    }

    /// What `memo` has for the line `bytes`.
    private func remembered(
        _ memo: SilentRequestMemo,
        _ bytes: [UInt8]
    ) -> (id: RequestID, params: AcquireTokenSilentlyParams)? {
        bytes.withUnsafeBytes { memo.remembered($0) }.map { ($0.id, $0.request.params) }
    }

    /// What the memo took must be what the decoder decodes.
    private func expectSameAsDecoder(_ bytes: [UInt8], _ read: (id: RequestID, params: AcquireTokenSilentlyParams)) {
        SilentRequestReaderTests.expectSameAsDecoder(bytes, read)
    }

    /// What the memo read must be what the decoder decodes, and its key the key of those parameters.
    private func expectSameAsDecoder(
        _ bytes: [UInt8],
        _ read: (id: RequestID, params: AcquireTokenSilentlyParams, key: HashedAuthParameters)
    ) {
        SilentRequestReaderTests.expectSameAsDecoder(bytes, (read.id, read.params))
        #expect(read.key == HashedAuthParameters(read.params.authParameters))
    }

    @Test func theSameLineWithAnotherIDIsReadFromMemory() throws {
        let memo = SilentRequestMemo()
        #expect(remembered(memo, Self.line(id: "1")) == nil)
        let first = try #require(silentRead(memo, Self.line(id: "1")))
        for id in ["7", "-0", "0", "9223372036854775807", "-9223372036854775808", #""""#, #""a b~!""#] {
            let read = try #require(remembered(memo, Self.line(id: id)), "\(id)")
            #expect(read.params == first.params)
            expectSameAsDecoder(Self.line(id: id), read)
        }
        #expect(remembered(memo, Self.line(id: "7"))?.id == .number(7))
        #expect(remembered(memo, Self.line(id: #""x""#))?.id == .string("x"))
    }

    /// A line in another order and spacing than the broker's own clients write is remembered too.
    @Test func aLineOfAnotherShapeIsRememberedToo() throws {
        func line(id: String) -> [UInt8] {
            Array(
                #"{ "method": "acquireTokenSilently", "id": \#(id), "params": {"authParameters":{"clientId":"app","authority":"https://login.microsoftonline.com/common"}}, "jsonrpc": "2.0" }"#
                    .utf8
            )
        }
        let memo = SilentRequestMemo()
        let first = try #require(silentRead(memo, line(id: "1")))
        let read = try #require(remembered(memo, line(id: #""x""#)))
        #expect(read.id == .string("x"))
        #expect(read.params == first.params)
        expectSameAsDecoder(line(id: #""x""#), read)
    }

    /// A line read from memory comes with the key of its auth parameters, the one the first read made.
    @Test func aRememberedLineBringsTheKeyOfItsParameters() throws {
        let memo = SilentRequestMemo()
        let first = try #require(silentRead(memo, Self.line(id: "1")))
        #expect(first.key == HashedAuthParameters(first.params.authParameters))
        let again = try #require(silentRead(memo, Self.line(id: "2")))
        #expect(again.id == .number(2))
        #expect(again.key == first.key)
        #expect(again.key.parameters == first.params.authParameters)
    }

    /// Keys are equal exactly when the parameters are, whatever they differ in; equal keys hash alike.
    @Test func keysAreEqualExactlyWhenTheParametersAre() {
        let base = AuthParameters(clientId: "app", authority: "https://login.microsoftonline.com/common")
        var scopes = base
        scopes.requestedScopes = ["User.Read"]
        var claims = base
        claims.decodedClaims = "{}"
        var refresh = base
        refresh.forceRefresh = false
        let keys = [base, scopes, claims, refresh].map(HashedAuthParameters.init)
        for (i, key) in keys.enumerated() {
            for (j, other) in keys.enumerated() { #expect((key == other) == (i == j), "\(i) \(j)") }
            #expect(HashedAuthParameters(key.parameters) == key)
            #expect(HashedAuthParameters(key.parameters).hashValue == key.hashValue)
        }
    }

    /// Ids that are not plain integers or plain ASCII strings, and lines that differ anywhere but in the id, go to
    /// the reader; its answer (or the decoder's refusal) stands.
    @Test func anythingElseGoesToTheReader() throws {
        let memo = SilentRequestMemo()
        _ = try #require(silentRead(memo, Self.line(id: "1")))
        let notPlain = [
            "01", "1.5", "1e3", "-", "--1", "99999999999999999999", #""a\"b""#, #""é""#, #""\u0041""#, "null", "[1]",
            "{}", "true", " 1", String(repeating: "1", count: 30),
            #""\#(String(repeating: "i", count: 257))""#,
        ]
        for id in notPlain {
            let bytes = Self.line(id: id)
            #expect(remembered(memo, bytes) == nil, "\(id)")
            if let read = silentRead(memo, bytes) { expectSameAsDecoder(bytes, read) }
        }
        let elsewhere = Array(Self.line.replacingOccurrences(of: "User.Read", with: "User.Write").utf8)
        #expect(remembered(memo, elsewhere) == nil)
        // The id of a nested object is not the request's: a line without one is refused, memo or not.
        let nested = Array(
            Self.line.replacingOccurrences(of: #""id":1,"#, with: "").replacingOccurrences(
                of: #""account":{"#,
                with: #""account":{"id":1,"#
            ).utf8
        )
        #expect(silentRead(memo, nested) == nil)
        #expect(remembered(memo, nested) == nil)
    }

    /// Lines whose hashes collide share a slot, and only the line with the same bytes is taken from it.
    @Test func aCollidingLineIsNotTakenForAnother() throws {
        let memo = SilentRequestMemo(slots: 1) { _, _ in 42 }
        let readLine = Self.line(id: "1")
        let writeLine = Array(
            String(decoding: readLine, as: UTF8.self).replacingOccurrences(
                of: "User.Read",
                with: "User.Write"
            ).utf8
        )
        _ = try #require(silentRead(memo, readLine))
        #expect(remembered(memo, writeLine) == nil)
        let write = try #require(silentRead(memo, writeLine))
        expectSameAsDecoder(writeLine, write)
        #expect(remembered(memo, Self.line(id: "2")) == nil)
        #expect(remembered(memo, writeLine)?.params == write.params)
    }

    /// Thousands of lines that differ from remembered ones by a few bytes (in the id or anywhere else): whatever
    /// the memo takes, the decoder reads the same.
    @Test func agreesWithTheDecoderOnMutatedLines() {
        let memo = SilentRequestMemo()
        let plain = SilentRequestReaderTests.plain.map { Array($0.utf8) } + [Self.line(id: #""s""#)]
        for line in plain { #expect(silentRead(memo, line) != nil) }
        let pieces = ["0", "1", "-", ".", "e", "\"", "\\", " ", ",", ":", "}", "{", "é", "\"id\":2,", "null", "\u{01}"]
        var fromMemory = 0
        for seed in UInt64(0)..<6000 {
            var random = Generator(state: seed)
            var bytes = plain[Int(seed) % plain.count]
            // Most mutations land at or near the id, where the memo reads for itself.
            let idAt = bytes.firstRange(of: Array(#""id""#.utf8))?.upperBound ?? 0
            for _ in 0..<Int.random(in: 1...2, using: &random) {
                let near = min(bytes.count - 1, idAt + Int.random(in: 0..<8, using: &random))
                let at = Bool.random(using: &random) ? near : Int.random(in: 0..<bytes.count, using: &random)
                switch Int.random(in: 0..<3, using: &random) {
                case 0: bytes[at] = UInt8.random(in: 0x20...0x7E, using: &random)
                case 1: bytes.remove(at: at)
                default: bytes.insert(contentsOf: Array(pieces.randomElement(using: &random)!.utf8), at: at)
                }
                if bytes.isEmpty { bytes = [UInt8(ascii: "{")] }
            }
            if remembered(memo, bytes) != nil { fromMemory += 1 }
            if let read = silentRead(memo, bytes) { expectSameAsDecoder(bytes, read) }
        }
        // The memo answered some of them itself.
        #expect(fromMemory > 100)
    }
}
