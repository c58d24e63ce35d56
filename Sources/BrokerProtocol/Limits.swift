#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The protocol's version and fixed limits.
public enum WireProtocol {
    /// The protocol version this library speaks: a major (breaking) and a minor (additive) number.
    public static let version = "1.3"

    /// The major part of ``version``; a broker serves only clients of the same major.
    public static let majorVersion = 1

    /// The largest message a client may send, newline excluded.
    ///
    /// A longer one is refused and the connection closed.
    public static let maximumFrameBytes = 1 << 20

    /// The largest message a client must be ready to read: exports can be larger than requests.
    public static let maximumResponseBytes = 64 << 20

    /// The longest `correlationId` accepted, in UTF-8 bytes (a UUID has 36): the broker echoes it in answers,
    /// logs and `getStatus`, so it is bounded.
    public static let maximumCorrelationIdBytes = 256

    /// Whether `id` may be a `correlationId`.
    ///
    /// At most ``maximumCorrelationIdBytes`` of UTF-8 without a control character (C0, DEL, C1, the line and paragraph
    /// separators): it travels in an HTTP header to the identity provider (`client-request-id`) and into log lines,
    /// where a control character would break the one and forge the other.
    public static func isValidCorrelationId(_ id: String) -> Bool {
        guard id.utf8.count <= maximumCorrelationIdBytes else { return false }
        return !id.unicodeScalars.contains { scalar in
            scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar.value == 0x2028
                || scalar.value == 0x2029
        }
    }

    /// A correlation id for a request that came without one: a new UUID, uppercase (Protocol/ §6).
    public static func newCorrelationId() -> String {
        UUID.random().canonicalText
    }

    /// The longest string request `id` accepted, in UTF-8 bytes.
    public static let maximumStringIdBytes = 256

    /// The most requests a connection may have in flight (sent, not yet answered).
    ///
    /// One more is answered `broker_busy` and not executed. A client that multiplexes calls keeps to it (the Swift
    /// client makes the others wait for an answer).
    public static let maximumRequestsInFlight = 32

    /// Parses the major part of a version string `major.minor` (such as `1.2`: decimal numbers without leading
    /// zeros, as the schema's pattern says); nil for anything else (`1`, `01.0`, `1.0.0`, `1.x`).
    public static func major(of version: String) -> Int? {
        let parts = version.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy(isDecimal) else { return nil }
        return Int(parts[0])
    }

    private static func isDecimal(_ text: Substring) -> Bool {
        guard let first = text.utf8.first, text.utf8.count <= 9 else { return false }
        guard text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return false }
        return first != UInt8(ascii: "0") || text.utf8.count == 1
    }
}
