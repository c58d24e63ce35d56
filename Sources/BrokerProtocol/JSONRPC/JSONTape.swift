#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A strictly parsed JSON document: one flat array of nodes over the original bytes.
///
/// Strict means: RFC 8259 grammar only, UTF-8 validated, duplicate object keys refused, nesting bounded. It is
/// the parser behind the protocol's ``WireDecoder`` and behind cache imports, where a duplicate key must be an
/// error rather than a silent "last one wins".
struct JSONTape {
    enum Kind: UInt8 {
        case null, `true`, `false`, number, string, array, object
    }

    /// One value.
    ///
    /// Containers are followed by their members (for objects: key, value, key, value, …).
    struct Node {
        var kind: Kind
        /// Strings: whether the literal contains a backslash escape.
        var escaped: Bool
        /// Byte range of the literal (strings: without the quotes).
        var start: Int32
        var end: Int32
        /// Index of the node after this value and all its members.
        var next: Int32
        /// Members of an array, key/value pairs of an object.
        var count: Int32
    }

    let bytes: [UInt8]
    private(set) var nodes: [Node] = []
    private let limits: JSONLimits

    /// The deepest nesting accepted; deeper documents are refused instead of recursing without bound.
    static let maximumDepth = 128

    /// Parses `bytes` as one JSON value (surrounding whitespace allowed), within `limits`.
    ///
    /// Linear in the size of the document: duplicate keys are found through a hash of each key's unescaped bytes,
    /// never by comparing each key with all earlier ones.
    init(_ bytes: [UInt8], limits: JSONLimits = .document) throws(JSONSyntaxError) {
        self.bytes = bytes
        self.limits = limits
        nodes.reserveCapacity(min(max(8, bytes.count / 12), limits.maximumNodes))
        var position = 0
        try parseValue(&position, depth: 0)
        skipWhitespace(&position)
        guard position == bytes.count else {
            throw JSONSyntaxError("unexpected data after the JSON value", at: position)
        }
    }

    // MARK: Reading values

    /// The string a string node stands for.
    func string(at index: Int) throws(JSONSyntaxError) -> String {
        let node = nodes[index]
        if !node.escaped {
            return bytes.withUnsafeBufferPointer { buffer in
                String(decoding: UnsafeBufferPointer(rebasing: buffer[Int(node.start)..<Int(node.end)]), as: UTF8.self)
            }
        }
        return try unescape(Int(node.start)..<Int(node.end))
    }

    /// Whether a string node equals `key` (without building a String when it has no escapes).
    func string(at index: Int, equals key: String) -> Bool {
        let node = nodes[index]
        if node.escaped { return (try? string(at: index)) == key }
        var key = key
        return key.withUTF8 { keyBytes in
            let length = Int(node.end - node.start)
            guard keyBytes.count == length else { return false }
            return bytes.withUnsafeBufferPointer { buffer in
                UnsafeBufferPointer(rebasing: buffer[Int(node.start)..<Int(node.end)]).elementsEqual(keyBytes)
            }
        }
    }

    /// The literal text of a number node.
    func numberText(at index: Int) -> Substring {
        let node = nodes[index]
        return Substring(decoding: bytes[Int(node.start)..<Int(node.end)], as: UTF8.self)
    }

    /// An integer number node's value, if it is an integer in range.
    func integer(at index: Int) -> Int64? {
        let node = nodes[index]
        var value: Int64 = 0
        var position = Int(node.start)
        let negative = bytes[position] == UInt8(ascii: "-")
        if negative { position += 1 }
        while position < Int(node.end) {
            let byte = bytes[position]
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"),
                let next = Self.appending(digit: byte, to: value, negative: negative)
            else { return nil }
            value = next
            position += 1
        }
        return value
    }

    /// `value` with one more decimal digit (the ASCII `digit`) after it, away from zero in the number's sign; nil
    /// past Int64's range.
    static func appending(digit: UInt8, to value: Int64, negative: Bool) -> Int64? {
        let digit = Int64(digit - UInt8(ascii: "0"))
        let (times, overflow1) = value.multipliedReportingOverflow(by: 10)
        let (sum, overflow2) =
            negative ? times.subtractingReportingOverflow(digit) : times.addingReportingOverflow(digit)
        return overflow1 || overflow2 ? nil : sum
    }

    /// The value of the member `key` of the object node at `index`; nil when it has none (or is no object).
    func member(of index: Int, named key: String) -> Int? {
        guard nodes[index].kind == .object else { return nil }
        for member in members(of: index) where string(at: member.key, equals: key) { return member.value }
        return nil
    }

    /// The member indexes of a container node: values for arrays, (key, value) index pairs for objects.
    func members(of index: Int) -> MemberSequence {
        MemberSequence(
            tape: self,
            first: index + 1,
            count: Int(nodes[index].count),
            isObject: nodes[index].kind == .object
        )
    }

    struct MemberSequence: Sequence, IteratorProtocol {
        let tape: JSONTape
        var position: Int
        var remaining: Int
        let isObject: Bool

        init(tape: JSONTape, first: Int, count: Int, isObject: Bool) {
            self.tape = tape
            position = first
            remaining = count
            self.isObject = isObject
        }

        /// For objects: (key index, value index); for arrays: (value index, value index).
        mutating func next() -> (key: Int, value: Int)? {
            guard remaining > 0 else { return nil }
            remaining -= 1
            if isObject {
                let key = position
                let value = position + 1
                position = Int(tape.nodes[value].next)
                return (key, value)
            }
            let value = position
            position = Int(tape.nodes[value].next)
            return (value, value)
        }
    }

    // MARK: Parsing

    private func skipWhitespace(_ position: inout Int) {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private mutating func parseValue(_ position: inout Int, depth: Int) throws(JSONSyntaxError) {
        skipWhitespace(&position)
        guard position < bytes.count else { throw JSONSyntaxError("unexpected end of the document", at: position) }
        switch bytes[position] {
        case UInt8(ascii: "{"): try parseObject(&position, depth: depth + 1)
        case UInt8(ascii: "["): try parseArray(&position, depth: depth + 1)
        case UInt8(ascii: "\""):
            let (start, end, escaped) = try scanString(&position)
            try append(.string, start: start, end: end, escaped: escaped)
        case UInt8(ascii: "t"): try literal("true", .true, &position)
        case UInt8(ascii: "f"): try literal("false", .false, &position)
        case UInt8(ascii: "n"): try literal("null", .null, &position)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try parseNumber(&position)
        case 0xEF where bytes[position...].starts(with: [0xEF, 0xBB, 0xBF]):
            throw JSONSyntaxError("a UTF-8 byte-order mark, which JSON texts on the wire must not have", at: position)
        default: throw JSONSyntaxError("unexpected character", at: position)
        }
    }

    private mutating func append(
        _ kind: Kind,
        start: Int,
        end: Int,
        escaped: Bool = false
    ) throws(JSONSyntaxError) {
        guard nodes.count < limits.maximumNodes else {
            throw JSONSyntaxError("more than \(limits.maximumNodes) values in one document", at: start)
        }
        nodes.append(
            Node(
                kind: kind,
                escaped: escaped,
                start: Int32(start),
                end: Int32(end),
                next: Int32(nodes.count + 1),
                count: 0
            )
        )
    }

    private mutating func literal(_ word: StaticString, _ kind: Kind, _ position: inout Int) throws(JSONSyntaxError) {
        let length = word.utf8CodeUnitCount
        guard position + length <= bytes.count,
            word.withUTF8Buffer({ Array($0) }) == Array(bytes[position..<position + length])
        else { throw JSONSyntaxError("invalid literal", at: position) }
        try append(kind, start: position, end: position + length)
        position += length
    }

    private mutating func parseNumber(_ position: inout Int) throws(JSONSyntaxError) {
        let start = position
        func digits(_ position: inout Int) -> Int {
            let first = position
            while position < bytes.count, bytes[position] >= UInt8(ascii: "0"), bytes[position] <= UInt8(ascii: "9") {
                position += 1
            }
            return position - first
        }
        if bytes[position] == UInt8(ascii: "-") { position += 1 }
        guard position < bytes.count else { throw JSONSyntaxError("invalid number", at: start) }
        var integerDigits = 1
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else {
            integerDigits = digits(&position)
            guard integerDigits > 0 else { throw JSONSyntaxError("invalid number", at: start) }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            position += 1
            guard digits(&position) > 0 else { throw JSONSyntaxError("invalid number", at: start) }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") {
                position += 1
            }
            guard digits(&position) > 0 else { throw JSONSyntaxError("invalid number", at: start) }
            try checkRange(start: start, end: position)
        } else if integerDigits > 300 {
            try checkRange(start: start, end: position)
        }
        try append(.number, start: start, end: position)
    }

    /// Refuses a number beyond a 64-bit float's range (`1e400`), which would read as infinity and could not be
    /// written back; only numbers with an exponent or hundreds of digits can be.
    private func checkRange(start: Int, end: Int) throws(JSONSyntaxError) {
        let text = String(decoding: bytes[start..<end], as: UTF8.self)
        guard let value = Double(text), value.isFinite else {
            throw JSONSyntaxError("a number beyond the range of a 64-bit float", at: start)
        }
    }

    /// Scans a string literal at `position` (on the opening quote); validates escapes and UTF-8.
    private func scanString(_ position: inout Int) throws(JSONSyntaxError) -> (start: Int, end: Int, escaped: Bool) {
        let open = position
        position += 1
        let start = position
        var escaped = false
        var asciiOnly = true
        while position < bytes.count {
            position = plainRun(from: position)
            guard position < bytes.count else { break }
            let byte = bytes[position]
            switch byte {
            case UInt8(ascii: "\""):
                let end = position
                position += 1
                if !asciiOnly {
                    let valid = bytes.withUnsafeBufferPointer { buffer in
                        String(validating: UnsafeBufferPointer(rebasing: buffer[start..<end]), as: UTF8.self) != nil
                    }
                    guard valid else { throw JSONSyntaxError("a string is not valid UTF-8", at: start) }
                }
                return (start, end, escaped)
            case UInt8(ascii: "\\"):
                escaped = true
                position += 1
                guard position < bytes.count else { break }
                switch bytes[position] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                    UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    position += 1
                case UInt8(ascii: "u"):
                    guard position + 4 < bytes.count,
                        bytes[position + 1...position + 4].allSatisfy({ Self.hexValue($0) != nil })
                    else { throw JSONSyntaxError("invalid \\u escape", at: position) }
                    position += 5
                default:
                    throw JSONSyntaxError("invalid escape", at: position)
                }
            case 0..<0x20:
                throw JSONSyntaxError("a control character inside a string", at: position)
            default:
                if byte >= 0x80 { asciiOnly = false }
                position += 1
            }
        }
        throw JSONSyntaxError("unterminated string", at: open)
    }

    /// The first position at or after `position` that holds a quote, a backslash, a control character or a byte
    /// of a non-ASCII character (or the end): every byte before it stands for itself in a string.
    private func plainRun(from position: Int) -> Int {
        bytes.withUnsafeBytes { PlainBytes.end(in: $0, from: position, nonASCII: true) }
    }

    private mutating func parseArray(_ position: inout Int, depth: Int) throws(JSONSyntaxError) {
        guard depth <= Self.maximumDepth else {
            throw JSONSyntaxError("nested deeper than \(Self.maximumDepth) arrays and objects", at: position)
        }
        let index = nodes.count
        try append(.array, start: position, end: position)
        position += 1
        var count: Int32 = 0
        skipWhitespace(&position)
        if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
            position += 1
        } else {
            while true {
                try parseValue(&position, depth: depth)
                count += 1
                skipWhitespace(&position)
                guard position < bytes.count else { throw JSONSyntaxError("unterminated array", at: position) }
                if bytes[position] == UInt8(ascii: ",") {
                    position += 1
                    continue
                }
                guard bytes[position] == UInt8(ascii: "]") else {
                    throw JSONSyntaxError("expected , or ]", at: position)
                }
                position += 1
                break
            }
        }
        nodes[index].count = count
        nodes[index].end = Int32(position)
        nodes[index].next = Int32(nodes.count)
    }

    private mutating func parseObject(_ position: inout Int, depth: Int) throws(JSONSyntaxError) {
        guard depth <= Self.maximumDepth else {
            throw JSONSyntaxError("nested deeper than \(Self.maximumDepth) arrays and objects", at: position)
        }
        let index = nodes.count
        try append(.object, start: position, end: position)
        position += 1
        var keys = KeyIndex(object: index)
        skipWhitespace(&position)
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
        } else {
            while true {
                skipWhitespace(&position)
                guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else {
                    throw JSONSyntaxError("expected a quoted key", at: position)
                }
                guard keys.count < limits.maximumKeysPerObject else {
                    throw JSONSyntaxError("more than \(limits.maximumKeysPerObject) keys in one object", at: position)
                }
                let keyIndex = nodes.count
                let (start, end, escaped) = try scanString(&position)
                try append(.string, start: start, end: end, escaped: escaped)
                if try keys.insert(keyIndex, in: self) == false {
                    throw JSONSyntaxError("duplicate key \"\(try string(at: keyIndex).prefix(64))\"", at: start)
                }
                skipWhitespace(&position)
                guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else {
                    throw JSONSyntaxError("expected :", at: position)
                }
                position += 1
                try parseValue(&position, depth: depth)
                skipWhitespace(&position)
                guard position < bytes.count else { throw JSONSyntaxError("unterminated object", at: position) }
                if bytes[position] == UInt8(ascii: ",") {
                    position += 1
                    continue
                }
                guard bytes[position] == UInt8(ascii: "}") else {
                    throw JSONSyntaxError("expected , or }", at: position)
                }
                position += 1
                break
            }
        }
        nodes[index].count = Int32(keys.count)
        nodes[index].end = Int32(position)
        nodes[index].next = Int32(nodes.count)
    }

    /// The keys of one object so far, for finding a duplicate in constant time per key.
    ///
    /// Small objects (the usual) compare each new key with the few before it, found on the tape itself (each key's
    /// value says where the next key is), so an object costs no allocation; from ``linearLimit`` keys on, keys are
    /// found through a hash of their unescaped bytes (Swift's `Hasher` is seeded per process, so a peer cannot aim
    /// for collisions), and compared only with the keys of the same hash.
    private struct KeyIndex {
        static let linearLimit = 16
        /// The object's first key: the node after the object's own.
        private let firstKey: Int
        private(set) var count = 0
        private var byHash: [Int: [Int]] = [:]

        init(object: Int) {
            firstKey = object + 1
        }

        /// Adds the key node at `index` (its value not parsed yet, every earlier member's complete); false when the
        /// object already has an equal key.
        mutating func insert(_ index: Int, in tape: JSONTape) throws(JSONSyntaxError) -> Bool {
            if count < Self.linearLimit {
                var key = firstKey
                while key != index {
                    if try tape.keysEqual(key, index) { return false }
                    key = Int(tape.nodes[key + 1].next)
                }
                if count + 1 == Self.linearLimit {
                    key = firstKey
                    while true {
                        byHash[try tape.keyHash(key), default: []].append(key)
                        if key == index { break }
                        key = Int(tape.nodes[key + 1].next)
                    }
                }
            } else {
                let hash = try tape.keyHash(index)
                for other in byHash[hash] ?? [] where try tape.keysEqual(other, index) { return false }
                byHash[hash, default: []].append(index)
            }
            count += 1
            return true
        }
    }

    /// The bytes a string node stands for, escapes decoded.
    private func unescapedBytes(at index: Int) throws(JSONSyntaxError) -> [UInt8] {
        let node = nodes[index]
        guard node.escaped else { return Array(bytes[Int(node.start)..<Int(node.end)]) }
        return Array(try unescape(Int(node.start)..<Int(node.end)).utf8)
    }

    /// A hash of a key's unescaped bytes.
    fileprivate func keyHash(_ index: Int) throws(JSONSyntaxError) -> Int {
        var hasher = Hasher()
        let node = nodes[index]
        if node.escaped {
            let decoded = try unescapedBytes(at: index)
            decoded.withUnsafeBytes { hasher.combine(bytes: $0) }
        } else {
            bytes.withUnsafeBytes { all in
                hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: all[Int(node.start)..<Int(node.end)]))
            }
        }
        return hasher.finalize()
    }

    /// Whether two key nodes name the same key once escapes are decoded (`"a"` and `"\u0061"` do).
    fileprivate func keysEqual(_ first: Int, _ second: Int) throws(JSONSyntaxError) -> Bool {
        let one = nodes[first]
        let two = nodes[second]
        if !one.escaped, !two.escaped {
            guard one.end - one.start == two.end - two.start else { return false }
            return bytes[Int(one.start)..<Int(one.end)].elementsEqual(bytes[Int(two.start)..<Int(two.end)])
        }
        return try unescapedBytes(at: first) == unescapedBytes(at: second)
    }

    private func unescape(_ range: Range<Int>) throws(JSONSyntaxError) -> String {
        var scalars = String.UnicodeScalarView()
        var output: [UInt8] = []
        output.reserveCapacity(range.count)
        var position = range.lowerBound
        func flushBytes() {
            scalars.append(contentsOf: String(decoding: output, as: UTF8.self).unicodeScalars)
            output.removeAll(keepingCapacity: true)
        }
        while position < range.upperBound {
            let byte = bytes[position]
            guard byte == UInt8(ascii: "\\") else {
                output.append(byte)
                position += 1
                continue
            }
            let code = bytes[position + 1]
            position += 2
            switch code {
            case UInt8(ascii: "b"): output.append(0x08)
            case UInt8(ascii: "f"): output.append(0x0C)
            case UInt8(ascii: "n"): output.append(0x0A)
            case UInt8(ascii: "r"): output.append(0x0D)
            case UInt8(ascii: "t"): output.append(0x09)
            case UInt8(ascii: "u"):
                var unit = hex4(at: position)
                position += 4
                if (0xD800...0xDBFF).contains(unit) {
                    // A high surrogate must be followed by an escaped low surrogate.
                    guard position + 6 <= range.upperBound, bytes[position] == UInt8(ascii: "\\"),
                        bytes[position + 1] == UInt8(ascii: "u")
                    else { throw JSONSyntaxError("unpaired surrogate in a \\u escape", at: position) }
                    let low = hex4(at: position + 2)
                    guard (0xDC00...0xDFFF).contains(low) else {
                        throw JSONSyntaxError("unpaired surrogate in a \\u escape", at: position)
                    }
                    position += 6
                    unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(unit) {
                    throw JSONSyntaxError("unpaired surrogate in a \\u escape", at: position)
                }
                guard let scalar = Unicode.Scalar(unit) else {
                    throw JSONSyntaxError("invalid \\u escape", at: position)
                }
                flushBytes()
                scalars.append(scalar)
            default: output.append(code)
            }
        }
        flushBytes()
        return String(scalars)
    }

    private func hex4(at position: Int) -> UInt32 {
        var value: UInt32 = 0
        for offset in 0..<4 { value = value << 4 | UInt32(Self.hexValue(bytes[position + offset]) ?? 0) }
        return value
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// How much one document may hold: bounds that keep a hostile document's cost proportional to its size, and small.
public struct JSONLimits: Sendable, Hashable {
    /// The most values (of any kind, keys included) in the document.
    public var maximumNodes: Int
    /// The most keys in one object.
    public var maximumKeysPerObject: Int

    /// Creates limits.
    public init(maximumNodes: Int, maximumKeysPerObject: Int) {
        self.maximumNodes = maximumNodes
        self.maximumKeysPerObject = maximumKeysPerObject
    }

    /// For a request frame (at most 1 MiB): far above any request the protocol defines.
    public static let request = JSONLimits(maximumNodes: 1 << 16, maximumKeysPerObject: 1 << 12)

    /// For documents: imported caches, answers (up to 64 MiB), stored entries.
    public static let document = JSONLimits(maximumNodes: 1 << 23, maximumKeysPerObject: 1 << 20)
}

/// Why a document is not (strict) JSON: what, and at which byte.
///
/// Never quotes the document's values.
public struct JSONSyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong.
    public let reason: String
    /// The byte offset where it was found.
    public let offset: Int

    init(_ reason: String, at offset: Int) {
        self.reason = reason
        self.offset = offset
    }

    /// `reason at byte N`.
    public var description: String {
        "\(reason) at byte \(offset)"
    }
}
