/// The `id` of a JSON-RPC request: a number or a string, echoed unchanged in its response.
public enum RequestID: Sendable, Hashable, Codable, CustomStringConvertible {
    case number(Int64)
    case string(String)

    /// Decodes a JSON number (integral) or string.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int64.self) {
            self = .number(number)
        } else {
            self = .string(try container.decode(String.self))
        }
    }

    /// Encodes the id as it came.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .number(let number): try container.encode(number)
        case .string(let string): try container.encode(string)
        }
    }

    /// The id as JSON would show it.
    public var description: String {
        switch self {
        case .number(let number): String(number)
        case .string(let string): "\"\(string)\""
        }
    }
}
