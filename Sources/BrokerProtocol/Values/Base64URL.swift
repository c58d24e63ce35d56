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
    public static func decode(utf8 text: some Collection<UInt8>) -> Data? {
        var bytes = Array(text)
        while bytes.last == UInt8(ascii: "=") { bytes.removeLast() }
        for index in bytes.indices {
            switch bytes[index] {
            case UInt8(ascii: "-"): bytes[index] = UInt8(ascii: "+")
            case UInt8(ascii: "_"): bytes[index] = UInt8(ascii: "/")
            case UInt8(ascii: "+"), UInt8(ascii: "/"): return nil
            default: break
            }
        }
        bytes += repeatElement(UInt8(ascii: "="), count: (4 - bytes.count % 4) % 4)
        return Data(base64Encoded: Data(bytes))
    }

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
        let dot = UInt8(ascii: ".")
        guard let first = bytes.firstIndex(of: dot),
            let second = bytes[(first + 1)...].firstIndex(of: dot),
            !bytes[(second + 1)...].contains(dot)
        else { return nil }
        return (bytes, 0..<first, (first + 1)..<second, (second + 1)..<bytes.count)
    }
}
