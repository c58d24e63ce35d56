/// A success response encoded once, with the two things that differ between requests left open: the request's id
/// and the correlation id (the last member of the result, as every token result has it).
///
/// A cached token's answer is the same four kilobytes for every request that gets it (token, id token, account
/// and its claims); only the id and the correlation id change. The template keeps those bytes and splices the two
/// in, byte for byte what ``WireEncoder`` writes for the whole response.
///
///     {"jsonrpc":"2.0","id":<id>,"result":{"brokerTokenResponse":{…,"correlationId":<correlation id>}}}
package struct ResponseTemplate: Sendable {
    /// From after the id up to the correlation id's value.
    private let middle: [UInt8]
    /// The closing braces after the correlation id's value, and the newline.
    private let end: [UInt8]

    private static let start = Array(#"{"jsonrpc":"2.0","id":"#.utf8)
    private static let hole = Array(#""correlationId":"""#.utf8)

    /// The template of `Response(id:result:)`, given `result` with an empty correlation id as its last member.
    ///
    /// Nil when `result` does not encode so (its correlation id is not empty, or not last).
    package init?(_ result: some Encodable & Sendable) {
        guard var bytes = try? WireEncoder().encode(Response(id: .number(0), result: result)) else { return nil }
        let opening = Self.start + Array("0".utf8)
        guard bytes.starts(with: opening) else { return nil }
        // The last `"correlationId":""` with nothing but closing braces after it is the result's own: the same
        // text inside a string value would have its quotes escaped.
        let closers = bytes.reversed().prefix { $0 == UInt8(ascii: "}") }.count
        let holeEnd = bytes.count - closers
        guard holeEnd - Self.hole.count >= opening.count,
            bytes[(holeEnd - Self.hole.count)..<holeEnd].elementsEqual(Self.hole)
        else { return nil }
        bytes.append(UInt8(ascii: "\n"))
        middle = Array(bytes[opening.count..<(holeEnd - 2)])
        end = Array(bytes[holeEnd...])
    }

    /// The response line (with its newline) for the request `id`, with `correlationId` in the result.
    package func response(id: RequestID, correlationId: String) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Self.start.count + middle.count + end.count + 96)
        bytes.append(contentsOf: Self.start)
        switch id {
        case .number(let number): bytes.append(contentsOf: String(number).utf8)
        case .string(let text): WireEncoder.appendString(text, to: &bytes)
        }
        bytes.append(contentsOf: middle)
        WireEncoder.appendString(correlationId, to: &bytes)
        bytes.append(contentsOf: end)
        return bytes
    }
}
