import Glibc

/// Values that many cache entries hold alike (an account's id, a client id, a tenant, a scope set), kept once
/// each and counted, so that ten thousand tokens of a thousand accounts hold a thousand copies of an account id,
/// not ten thousand.
///
/// Keys are compared by their bytes (``ExactString``): sharing never swaps one spelling of a value for another
/// that Unicode calls equal, so an entry keeps the bytes it came with.
struct SharedValues<Value: Sendable>: Sendable {
    private var table: [ExactString: (value: Value, holders: Int)] = [:]

    /// How many distinct values are kept.
    var count: Int { table.count }

    /// The value kept for `key` (made by `make` for its first holder), counted as held once more.
    mutating func hold(_ key: String, make: (String) -> Value) -> Value {
        let exact = ExactString(key)
        if let index = table.index(forKey: exact) {
            table.values[index].holders += 1
            return table.values[index].value
        }
        let value = make(key)
        table[exact] = (value, 1)
        return value
    }

    /// Counts one holder of `key` fewer; the value goes with its last holder.
    mutating func release(_ key: String) {
        guard let index = table.index(forKey: ExactString(key)) else { return }
        if table.values[index].holders > 1 {
            table.values[index].holders -= 1
        } else {
            table.remove(at: index)
        }
    }
}

extension SharedValues where Value == String {
    /// The kept copy of `string`, counted as held once more.
    mutating func hold(_ string: String) -> String {
        hold(string) { $0 }
    }
}

/// A string compared and hashed by its UTF-8 bytes, not by Unicode canonical equivalence as `String` is.
struct ExactString: Hashable, Sendable {
    let string: String

    init(_ string: String) {
        self.string = string
    }

    static func == (lhs: ExactString, rhs: ExactString) -> Bool {
        // On the contiguous bytes (every native string has them), by `memcmp`: `elementsEqual` on the UTF-8 views
        // stepped through them one index at a time, and on the bytes still went one byte at a time (1 % of a
        // refresh's instructions), and a refresh compares a few hundred keys.
        let equal = lhs.string.utf8.withContiguousStorageIfAvailable { left in
            rhs.string.utf8.withContiguousStorageIfAvailable { right in
                guard left.count == right.count else { return false }
                guard let leftBytes = left.baseAddress, let rightBytes = right.baseAddress, leftBytes != rightBytes
                else { return true }
                return memcmp(leftBytes, rightBytes, left.count) == 0
            }
        }
        return (equal ?? nil) ?? lhs.string.utf8.elementsEqual(rhs.string.utf8)
    }

    func hash(into hasher: inout Hasher) {
        var string = string
        string.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }
}

extension String {
    /// The string lowercased, as `lowercased()` gives it, but the same storage when it has nothing to lowercase:
    /// ids are mostly lowercase already, and an index of ten thousand tokens keyed by fresh lowercase copies of the
    /// ids they share held 2.5 MB of copies.
    var lowercasedSharingStorage: String {
        // Checked on the contiguous bytes when there are (always, for native strings), eight at a time: through the
        // view's index this check was 4 % of a refresh's instructions, and a byte at a time still 1.5 % (callgrind).
        let lowers =
            utf8.withContiguousStorageIfAvailable { Self.needsLowering(UnsafeRawBufferPointer($0)) }
            ?? utf8.contains(where: Self.needsLowering)
        guard lowers else { return self }
        return asciiLowercased ?? lowercased()
    }

    /// The string with its ASCII capitals lowered, when it is all ASCII; nil when a character is not.
    ///
    /// What `lowercased()` gives for it, without Unicode's case mappings, which cost a cache key of a hundred bytes
    /// about 2,000 instructions (an access token's key has capitals: its scopes), and a refresh builds 13 keys.
    private var asciiLowercased: String? {
        var source = self
        var ascii = true
        let lowered = source.withUTF8 { bytes in
            String(unsafeUninitializedCapacity: bytes.count) { buffer in
                guard let from = bytes.baseAddress, let to = buffer.baseAddress else { return 0 }
                to.initialize(from: from, count: bytes.count)
                ascii = Self.lowerASCIICapitals(UnsafeMutableRawBufferPointer(start: to, count: bytes.count))
                return bytes.count
            }
        }
        return ascii ? lowered : nil
    }

    /// The high bit of each byte of `word` that is an ASCII capital.
    ///
    /// Per byte below 0x80, adding 0x80 - "A" sets the high bit from "A" up, and adding 0x80 - ("Z" + 1) from past
    /// "Z": a capital has the first and not the second.
    private static func asciiCapitals(in word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let low = word & ~highs
        return (low &+ ones &* (0x80 - 0x41)) & ~(low &+ ones &* (0x80 - 0x5B)) & ~word & highs
    }

    /// Whether any of `bytes` is an ASCII capital or part of a non-ASCII character.
    private static func needsLowering(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var index = 0
        if let base = bytes.baseAddress {
            while index + 8 <= bytes.count {
                let word = base.loadUnaligned(fromByteOffset: index, as: UInt64.self)
                // Bytes from 0x80 need lowering anyway.
                if (asciiCapitals(in: word) | word) & 0x8080_8080_8080_8080 != 0 { return true }
                index += 8
            }
        }
        return bytes[index...].contains(where: needsLowering)
    }

    /// Lowers the ASCII capitals of `bytes` in place, eight at a time; whether every byte is ASCII.
    private static func lowerASCIICapitals(_ bytes: UnsafeMutableRawBufferPointer) -> Bool {
        var seen: UInt64 = 0
        var index = 0
        while index + 8 <= bytes.count {
            let word = bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            seen |= word
            // A capital's high bit moved down two is 0x20, the bit that makes it lower case.
            bytes.storeBytes(of: word | asciiCapitals(in: word) >> 2, toByteOffset: index, as: UInt64.self)
            index += 8
        }
        var ascii = seen & 0x8080_8080_8080_8080 == 0
        while index < bytes.count {
            let byte = bytes[index]
            ascii = ascii && byte < 0x80
            if byte &- UInt8(ascii: "A") < 26 { bytes[index] = byte | 0x20 }
            index += 1
        }
        return ascii
    }

    /// Whether `byte` is an ASCII capital or part of a non-ASCII character (which `lowercased()` may change).
    private static func needsLowering(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "A") && (byte <= UInt8(ascii: "Z") || byte >= 0x80)
    }
}
