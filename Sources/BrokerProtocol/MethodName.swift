/// The name of a method on the wire.
///
/// The names mirror Microsoft's Linux broker (`com.microsoft.identity.Broker1`). Each method's type in ``Methods``
/// holds its name; ``allCases`` lists them in the table's order.
public struct MethodName: RawRepresentable, Sendable, Hashable, Codable, ExpressibleByStringLiteral,
    CustomStringConvertible
{
    /// The name as sent.
    public let rawValue: String

    /// The name `rawValue`.
    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// The name `value`.
    public init(stringLiteral value: String) {
        self.rawValue = value
    }

    /// Every method's name, in the order of ``Methods/all``.
    public static var allCases: [MethodName] {
        Methods.all.map { $0.name }
    }

    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// The notifications the broker sends while an interactive request runs (JSON-RPC messages without `id`).
public enum NotificationName: String, Sendable, Hashable, Codable, CaseIterable {
    /// The sign-in page is being loaded; `params.url` is the authorization URL.
    case webAuthDidStartLoad = "webAuth/didStartLoad"
    /// The page was handed to the browser or web view (`params.url`).
    case webAuthDidFinishLoad = "webAuth/didFinishLoad"
    /// The sign-in failed (`params.error`).
    case webAuthDidFail = "webAuth/didFail"
    /// The redirect came back; the token request follows.
    case webAuthDidComplete = "webAuth/didComplete"
    /// Show the user this device code.
    case deviceCodePrompt = "deviceCode/prompt"
}

extension RawRepresentable where Self: CaseIterable, RawValue == String {
    /// The value of a closed enumeration named on the wire; an unknown name is a `dataCorrupted` error that lists
    /// the names allowed and never repeats the one sent.
    static func decodeWireName(from decoder: any Decoder) throws -> Self {
        let name = try decoder.singleValueContainer().decode(String.self)
        guard let value = Self(rawValue: name) else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(
                    codingPath: decoder.codingPath,
                    debugDescription: "expected one of " + allCases.map(\.rawValue).joined(separator: ", ")
                )
            )
        }
        return value
    }
}
