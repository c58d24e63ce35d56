import BrokerProtocol
import Foundation
import Testing

/// The transcripts in `Protocol/examples/` are normative: every message in them must decode into the Swift
/// types and encode back to the same JSON (the Python validator checks them against the schemas).
struct ProtocolExamplesTests {
    static let examplesDirectory = URL(filePath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appending(path: "Protocol/examples")

    static var exampleFiles: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: examplesDirectory.path)) ?? [])
            .filter { $0.hasSuffix(".json") }.sorted()
    }

    /// There are examples to check (a moved directory must not make this suite pass vacuously).
    @Test func examplesExist() {
        #expect(Self.exampleFiles.count >= 20)
    }

    @Test(arguments: exampleFiles)
    func messagesRoundTripThroughTheSwiftTypes(file: String) throws {
        let data = try Data(contentsOf: Self.examplesDirectory.appending(path: file))
        let transcript = try #require(try JSONValue.parse(Array(data)).objectValue)
        let messages = try #require(transcript["messages"].flatMap { if case .array(let a) = $0 { a } else { nil } })
        var methodsByID: [RequestID: MethodName] = [:]
        for entry in messages.compactMap(\.objectValue) {
            guard let message = entry["message"], entry["invalid"] != .bool(true) else { continue }
            let bytes = try WireEncoder().encode(message)
            switch entry["direction"]?.stringValue {
            case "client":
                try checkRequest(bytes, original: message, file: file, methodsByID: &methodsByID)
            case "broker":
                try checkBrokerMessage(bytes, original: message, file: file, methodsByID: methodsByID)
            default:
                Issue.record("\(file): an entry without a direction")
            }
        }
    }

    private func checkRequest(
        _ bytes: [UInt8],
        original: JSONValue,
        file: String,
        methodsByID: inout [RequestID: MethodName]
    ) throws {
        switch RequestDecoder().decode(bytes) {
        case .failure(let rejection):
            // A well-formed call of a method this protocol does not have is the one refusal an example may show.
            let method = original.objectValue?["method"]?.stringValue ?? ""
            guard rejection.error.errorCode == .methodNotFound, Methods.named(method) == nil else {
                Issue.record("\(file): a valid example request was refused: \(rejection.error.message)")
                return
            }
        case .success(let request):
            if let id = request.id { methodsByID[id] = request.call.method }
            let params = original.objectValue?["params"] ?? .null
            let reencoded = try encodeParams(request.call)
            #expect(reencoded == params || (params == .null && reencoded == .object([:])), "\(file): params differ")
        }
    }

    private func encodeParams(_ call: some MethodCall) throws -> JSONValue {
        try JSONValue.parse(try WireEncoder().encode(call.params))
    }

    private func checkBrokerMessage(
        _ bytes: [UInt8],
        original: JSONValue,
        file: String,
        methodsByID: [RequestID: MethodName]
    ) throws {
        let decoder = ServerMessageDecoder { id in methodsByID[id].map(Self.resultType) }
        let message = try decoder.decode(bytes)
        let object = try #require(original.objectValue)
        switch message {
        case .result(_, let result):
            guard let encodable = result as? any Encodable else {
                Issue.record("\(file): a result that cannot be encoded")
                return
            }
            let reencoded = try JSONValue.parse(try WireEncoder().encode(encodable))
            #expect(reencoded == object["result"], "\(file): result differs")
        case .error(_, let error):
            #expect(try JSONValue.parse(try WireEncoder().encode(error)) == object["error"], "\(file): error differs")
        case .notification(let notification):
            let params: [UInt8]
            switch notification {
            case .webAuthDidStartLoad(let value), .webAuthDidFinishLoad(let value):
                params = try WireEncoder().encode(value)
            case .webAuthDidFail(let value): params = try WireEncoder().encode(value)
            case .webAuthDidComplete(let value): params = try WireEncoder().encode(value)
            case .deviceCodePrompt(let value): params = try WireEncoder().encode(value)
            case .unknown(let method):
                Issue.record("\(file): unknown notification \(method)")
                return
            }
            #expect(try JSONValue.parse(params) == object["params"], "\(file): notification params differ")
        case .orphanResponse(let id):
            Issue.record("\(file): a response to id \(id) answers no request before it")
        }
    }

    static func resultType(_ method: MethodName) -> any (Decodable & Sendable).Type {
        func result(_ method: (some BrokerMethod).Type) -> any (Decodable & Sendable).Type { method.Result.self }
        guard let named = Methods.named(method.rawValue) else {
            Issue.record("\(method.rawValue) has no type in the method table")
            return JSONValue.self
        }
        return result(named)
    }
}
