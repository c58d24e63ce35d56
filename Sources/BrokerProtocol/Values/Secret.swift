/// A credential on the wire or in memory: an access, refresh or id token, an authorization code, a verifier.
///
/// `description`, `debugDescription`, string interpolation and `dump` all print `<redacted>`; the value is
/// reachable only through ``reveal()``, so every place that handles the raw secret says so by name.
/// It encodes as a plain JSON string.
public struct Secret: Sendable, Hashable, Codable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    private let value: String

    /// Wraps a raw secret.
    public init(_ value: String) {
        self.value = value
    }

    /// The raw secret.
    ///
    /// Call it only where the secret must leave the process or be sealed.
    public func reveal() -> String {
        value
    }

    /// Whether the secret is the empty string (which is never a usable credential).
    public var isEmpty: Bool {
        value.isEmpty
    }

    /// Always `<redacted>`.
    public var description: String {
        "<redacted>"
    }

    /// Always `Secret(<redacted>)`.
    public var debugDescription: String {
        "Secret(<redacted>)"
    }

    /// A mirror with no children, so `dump` and reflection show nothing.
    public var customMirror: Mirror {
        Mirror(self, children: [], displayStyle: .struct)
    }

    /// Decodes a JSON string.
    public init(from decoder: any Decoder) throws {
        value = try decoder.singleValueContainer().decode(String.self)
    }

    /// Encodes as a JSON string.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(value)
    }
}
