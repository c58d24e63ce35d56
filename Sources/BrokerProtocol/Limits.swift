/// The protocol's version and fixed limits.
public enum WireProtocol {
    /// The protocol version this library speaks: a major (breaking) and a minor (additive) number.
    public static let version = "1.0"

    /// The major part of ``version``; a broker serves only clients of the same major.
    public static let majorVersion = 1

    /// The largest message a client may send, newline excluded.
    ///
    /// A longer one is refused and the connection closed.
    public static let maximumFrameBytes = 1 << 20

    /// The largest message a client must be ready to read: exports can be larger than requests.
    public static let maximumResponseBytes = 64 << 20

    /// Parses the major part of a version string such as `1.2`; nil for anything else.
    public static func major(of version: String) -> Int? {
        guard let first = version.split(separator: ".", omittingEmptySubsequences: false).first else { return nil }
        return Int(first)
    }
}
