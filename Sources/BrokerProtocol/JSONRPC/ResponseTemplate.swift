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

    /// The most bytes the response line for `id` and `correlationId` can have: a string's character takes at most
    /// six once escaped (`\u00XX`).
    package func maximumByteCount(id: RequestID, correlationId: String) -> Int {
        let idBytes =
            switch id {
            case .number: 20
            case .string(let text): 6 * text.utf8.count + 2
            }
        return Self.start.count + idBytes + middle.count + 6 * correlationId.utf8.count + 2 + end.count
    }

    /// Appends the response line (with its newline) for the request `id`, with `correlationId` in the result, to
    /// `output`.
    func write(id: RequestID, correlationId: String, to output: inout RawByteOutput) {
        Self.start.withUnsafeBytes { output.append($0) }
        switch id {
        case .number(let number): WireEncoder.writeInteger(number, to: &output)
        case .string(let text): WireEncoder.writeString(text, to: &output)
        }
        middle.withUnsafeBytes { output.append($0) }
        WireEncoder.writeString(correlationId, to: &output)
        end.withUnsafeBytes { output.append($0) }
    }
}

/// A response line worked out but not yet written: a ``ResponseTemplate`` with its request's id and correlation id.
package struct ResponseLine: Sendable {
    package let template: ResponseTemplate
    package let id: RequestID
    package let correlationId: String

    package init(_ template: ResponseTemplate, id: RequestID, correlationId: String) {
        self.template = template
        self.id = id
        self.correlationId = correlationId
    }

    /// The most bytes the line can have (see ``ResponseTemplate/maximumByteCount(id:correlationId:)``).
    package var maximumByteCount: Int {
        template.maximumByteCount(id: id, correlationId: correlationId)
    }

    /// The line's bytes.
    package var bytes: [UInt8] {
        [UInt8](unsafeUninitializedCapacity: maximumByteCount) { room, count in
            count = write(into: UnsafeMutableRawBufferPointer(room))
        }
    }

    /// Writes the line at the start of `free`, which has room for ``maximumByteCount`` bytes, and returns how many
    /// it wrote: one copy into the buffer the line is sent from.
    package func write(into free: UnsafeMutableRawBufferPointer) -> Int {
        var output = RawByteOutput(free)
        template.write(id: id, correlationId: correlationId, to: &output)
        return output.written
    }
}

/// The free room of a buffer, filled from its start.
struct RawByteOutput {
    private let free: UnsafeMutableRawBufferPointer
    private(set) var written = 0

    init(_ free: UnsafeMutableRawBufferPointer) {
        self.free = free
    }

    /// More bytes than the room trap, in release builds too (an unsafe buffer checks its bounds in debug builds
    /// only), instead of writing past it.
    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count <= free.count - written, "a response line outgrew the room reserved for it")
        UnsafeMutableRawBufferPointer(rebasing: free[written..<(written + bytes.count)]).copyMemory(from: bytes)
        written += bytes.count
    }

    mutating func append(_ byte: UInt8) {
        precondition(written < free.count, "a response line outgrew the room reserved for it")
        free[written] = byte
        written += 1
    }
}
