#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Encodes `Encodable` values as compact JSON, writing straight into a byte array.
///
/// The wire encoder of the protocol: keys in the order the type encodes them (declaration order for synthesized
/// conformances), no whitespace, `/` not escaped, never pretty-printed. It streams instead of building a tree
/// first, which makes it several times faster than Foundation's `JSONEncoder` on token responses.
///
/// Non-finite floating-point values throw, as JSON has no spelling for them.
package struct WireEncoder: Sendable {
    /// Creates an encoder.
    package init() {}

    /// The JSON bytes of `value`.
    package func encode(_ value: some Encodable) throws -> [UInt8] {
        var bytes: [UInt8] = []
        try encode(value, into: &bytes)
        return bytes
    }

    /// Appends the JSON of `value` to `bytes`.
    package func encode(_ value: some Encodable, into bytes: inout [UInt8]) throws {
        let state = StreamState()
        swap(&state.output, &bytes)
        defer { swap(&state.output, &bytes) }
        try state.encodeValue(value, depth: 0)
    }
}

extension WireEncoder {
    /// A JSON string: `"` and `\` escaped, control characters as `\n`, `\t`, … or `\u00XX`; everything else
    /// (including `/` and non-ASCII) as UTF-8.
    package static func appendString(_ string: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        var string = string
        string.withUTF8 { bytes in
            let raw = UnsafeRawBufferPointer(bytes)
            var runStart = 0
            var index = 0
            while index < bytes.count {
                // Up to the next byte that needs an escape, or the end.
                index = PlainBytes.end(in: raw, from: index, nonASCII: false)
                guard index < bytes.count else { break }
                let byte = bytes[index]
                if runStart < index {
                    output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
                }
                index += 1
                runStart = index
                output.append(UInt8(ascii: "\\"))
                switch byte {
                case UInt8(ascii: "\""): output.append(UInt8(ascii: "\""))
                case UInt8(ascii: "\\"): output.append(UInt8(ascii: "\\"))
                case 0x0A: output.append(UInt8(ascii: "n"))
                case 0x0D: output.append(UInt8(ascii: "r"))
                case 0x09: output.append(UInt8(ascii: "t"))
                case 0x08: output.append(UInt8(ascii: "b"))
                case 0x0C: output.append(UInt8(ascii: "f"))
                default:
                    output.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                    output.append(Self.hexDigits[Int(byte >> 4)])
                    output.append(Self.hexDigits[Int(byte & 0x0F)])
                }
            }
            if runStart < bytes.count { output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...])) }
        }
        output.append(UInt8(ascii: "\""))
    }

    /// Appends to `output` the bytes ``appendString(_:to:)`` would append for `string`: the string's own bytes
    /// between quotes when none needs escaping (no array in between), else the escaped string.
    static func writeString(_ string: String, to output: inout RawByteOutput) {
        var string = string
        let plain = string.withUTF8 { bytes in
            PlainBytes.end(in: UnsafeRawBufferPointer(bytes), from: 0, nonASCII: false) == bytes.count
        }
        guard plain else {
            var escaped: [UInt8] = []
            appendString(string, to: &escaped)
            return escaped.withUnsafeBytes { output.append($0) }
        }
        output.append(UInt8(ascii: "\""))
        string.withUTF8 { output.append(UnsafeRawBufferPointer($0)) }
        output.append(UInt8(ascii: "\""))
    }

    /// Appends `number` in decimal, as `String(number)` spells it.
    static func writeInteger(_ number: Int64, to output: inout RawByteOutput) {
        if number < 0 { output.append(UInt8(ascii: "-")) }
        var magnitude = number.magnitude
        // Twenty digits hold any UInt64; written from the last.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var first = digits.count
            repeat {
                first -= 1
                digits[first] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            output.append(UnsafeRawBufferPointer(UnsafeMutableBufferPointer(rebasing: digits[first...])))
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)
}

/// Why a value could not be encoded.
package struct WireEncodingError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, with the coding path.
    package let description: String
}

// MARK: - Streaming machinery

/// The output and the stack of open containers.
///
/// A container opened at depth `d` stays open until something is written at a depth `<= d`, or the value that opened it
/// finishes encoding.
private final class StreamState {
    // Accessed only from the one encode call that owns this state; dynamic exclusivity checks on every append
    // cost a quarter of the encoding time.
    @exclusivity(unchecked) var output: [UInt8] = []
    /// Open containers, innermost last: their depth, closing byte, and whether they have a member yet.
    @exclusivity(unchecked) private var open: [(depth: Int, closer: UInt8, hasMember: Bool)] = []

    func encodeValue<T: Encodable>(_ value: T, depth: Int) throws {
        // As Foundation's encoder writes them: a URL as its absolute string, Data as Base64.
        if T.self == URL.self, let url = value as? URL { return writeString(url.absoluteString) }
        if T.self == Data.self, let data = value as? Data { return writeString(data.base64EncodedString()) }
        // A JSONValue (a cache entry's fields, an account's claims) written straight: through its Encodable
        // conformance, every member of an object went through a keyed container and a dynamic dispatch.
        if T.self == JSONValue.self, let json = value as? JSONValue { return try writeJSON(json) }
        // A token result (every token answer) written straight as well: through `Codable` it took some fifty
        // keyed-container calls, 6 % of a refresh's instructions.
        if T.self == TokenResult.self, let result = value as? TokenResult { return try writeTokenResult(result) }
        // And the whole answer that carries one: its envelope through `Codable` cost 11,000 instructions.
        if T.self == Response<AcquireTokenResult>.self, let response = value as? Response<AcquireTokenResult> {
            return try writeTokenAnswer(response)
        }
        let encoder = StreamEncoder(state: self, depth: depth)
        try value.encode(to: encoder)
        close(deeperThan: depth)
        if !encoder.wroteSomething { output.append(contentsOf: Self.nullBytes) }
    }

    /// Opens a container at `depth`, closing deeper ones first.
    func openContainer(at depth: Int, opener: UInt8, closer: UInt8) {
        pendingValueAt = nil  // a super encoder's value, if one was awaited, is this container
        close(deeperThan: depth - 1)
        output.append(opener)
        open.append((depth, closer, false))
    }

    /// Where a value handed to a super encoder starts, while nothing has been written for it.
    @exclusivity(unchecked) private var pendingValueAt: Int?

    /// An encoder for a member whose key (if any) is written: if it writes nothing before the next member or the
    /// container's end, the value is `{}`, as with Foundation's encoder.
    func encoderForPendingValue(depth: Int) -> any Encoder {
        pendingValueAt = output.count
        return StreamEncoder(state: self, depth: depth)
    }

    /// Writes `{}` for a super encoder's value that was never written.
    private func fillPendingValue() {
        if let start = pendingValueAt {
            pendingValueAt = nil
            if output.count == start { output.append(contentsOf: [UInt8(ascii: "{"), UInt8(ascii: "}")]) }
        }
    }

    /// Starts a member of the container at `depth`: writes the comma, and the key for objects.
    func beginMember(at depth: Int, key: String?) {
        if pendingValueAt != nil { fillPendingValue() }
        close(deeperThan: depth)
        guard let index = open.lastIndex(where: { $0.depth == depth }) else { return }
        if open[index].hasMember { output.append(UInt8(ascii: ",")) }
        open[index].hasMember = true
        if let key {
            writeString(key)
            output.append(UInt8(ascii: ":"))
        }
    }

    func close(deeperThan depth: Int) {
        if pendingValueAt != nil { fillPendingValue() }
        while let last = open.last, last.depth > depth {
            output.append(last.closer)
            open.removeLast()
        }
    }

    func writeInteger(_ value: some BinaryInteger) {
        output.append(contentsOf: String(value).utf8)
    }

    func writeDouble(_ value: Double) throws {
        guard value.isFinite else {
            throw WireEncodingError(description: "\(value) is not valid JSON")
        }
        if let integer = Int64(exactly: value) {
            writeInteger(integer)
        } else {
            output.append(contentsOf: "\(value)".utf8)
        }
    }

    /// Writes `value` as its Encodable conformance would: members in the dictionary's order, numbers as
    /// ``writeInteger(_:)`` and ``writeDouble(_:)`` write them.
    func writeJSON(_ value: JSONValue) throws {
        switch value {
        case .null: writeNull()
        case .bool(let bool): writeBool(bool)
        case .integer(let integer): writeInteger(integer)
        case .number(let number): try writeDouble(number)
        case .string(let string): writeString(string)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                try writeJSON(element)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            output.append(UInt8(ascii: "{"))
            var first = true
            for (key, member) in members {
                if !first { output.append(UInt8(ascii: ",")) }
                first = false
                writeString(key)
                output.append(UInt8(ascii: ":"))
                try writeJSON(member)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    /// Writes `result` as its synthesized `Encodable` conformance would: members in declaration order, the absent
    /// optional ones left out, an account's claims as ``writeJSON(_:)`` writes them.
    func writeTokenResult(_ result: TokenResult) throws {
        output.append(UInt8(ascii: "{"))
        writeMember(#""accessToken":"#, result.accessToken.reveal())
        writeMember(#","accessTokenType":"#, result.accessTokenType)
        writeMember(#","expiresOn":"#, result.expiresOn)
        writeMember(#","extendedExpiresOn":"#, result.extendedExpiresOn)
        writeMember(#","refreshOn":"#, result.refreshOn)
        writeKey(#","grantedScopes":["#)
        for (index, scope) in result.grantedScopes.enumerated() {
            if index > 0 { output.append(UInt8(ascii: ",")) }
            writeString(scope)
        }
        output.append(UInt8(ascii: "]"))
        writeMember(#","idToken":"#, result.idToken?.reveal())
        writeMember(#","clientInfo":"#, result.clientInfo)
        let account = result.account
        writeMember(#","account":{"identifier":"#, account.identifier)
        writeMember(#","username":"#, account.username)
        writeMember(#","environment":"#, account.environment)
        writeMember(#","realm":"#, account.realm)
        writeMember(#","localAccountId":"#, account.localAccountId)
        writeMember(#","name":"#, account.name)
        writeMember(#","accountSource":"#, account.accountSource)
        if let accountClaims = account.accountClaims {
            writeKey(#","accountClaims":"#)
            try writeJSON(.object(accountClaims))
        }
        output.append(UInt8(ascii: "}"))
        writeMember(#","tokenSource":"#, result.tokenSource.rawValue)
        writeMember(#","correlationId":"#, result.correlationId)
        output.append(UInt8(ascii: "}"))
    }

    /// Writes a token answer as `Response` and `AcquireTokenResult` encode themselves: `jsonrpc`, `id` (`null` when
    /// nil), then the result, the token result written as ``writeTokenResult(_:)`` writes it.
    func writeTokenAnswer(_ response: Response<AcquireTokenResult>) throws {
        writeKey(#"{"jsonrpc":"#)
        writeString(response.jsonrpc)
        writeKey(#","id":"#)
        switch response.id {
        case .number(let number): writeInteger(number)
        case .string(let string): writeString(string)
        case nil: writeNull()
        }
        writeKey(#","result":{"brokerTokenResponse":"#)
        try writeTokenResult(response.result.brokerTokenResponse)
        writeKey("}}")
    }

    /// Appends `key` (with its comma, and what opens its value when written together) and the string, if any.
    private func writeMember(_ key: StaticString, _ value: String?) {
        guard let value else { return }
        writeKey(key)
        writeString(value)
    }

    /// Appends `key` and the integer, if any.
    private func writeMember(_ key: StaticString, _ value: Int64?) {
        guard let value else { return }
        writeKey(key)
        writeInteger(value)
    }

    /// Appends the bytes of a member's key as written in the source: its comma, quotes and colon.
    private func writeKey(_ key: StaticString) {
        key.withUTF8Buffer { output.append(contentsOf: $0) }
    }

    func writeNull() {
        output.append(contentsOf: Self.nullBytes)
    }

    func writeBool(_ value: Bool) {
        output.append(contentsOf: value ? Self.trueBytes : Self.falseBytes)
    }

    func writeString(_ string: String) {
        // One access to `output` for the whole string: appending inside the loop would pay a dynamic
        // exclusivity check per append.
        WireEncoder.appendString(string, to: &output)
    }

    private static let trueBytes = Array("true".utf8)
    private static let falseBytes = Array("false".utf8)
    private static let nullBytes = Array("null".utf8)
}

/// The `Encoder` handed to one value's `encode(to:)`.
private final class StreamEncoder: Encoder {
    let state: StreamState
    let depth: Int
    /// Not tracked: building paths costs an allocation per member, and nothing reads them.
    var codingPath: [any CodingKey] { [] }
    let userInfo: [CodingUserInfoKey: Any] = [:]
    var wroteSomething = false

    init(state: StreamState, depth: Int) {
        self.state = state
        self.depth = depth
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if !wroteSomething {
            wroteSomething = true
            state.openContainer(at: depth + 1, opener: UInt8(ascii: "{"), closer: UInt8(ascii: "}"))
        }
        return KeyedEncodingContainer(StreamKeyedContainer<Key>(state: state, depth: depth + 1))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if !wroteSomething {
            wroteSomething = true
            state.openContainer(at: depth + 1, opener: UInt8(ascii: "["), closer: UInt8(ascii: "]"))
        }
        return StreamUnkeyedContainer(state: state, depth: depth + 1)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        wroteSomething = true
        return StreamSingleValueContainer(state: state, depth: depth)
    }
}

private struct StreamKeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let state: StreamState
    let depth: Int
    var codingPath: [any CodingKey] { [] }

    mutating func encodeNil(forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        state.writeNull()
    }

    mutating func encode(_ value: Bool, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        state.writeBool(value)
    }

    mutating func encode(_ value: String, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        state.writeString(value)
    }

    mutating func encode(_ value: Int, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        state.writeInteger(value)
    }

    mutating func encode(_ value: Int64, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        state.writeInteger(value)
    }

    mutating func encode(_ value: Double, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        try state.writeDouble(value)
    }

    mutating func encode(_ value: Int8, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        state.writeInteger(value)
    }

    mutating func encode(_ value: Int16, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        state.writeInteger(value)
    }

    mutating func encode(_ value: Int32, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        state.writeInteger(value)
    }

    mutating func encode(_ value: UInt, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        state.writeInteger(value)
    }

    mutating func encode(_ value: UInt8, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        state.writeInteger(value)
    }

    mutating func encode(_ value: UInt16, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        state.writeInteger(value)
    }

    mutating func encode(_ value: UInt32, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        state.writeInteger(value)
    }

    mutating func encode(_ value: UInt64, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        state.writeInteger(value)
    }

    mutating func encode(_ value: Float, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        try state.writeDouble(Double(value))
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        state.beginMember(at: depth, key: key.stringValue)
        try state.encodeValue(value, depth: depth)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type,
        forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
        state.beginMember(at: depth, key: key.stringValue)
        state.openContainer(at: depth + 1, opener: UInt8(ascii: "{"), closer: UInt8(ascii: "}"))
        return KeyedEncodingContainer(
            StreamKeyedContainer<NestedKey>(state: state, depth: depth + 1)
        )
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        state.beginMember(at: depth, key: key.stringValue)
        state.openContainer(at: depth + 1, opener: UInt8(ascii: "["), closer: UInt8(ascii: "]"))
        return StreamUnkeyedContainer(state: state, depth: depth + 1)
    }

    /// An encoder for the superclass's members, under the key `super`, as Foundation's encoder has it.
    mutating func superEncoder() -> any Encoder {
        state.beginMember(at: depth, key: "super")
        return state.encoderForPendingValue(depth: depth)
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        state.beginMember(at: depth, key: key.stringValue)
        return state.encoderForPendingValue(depth: depth)
    }
}

private struct StreamUnkeyedContainer: UnkeyedEncodingContainer {
    let state: StreamState
    let depth: Int
    var codingPath: [any CodingKey] { [] }
    private(set) var count = 0

    init(state: StreamState, depth: Int) {
        self.state = state
        self.depth = depth
    }

    mutating func encodeNil() throws {
        state.beginMember(at: depth, key: nil)
        state.writeNull()
        count += 1
    }

    mutating func encode(_ value: String) throws {
        state.beginMember(at: depth, key: nil)
        state.writeString(value)
        count += 1
    }

    mutating func encode(_ value: Int) throws {
        state.beginMember(at: depth, key: nil)
        state.writeInteger(value)
        count += 1
    }

    mutating func encode(_ value: Int64) throws {
        state.beginMember(at: depth, key: nil)
        state.writeInteger(value)
        count += 1
    }

    mutating func encode(_ value: Int8) throws {
        state.beginMember(at: depth, key: nil)
        state.writeInteger(value)
        count += 1
    }

    mutating func encode(_ value: Int16) throws {
        state.beginMember(at: depth, key: nil)
        state.writeInteger(value)
        count += 1
    }

    mutating func encode(_ value: Int32) throws {
        state.beginMember(at: depth, key: nil)
        state.writeInteger(value)
        count += 1
    }

    mutating func encode(_ value: UInt) throws {
        state.beginMember(at: depth, key: nil)
        state.writeInteger(value)
        count += 1
    }

    mutating func encode(_ value: UInt8) throws {
        state.beginMember(at: depth, key: nil)
        state.writeInteger(value)
        count += 1
    }

    mutating func encode(_ value: UInt16) throws {
        state.beginMember(at: depth, key: nil)
        state.writeInteger(value)
        count += 1
    }

    mutating func encode(_ value: UInt32) throws {
        state.beginMember(at: depth, key: nil)
        state.writeInteger(value)
        count += 1
    }

    mutating func encode(_ value: UInt64) throws {
        state.beginMember(at: depth, key: nil)
        state.writeInteger(value)
        count += 1
    }

    mutating func encode(_ value: Bool) throws {
        state.beginMember(at: depth, key: nil)
        state.writeBool(value)
        count += 1
    }

    mutating func encode(_ value: Double) throws {
        state.beginMember(at: depth, key: nil)
        try state.writeDouble(value)
        count += 1
    }

    mutating func encode(_ value: Float) throws {
        state.beginMember(at: depth, key: nil)
        try state.writeDouble(Double(value))
        count += 1
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        state.beginMember(at: depth, key: nil)
        try state.encodeValue(value, depth: depth)
        count += 1
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type
    ) -> KeyedEncodingContainer<NestedKey> {
        state.beginMember(at: depth, key: nil)
        state.openContainer(at: depth + 1, opener: UInt8(ascii: "{"), closer: UInt8(ascii: "}"))
        defer { count += 1 }
        return KeyedEncodingContainer(
            StreamKeyedContainer<NestedKey>(state: state, depth: depth + 1)
        )
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        state.beginMember(at: depth, key: nil)
        state.openContainer(at: depth + 1, opener: UInt8(ascii: "["), closer: UInt8(ascii: "]"))
        defer { count += 1 }
        return StreamUnkeyedContainer(state: state, depth: depth + 1)
    }

    /// An encoder for the next element.
    mutating func superEncoder() -> any Encoder {
        state.beginMember(at: depth, key: nil)
        return state.encoderForPendingValue(depth: depth)
    }
}

private struct StreamSingleValueContainer: SingleValueEncodingContainer {
    let state: StreamState
    let depth: Int
    var codingPath: [any CodingKey] { [] }

    mutating func encodeNil() throws {
        state.writeNull()
    }

    mutating func encode(_ value: Bool) throws {
        state.writeBool(value)
    }

    mutating func encode(_ value: String) throws {
        state.writeString(value)
    }

    mutating func encode(_ value: Int) throws {
        state.writeInteger(value)
    }

    mutating func encode(_ value: Int64) throws {
        state.writeInteger(value)
    }

    mutating func encode(_ value: Double) throws {
        try state.writeDouble(value)
    }

    mutating func encode(_ value: Int8) throws {
        state.writeInteger(value)
    }

    mutating func encode(_ value: Int16) throws {
        state.writeInteger(value)
    }

    mutating func encode(_ value: Int32) throws {
        state.writeInteger(value)
    }

    mutating func encode(_ value: UInt) throws {
        state.writeInteger(value)
    }

    mutating func encode(_ value: UInt8) throws {
        state.writeInteger(value)
    }

    mutating func encode(_ value: UInt16) throws {
        state.writeInteger(value)
    }

    mutating func encode(_ value: UInt32) throws {
        state.writeInteger(value)
    }

    mutating func encode(_ value: UInt64) throws {
        state.writeInteger(value)
    }

    mutating func encode(_ value: Float) throws {
        try state.writeDouble(Double(value))
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try state.encodeValue(value, depth: depth)
    }
}
