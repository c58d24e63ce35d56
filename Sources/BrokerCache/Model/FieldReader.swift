import BrokerProtocol

/// Reads the known fields of an MSAL cache entry, leaving the unknown ones behind as `remaining`.
///
/// MSAL writes every value as a string (times as epoch seconds in strings); other SDKs sometimes write
/// numbers. Reading is lenient about that, writing always uses MSAL Python's form.
struct FieldReader {
    private var unread: [String: JSONValue]

    init(_ fields: [String: JSONValue]) {
        unread = fields
    }

    /// The fields not read, in storage of their own: the reader's copy keeps room for every field it started
    /// with, which each entry of the cache would otherwise hold on to (700 bytes a token, usually for nothing).
    var remaining: [String: JSONValue] {
        unread.isEmpty ? [:] : Dictionary(uniqueKeysWithValues: unread.map { ($0.key, $0.value) })
    }

    mutating func string(_ name: String) throws(EntryError) -> String? {
        guard let value = unread.removeValue(forKey: name) else { return nil }
        switch value {
        case .string(let string): return string
        case .null: return nil
        case .integer(let number): return String(number)
        default: throw EntryError("\(name) must be a string")
        }
    }

    mutating func requiredString(_ name: String) throws(EntryError) -> String {
        guard let value = try string(name), !value.isEmpty else { throw EntryError("\(name) is missing") }
        return value
    }

    mutating func bool(_ name: String) throws(EntryError) -> Bool? {
        guard let value = unread.removeValue(forKey: name) else { return nil }
        switch value {
        case .bool(let flag): return flag
        case .null: return nil
        default: throw EntryError("\(name) must be true or false")
        }
    }

    /// A count of seconds written as a number or a string of digits.
    mutating func seconds(_ name: String) throws(EntryError) -> Int64? {
        guard let value = unread.removeValue(forKey: name) else { return nil }
        switch value {
        case .null: return nil
        case .integer(let number) where number >= 0: return number
        case .string(let text) where Int64(text).map({ $0 >= 0 }) == true: return Int64(text)
        default: throw EntryError("\(name) must be a number of seconds")
        }
    }

    /// An epoch-seconds value written as a string or a number.
    mutating func epochSeconds(_ name: String) throws(EntryError) -> Int64? {
        guard let value = unread.removeValue(forKey: name) else { return nil }
        switch value {
        case .null: return nil
        case .string(let string) where string.isEmpty: return nil
        case .string(let string):
            guard let number = Self.decimalSeconds(string) else {
                throw EntryError("\(name) is not a time in epoch seconds")
            }
            return number
        case .integer(let number): return number
        case .number(let number):
            guard let whole = Int64(exactly: number.rounded(.down)) else {
                throw EntryError("\(name) is not a time in epoch seconds")
            }
            return whole
        default: throw EntryError("\(name) is not a time in epoch seconds")
        }
    }

    /// Whole seconds of a decimal number written as text (`1700000000`, or `1700000000.25` as some SDKs write
    /// it); nil for anything else: hexadecimal (`0x10`), exponents, `inf`, `nan`, signs other than a leading `-`,
    /// which a lenient `Double(_:)` would take.
    static func decimalSeconds(_ text: String) -> Int64? {
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        let whole = parts[0].hasPrefix("-") ? parts[0].dropFirst() : parts[0]
        let isDigits = { (part: Substring) in
            !part.isEmpty && part.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
        }
        guard isDigits(whole), parts.count == 1 || isDigits(parts[1]) else { return nil }
        return Int64(parts[0])
    }

    mutating func secret(_ name: String = "secret") throws(EntryError) -> Secret {
        Secret(try requiredString(name))
    }
}

/// Writes an MSAL cache entry: known fields first, unknown ones kept but never overriding a known one.
struct FieldWriter {
    private(set) var fields: [String: JSONValue] = [:]

    mutating func set(_ name: String, _ value: String?) {
        if let value { fields[name] = .string(value) }
    }

    mutating func set(_ name: String, seconds value: Int64?) {
        if let value { fields[name] = .string(String(value)) }
    }

    func merging(extra: [String: JSONValue]) -> [String: JSONValue] {
        fields.merging(extra) { known, _ in known }
    }
}

/// Why one cache entry could not be read.
///
/// The message names fields, never values.
public struct EntryError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong with the entry.
    public let reason: String

    init(_ reason: String) {
        self.reason = reason
    }

    /// The reason.
    public var description: String {
        reason
    }
}
