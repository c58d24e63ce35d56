import Foundation

/// `application/x-www-form-urlencoded` reading and writing, for query strings, form bodies and redirect URLs.
enum FormCoding {
    /// The name/value pairs of `text`; the first of repeated names wins, and undecodable pairs are skipped.
    static func parse(_ text: some StringProtocol) -> [String: String] {
        var parameters: [String: String] = [:]
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = decode(parts[0]), !name.isEmpty else { continue }
            let value = parts.count > 1 ? decode(parts[1]) : ""
            guard let value, parameters[name] == nil else { continue }
            parameters[name] = value
        }
        return parameters
    }

    /// Joins pairs into form-encoded text, in the order given.
    static func encode(_ pairs: [(String, String)]) -> String {
        pairs.map { "\(escape($0.0))=\(escape($0.1))" }.joined(separator: "&")
    }

    /// Percent-encodes everything but the unreserved characters of RFC 3986.
    static func escape(_ text: String) -> String {
        var escaped = ""
        let hex = Array("0123456789ABCDEF")
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                escaped.append(Character(Unicode.Scalar(byte)))
            default:
                escaped.append("%")
                escaped.append(hex[Int(byte >> 4)])
                escaped.append(hex[Int(byte & 0x0F)])
            }
        }
        return escaped
    }

    private static func decode(_ text: some StringProtocol) -> String? {
        String(text).replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }
}
