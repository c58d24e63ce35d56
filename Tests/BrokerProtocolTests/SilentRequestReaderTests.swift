import BrokerProtocol
import Foundation
import Testing

/// The fast path's reader against the general decoder: whatever the reader takes, it reads as the decoder does, and
/// whatever it leaves, the decoder still answers (its errors stay the decoder's).
struct SilentRequestReaderTests {
    typealias Generator = JSONDifferentialTests.Generator

    static let plain: [String] = [
        #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"app","authority":"https://login.microsoftonline.com/common","requestedScopes":["User.Read","Mail.Read"],"account":{"identifier":"uid.tid"}},"correlationId":"c0ffee00-0000-4000-8000-000000000001"}}"#,
        #"{ "params" : { "authParameters" : { "requestedScopes" : [ ], "clientId" : "é€𝄞" } } , "method" : "acquireTokenSilently" , "id" : "x y" , "jsonrpc" : "2.0" }"#,
        #"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a","resource":"https://r","username":"u@x","redirectUri":"http://localhost","forceRefresh":false,"minimumValiditySeconds":-5,"account":{}}}}"#,
        #"{"jsonrpc":"2.0","id":0,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"","account":{"username":"u","identifier":""},"forceRefresh":true}}}"#,
    ]

    /// Requests the reader must leave to the decoder, each for a reason of its own.
    static let leftToTheDecoder: [String] = [
        #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a\u0062"}}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"client\u0049d":"a"}}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a","authority":null}}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a","prompt":"login"}}}"#,
        #"{"jsonrpc":"2.0","method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a"}}}"#,
        #"{"jsonrpc":"2.0","id":1.0,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a"}}}"#,
        #"{"jsonrpc":"2.0","id":null,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a"}}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a","minimumValiditySeconds":1e3}}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a"},"extra":1}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"getStatus","params":{"authParameters":{"clientId":"a"}}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a","clientId":"b"}}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a"},"correlationId":"\#(String(repeating: "c", count: 257))"}}"#,
        #"{"jsonrpc":"2.0","id":"\#(String(repeating: "i", count: 257))","method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a"}}}"#,
        #"{"jsonrpc":"2.0","id":99999999999999999999,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a"}}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"requestedScopes":["a"]}}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a","requestedScopes":["a",2]}}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a"}}} x"#,
        #"[{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"a"}}}]"#,
    ]

    /// What the reader took must be what the decoder decodes: same id, a request (not a notification) of
    /// `acquireTokenSilently`, same params.
    static func expectSameAsDecoder(_ bytes: [UInt8], _ read: (id: RequestID, params: AcquireTokenSilentlyParams)) {
        let text = String(decoding: bytes, as: UTF8.self)
        guard case .success(let request) = RequestDecoder().decode(bytes) else {
            Issue.record("the fast path took what the decoder refuses: \(text)")
            return
        }
        #expect(request.id == read.id, "\(text)")
        #expect(!request.isNotification, "\(text)")
        #expect(request.call.method == Methods.AcquireTokenSilently.name, "\(text)")
        #expect((request.call.params as? AcquireTokenSilentlyParams) == read.params, "\(text)")
    }

    @Test(arguments: plain)
    func readsPlainRequestsAsTheDecoderDoes(text: String) throws {
        let bytes = Array(text.utf8)
        let read = try #require(SilentRequestReader.read(bytes))
        Self.expectSameAsDecoder(bytes, read)
    }

    @Test(arguments: leftToTheDecoder)
    func leavesEverythingElseToTheDecoder(text: String) {
        #expect(SilentRequestReader.read(Array(text.utf8)) == nil)
    }

    /// Thousands of mutations of the plain requests (bytes changed, dropped, duplicated, escapes and other
    /// values put in): whatever the reader still takes, the decoder reads the same.
    @Test func agreesWithTheDecoderOnMutatedRequests() {
        let pieces = [
            "\\u0041", "\\\"", "null", "1.5", "-0", "[]", "{}", "\"\"", ",", ":", " ", "\"x\":1,", "é", "\u{01}",
        ]
        var taken = 0
        var left = 0
        for seed in UInt64(0)..<4000 {
            var random = Generator(state: seed)
            var bytes = Array(Self.plain[Int(seed) % Self.plain.count].utf8)
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                let at = Int.random(in: 0..<bytes.count, using: &random)
                switch Int.random(in: 0..<4, using: &random) {
                case 0: bytes[at] = UInt8.random(in: 0x20...0x7E, using: &random)
                case 1: bytes.remove(at: at)
                case 2: bytes.insert(contentsOf: bytes[at..<min(bytes.count, at + 6)], at: at)
                default: bytes.insert(contentsOf: Array(pieces.randomElement(using: &random)!.utf8), at: at)
                }
                if bytes.isEmpty { bytes = [UInt8(ascii: "{")] }
            }
            if let read = SilentRequestReader.read(bytes) {
                taken += 1
                Self.expectSameAsDecoder(bytes, read)
            } else {
                left += 1
            }
        }
        // Both sides of the comparison were exercised.
        #expect(taken > 100)
        #expect(left > 100)
    }

    /// A remembered answer, spliced with any id and correlation id, is byte for byte the encoder's whole response.
    @Test func aTemplateSplicesExactlyWhatTheEncoderWrites() throws {
        var blank = AcquireTokenResult(brokerTokenResponse: Fixtures.tokenResult)
        blank.brokerTokenResponse.correlationId = ""
        let template = try #require(ResponseTemplate(blank))
        var random = Generator(state: 7)
        var ids: [RequestID] = [
            .number(0), .number(-1), .number(.max), .number(.min), .string(""), .string("a\"b\\c\n"),
        ]
        // What takes the most room: control characters (six bytes each once escaped), and the longest integer.
        ids.append(.string(String(repeating: "\u{01}", count: 40)))
        var correlationIds = [
            "", "c0ffee00-0000-4000-8000-000000000001", "\"\u{01}é𝄞", String(repeating: "\u{1F}", count: 33),
        ]
        for _ in 0..<50 {
            ids.append(.string(JSONDifferentialTests.string(&random)))
            correlationIds.append(JSONDifferentialTests.string(&random))
        }
        for (id, correlationId) in zip(ids, correlationIds.cycled(to: ids.count)) {
            var result = blank
            result.brokerTokenResponse.correlationId = correlationId
            let whole = try WireEncoder().encode(Response(id: id, result: result)) + Array("\n".utf8)
            // Written in place into exactly the room its maximum asks for (`bytes` writes so): the same bytes.
            #expect(ResponseLine(template, id: id, correlationId: correlationId).bytes == whole)
        }
    }

    /// A result whose correlation id is not the empty last member has no template (rather than a wrong one).
    @Test func noTemplateWithoutTheCorrelationIdLast() {
        #expect(ResponseTemplate(AcquireTokenResult(brokerTokenResponse: Fixtures.tokenResult)) == nil)
        #expect(ResponseTemplate(AccountsResult(accounts: [Fixtures.account])) == nil)
    }
}

extension Array {
    /// The elements repeated until there are `count`.
    fileprivate func cycled(to count: Int) -> [Element] {
        (0..<count).map { self[$0 % self.count] }
    }
}
