import Glibc

#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// base64url without padding (RFC 4648 §5), as JWTs and `client_info` use it.
public enum Base64URL {
    /// Decodes base64url text, with or without padding; nil when it is not base64url.
    public static func decode(_ text: some StringProtocol) -> Data? {
        decode(utf8: text.utf8)
    }

    /// Decodes base64url text given as its UTF-8 bytes, with or without padding; nil when it is not base64url.
    ///
    /// Four characters to three bytes through a table: by way of Foundation's base64 (a copy translated to the
    /// standard alphabet and padded, then decoded) it cost a refresh two percent of its instructions.
    public static func decode(utf8 text: some Collection<UInt8>) -> Data? {
        let decoded: [UInt8]? =
            text.withContiguousStorageIfAvailable { decode(UnsafeRawBufferPointer($0)) }
            ?? Array(text).withUnsafeBytes { decode($0) }
        return decoded.map { Data($0) }
    }

    private static func decode(_ text: UnsafeRawBufferPointer) -> [UInt8]? {
        var count = text.count
        while count > 0, text[count - 1] == UInt8(ascii: "=") { count -= 1 }
        guard count % 4 != 1 else { return nil }
        let length = count / 4 * 3 + max(0, count % 4 - 1)
        var invalid: UInt8 = 0
        // Straight into the array's storage, the table read without bounds checks (a byte indexes all 256 entries):
        // with three appends a quad, each checking capacity, the three parts of a refresh's id token cost 21,900
        // instructions, now 15,100 (callgrind).
        let output = table.withUnsafeBufferPointer { table in
            [UInt8](unsafeUninitializedCapacity: length) { output, written in
                var index = 0
                var at = 0
                while index + 4 <= count {
                    let (a, b, c, d) = (
                        table[Int(text[index])], table[Int(text[index + 1])], table[Int(text[index + 2])],
                        table[Int(text[index + 3])]
                    )
                    invalid |= a | b | c | d
                    let quad = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    output[at] = UInt8(truncatingIfNeeded: quad >> 16)
                    output[at + 1] = UInt8(truncatingIfNeeded: quad >> 8)
                    output[at + 2] = UInt8(truncatingIfNeeded: quad)
                    at += 3
                    index += 4
                }
                switch count - index {
                case 2:
                    let (a, b) = (table[Int(text[index])], table[Int(text[index + 1])])
                    invalid |= a | b
                    output[at] = UInt8(truncatingIfNeeded: (UInt32(a) << 6 | UInt32(b)) >> 4)
                    at += 1
                case 3:
                    let (a, b, c) = (table[Int(text[index])], table[Int(text[index + 1])], table[Int(text[index + 2])])
                    invalid |= a | b | c
                    let triple = UInt32(a) << 12 | UInt32(b) << 6 | UInt32(c)
                    output[at] = UInt8(truncatingIfNeeded: triple >> 10)
                    output[at + 1] = UInt8(truncatingIfNeeded: triple >> 2)
                    at += 2
                default:
                    break
                }
                written = at
            }
        }
        // A byte outside the alphabet is 0x40 in the table; the alphabet's are below it.
        return invalid & 0x40 == 0 ? output : nil
    }

    /// Each byte's six bits in base64url; 0x40 for bytes outside the alphabet (padding included).
    private static let table: [UInt8] = {
        var table = [UInt8](repeating: 0x40, count: 256)
        for (value, character) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8.enumerated() {
            table[Int(character)] = UInt8(value)
        }
        return table
    }()

    /// Encodes bytes as base64url without padding.
    public static func encode(_ data: some DataProtocol) -> String {
        var bytes = Array(Data(data).base64EncodedData())
        while bytes.last == UInt8(ascii: "=") { bytes.removeLast() }
        for index in bytes.indices {
            switch bytes[index] {
            case UInt8(ascii: "+"): bytes[index] = UInt8(ascii: "-")
            case UInt8(ascii: "/"): bytes[index] = UInt8(ascii: "_")
            default: break
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// The compact serialization of a JWS or JWT: `header.payload.signature`, each part base64url.
package enum CompactJWS {
    /// The bytes of `compact` and where its three parts are in them; nil unless it has exactly three parts.
    ///
    /// On a byte array, not by splitting the string's UTF-8 view: that went one index at a time through a token of a
    /// kilobyte and more, twice per refresh (once to check the id token, once to index it).
    package static func parts(
        of compact: String
    ) -> (bytes: [UInt8], header: Range<Int>, payload: Range<Int>, signature: Range<Int>)? {
        let bytes = Array(compact.utf8)
        // libc's memchr, which reads a word or a vector at a time: by the collection's firstIndex(of:) and
        // contains, byte by byte, the three passes over a kilobyte of id token cost a refresh 5,300 instructions.
        let dots = bytes.withUnsafeBytes { buffer -> (Int, Int, Bool)? in
            guard let base = buffer.baseAddress else { return nil }
            func dot(from start: Int) -> Int? {
                memchr(base + start, Int32(UInt8(ascii: ".")), buffer.count - start).map { UnsafeRawPointer($0) - base }
            }
            guard let first = dot(from: 0), let second = dot(from: first + 1) else { return nil }
            return (first, second, dot(from: second + 1) != nil)
        }
        guard let (first, second, more) = dots, !more else { return nil }
        return (bytes, 0..<first, (first + 1)..<second, (second + 1)..<bytes.count)
    }
}
