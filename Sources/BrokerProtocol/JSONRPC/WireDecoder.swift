#if canImport(FoundationEssentials)
package import FoundationEssentials
#else
package import Foundation
#endif

/// Decodes `Decodable` values from strict JSON (see ``JSONTape``): the protocol's wire decoder.
///
/// Errors are `DecodingError`s with coding paths, as with Foundation's `JSONDecoder`; a document that is not
/// JSON at all gives `DecodingError.dataCorrupted` with an empty path and a ``JSONSyntaxError`` underneath.
/// Integers must be integral and in range; unknown keys are ignored.
package struct WireDecoder: Sendable {
    /// Values handed to every `init(from:)` through `decoder.userInfo`.
    package var userInfo: [CodingUserInfoKey: any Sendable] = [:]
    /// How much one document may hold.
    package var limits: JSONLimits

    /// Creates a decoder for documents within `limits`.
    package init(limits: JSONLimits = .document) {
        self.limits = limits
    }

    /// Decodes a `T` from `data`.
    package func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        try decode(type, from: Array(data))
    }

    /// Decodes a `T` from `bytes`.
    package func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        let tape: JSONTape
        do {
            tape = try JSONTape(bytes, limits: limits)
        } catch {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(codingPath: [], debugDescription: error.description, underlyingError: error)
            )
        }
        let state = DecodingState(tape: tape, userInfo: userInfo)
        return try TapeDecoder(state: state, node: 0, codingPath: []).decodeValue(T.self)
    }
}

extension JSONValue {
    /// Parses a whole document strictly (duplicate keys, bad UTF-8 and excessive nesting are errors).
    ///
    /// Two keys of one object that are different bytes but the same Swift `String` (`é` composed, and `e` with a
    /// combining accent: equal after Unicode normalization) are refused too: a dictionary would keep only one, and
    /// an entry would be lost without a word.
    public static func parse(_ bytes: [UInt8], limits: JSONLimits = .document) throws(JSONSyntaxError) -> JSONValue {
        let tape = try JSONTape(bytes, limits: limits)
        return try value(at: 0, in: tape)
    }

    fileprivate static func value(at index: Int, in tape: JSONTape) throws(JSONSyntaxError) -> JSONValue {
        switch tape.nodes[index].kind {
        case .null: return .null
        case .true: return .bool(true)
        case .false: return .bool(false)
        case .string: return .string(try tape.string(at: index))
        case .number:
            if let integer = tape.integer(at: index) { return .integer(integer) }
            return .number(Double(tape.numberText(at: index)) ?? .nan)
        case .array:
            var array: [JSONValue] = []
            array.reserveCapacity(Int(tape.nodes[index].count))
            for member in tape.members(of: index) { array.append(try value(at: member.value, in: tape)) }
            return .array(array)
        case .object:
            // Not `reserveCapacity`, which the standard library runs unspecialized: 1,200 instructions an object.
            var object = [String: JSONValue](minimumCapacity: Int(tape.nodes[index].count))
            for member in tape.members(of: index) {
                let key = try tape.string(at: member.key)
                guard object.updateValue(try value(at: member.value, in: tape), forKey: key) == nil else {
                    throw JSONSyntaxError(
                        "two keys equal after Unicode normalization (\"\(key.prefix(64))\"), which would merge",
                        at: Int(tape.nodes[member.key].start)
                    )
                }
            }
            return .object(object)
        }
    }
}

// MARK: - Decoder over the tape

private final class DecodingState {
    let tape: JSONTape
    let userInfo: [CodingUserInfoKey: Any]

    init(tape: JSONTape, userInfo: [CodingUserInfoKey: any Sendable]) {
        self.tape = tape
        self.userInfo = userInfo
    }
}

private struct TapeDecoder: Decoder {
    let state: DecodingState
    let node: Int
    let codingPath: [any CodingKey]

    var userInfo: [CodingUserInfoKey: Any] { state.userInfo }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        try expect(.object, "a keyed container")
        return KeyedDecodingContainer(TapeKeyedContainer<Key>(state: state, node: node, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try expect(.array, "an unkeyed container")
        return TapeUnkeyedContainer(state: state, node: node, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        TapeSingleValueContainer(state: state, node: node, codingPath: codingPath)
    }

    private func expect(_ kind: JSONTape.Kind, _ what: String) throws {
        let actual = state.tape.nodes[node].kind
        guard actual == kind else {
            if actual == .null {
                throw DecodingError.valueNotFound(
                    kind == .object ? [String: Any].self : [Any].self,
                    DecodingError.Context(codingPath: codingPath, debugDescription: "expected \(what), found null")
                )
            }
            throw DecodingError.typeMismatch(
                kind == .object ? [String: Any].self : [Any].self,
                DecodingError.Context(codingPath: codingPath, debugDescription: "expected \(what)")
            )
        }
    }
}

/// Typed reads of one node, shared by the three container kinds.
///
/// The coding path is built only for errors and nested decoders: building it for every field would cost an allocation
/// each.
private struct NodeReader {
    let tape: JSONTape
    let node: Int
    let parentPath: [any CodingKey]
    let key: (any CodingKey)?

    init(tape: JSONTape, node: Int, parentPath: [any CodingKey], key: (any CodingKey)?) {
        self.tape = tape
        self.node = node
        self.parentPath = parentPath
        self.key = key
    }

    var codingPath: [any CodingKey] {
        guard let key else { return parentPath }
        return parentPath + [key]
    }

    var kind: JSONTape.Kind { tape.nodes[node].kind }

    func mismatch(_ type: Any.Type) -> DecodingError {
        if kind == .null {
            return DecodingError.valueNotFound(
                type,
                DecodingError.Context(codingPath: codingPath, debugDescription: "found null")
            )
        }
        return DecodingError.typeMismatch(
            type,
            DecodingError.Context(codingPath: codingPath, debugDescription: "found a JSON \(kind)")
        )
    }

    func bool() throws -> Bool {
        switch kind {
        case .true: return true
        case .false: return false
        default: throw mismatch(Bool.self)
        }
    }

    func string() throws -> String {
        guard kind == .string else { throw mismatch(String.self) }
        do {
            return try tape.string(at: node)
        } catch {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(
                    codingPath: codingPath,
                    debugDescription: error.description,
                    underlyingError: error
                )
            )
        }
    }

    func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        guard kind == .number else { throw mismatch(type) }
        guard let value = tape.integer(at: node), let exact = T(exactly: value) else {
            let text = tape.numberText(at: node)
            let reason =
                text.contains(where: { $0 == "." || $0 == "e" || $0 == "E" })
                ? "expected an integer, written without a fraction or an exponent"
                : "expected an integer from \(T.min) to \(T.max)"
            throw DecodingError.dataCorrupted(DecodingError.Context(codingPath: codingPath, debugDescription: reason))
        }
        return exact
    }

    func double() throws -> Double {
        guard kind == .number, let value = Double(tape.numberText(at: node)) else { throw mismatch(Double.self) }
        return value
    }
}

private struct TapeKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let state: DecodingState
    let node: Int
    let codingPath: [any CodingKey]

    var allKeys: [Key] {
        state.tape.members(of: node).compactMap { member in
            (try? state.tape.string(at: member.key)).flatMap { Key(stringValue: $0) }
        }
    }

    func contains(_ key: Key) -> Bool {
        valueIndex(for: key) != nil
    }

    private func valueIndex(for key: Key) -> Int? {
        state.tape.member(of: node, named: key.stringValue)
    }

    private func reader(for key: Key) throws -> NodeReader {
        guard let index = valueIndex(for: key) else {
            throw DecodingError.keyNotFound(
                key,
                DecodingError.Context(codingPath: codingPath, debugDescription: "no value for \"\(key.stringValue)\"")
            )
        }
        return NodeReader(tape: state.tape, node: index, parentPath: codingPath, key: key)
    }

    func decodeNil(forKey key: Key) throws -> Bool {
        try reader(for: key).kind == .null
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try reader(for: key).bool() }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try reader(for: key).string() }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try reader(for: key).double() }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { Float(try reader(for: key).double()) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try reader(for: key).integer(type) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try reader(for: key).integer(type) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try reader(for: key).integer(type) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try reader(for: key).integer(type) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try reader(for: key).integer(type) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try reader(for: key).integer(type) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try reader(for: key).integer(type) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try reader(for: key).integer(type) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try reader(for: key).integer(type) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try reader(for: key).integer(type) }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        let reader = try reader(for: key)
        return try TapeDecoder(state: state, node: reader.node, codingPath: reader.codingPath).decodeValue(T.self)
    }

    /// Absent keys and `null` both read as nil, as with Foundation's decoder.
    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        guard let index = valueIndex(for: key), state.tape.nodes[index].kind != .null else { return nil }
        return try TapeDecoder(state: state, node: index, codingPath: codingPath + [key]).decodeValue(T.self)
    }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type,
        forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        let reader = try reader(for: key)
        return try TapeDecoder(state: state, node: reader.node, codingPath: reader.codingPath).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        let reader = try reader(for: key)
        return try TapeDecoder(state: state, node: reader.node, codingPath: reader.codingPath).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        throw DecodingError.dataCorrupted(
            DecodingError.Context(codingPath: codingPath, debugDescription: "superDecoder is not supported")
        )
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        try superDecoder()
    }
}

private struct TapeUnkeyedContainer: UnkeyedDecodingContainer {
    let state: DecodingState
    let codingPath: [any CodingKey]
    let count: Int?
    private(set) var currentIndex = 0
    private var position: Int

    init(state: DecodingState, node: Int, codingPath: [any CodingKey]) {
        self.state = state
        self.codingPath = codingPath
        count = Int(state.tape.nodes[node].count)
        position = node + 1
    }

    var isAtEnd: Bool {
        currentIndex >= (count ?? 0)
    }

    private mutating func nextReader<T>(_ type: T.Type) throws -> NodeReader {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                type,
                DecodingError.Context(codingPath: codingPath, debugDescription: "the array has no more elements")
            )
        }
        let reader = NodeReader(tape: state.tape, node: position, parentPath: codingPath, key: ArrayIndex(currentIndex))
        position = Int(state.tape.nodes[position].next)
        currentIndex += 1
        return reader
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, state.tape.nodes[position].kind == .null else { return false }
        position = Int(state.tape.nodes[position].next)
        currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try nextReader(type).bool() }
    mutating func decode(_ type: String.Type) throws -> String { try nextReader(type).string() }
    mutating func decode(_ type: Double.Type) throws -> Double { try nextReader(type).double() }
    mutating func decode(_ type: Int.Type) throws -> Int { try nextReader(type).integer(type) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try nextReader(type).integer(type) }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let reader = try nextReader(type)
        return try TapeDecoder(state: state, node: reader.node, codingPath: reader.codingPath).decodeValue(T.self)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type
    ) throws -> KeyedDecodingContainer<NestedKey> {
        let reader = try nextReader([String: Any].self)
        return try TapeDecoder(state: state, node: reader.node, codingPath: reader.codingPath).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let reader = try nextReader([Any].self)
        return try TapeDecoder(state: state, node: reader.node, codingPath: reader.codingPath).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        throw DecodingError.dataCorrupted(
            DecodingError.Context(codingPath: codingPath, debugDescription: "superDecoder is not supported")
        )
    }
}

private struct TapeSingleValueContainer: SingleValueDecodingContainer {
    let state: DecodingState
    let node: Int
    let codingPath: [any CodingKey]

    private var reader: NodeReader { NodeReader(tape: state.tape, node: node, parentPath: codingPath, key: nil) }

    func decodeNil() -> Bool { state.tape.nodes[node].kind == .null }
    func decode(_ type: Bool.Type) throws -> Bool { try reader.bool() }
    func decode(_ type: String.Type) throws -> String { try reader.string() }
    func decode(_ type: Double.Type) throws -> Double { try reader.double() }
    func decode(_ type: Float.Type) throws -> Float { Float(try reader.double()) }
    func decode(_ type: Int.Type) throws -> Int { try reader.integer(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try reader.integer(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try reader.integer(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try reader.integer(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try reader.integer(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try reader.integer(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try reader.integer(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try reader.integer(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try reader.integer(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try reader.integer(type) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try TapeDecoder(state: state, node: node, codingPath: codingPath).decodeValue(T.self)
    }
}

private struct ArrayIndex: CodingKey {
    let intValue: Int?
    let stringValue: String

    init(_ index: Int) {
        intValue = index
        stringValue = String(index)
    }

    init?(intValue: Int) {
        self.init(intValue)
    }

    init?(stringValue: String) {
        nil
    }
}

extension TapeDecoder {
    /// A `T` from this node: a `URL` from its string and `Data` from Base64, as Foundation's decoder reads them, a
    /// `JSONValue` straight from the tape; anything else by its own `init(from:)`.
    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        if T.self == JSONValue.self {
            // JSONValue's own init(from:) tries one kind after another, and each miss builds a DecodingError: a
            // cache of 10,000 tokens spent half its start-up there.
            do {
                if let value = try JSONValue.value(at: node, in: state.tape) as? T { return value }
            } catch {
                throw DecodingError.dataCorrupted(
                    DecodingError.Context(codingPath: codingPath, debugDescription: error.description)
                )
            }
        }
        if T.self == URL.self {
            let text = try singleValueContainer().decode(String.self)
            guard let url = URL(string: text) as? T else {
                throw DecodingError.dataCorrupted(
                    DecodingError.Context(codingPath: codingPath, debugDescription: "not a URL")
                )
            }
            return url
        }
        if T.self == Data.self {
            let text = try singleValueContainer().decode(String.self)
            guard let data = Data(base64Encoded: text) as? T else {
                throw DecodingError.dataCorrupted(
                    DecodingError.Context(codingPath: codingPath, debugDescription: "not Base64")
                )
            }
            return data
        }
        return try T(from: self)
    }
}
