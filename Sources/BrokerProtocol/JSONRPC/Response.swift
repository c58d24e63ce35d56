/// A successful JSON-RPC response.
public struct Response<Result: Encodable & Sendable>: Encodable, Sendable {
    /// Always `2.0`.
    public let jsonrpc = "2.0"
    /// The request's id; nil answers a request that carried `"id": null`.
    public var id: RequestID?
    /// The method's result object.
    public var result: Result

    /// Creates a response.
    public init(id: RequestID?, result: Result) {
        self.id = id
        self.result = result
    }

    private enum CodingKeys: String, CodingKey {
        case jsonrpc, id, result
    }

    /// Encodes `jsonrpc`, `id` (`null` when nil) and `result`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(jsonrpc, forKey: .jsonrpc)
        if let id { try container.encode(id, forKey: .id) } else { try container.encodeNil(forKey: .id) }
        try container.encode(result, forKey: .result)
    }
}

/// A JSON-RPC error response.
///
/// `id` is null when the request's id could not be read.
public struct ErrorResponse: Codable, Sendable {
    /// Always `2.0`.
    public let jsonrpc = "2.0"
    /// The request's id, or nil (encoded as `null`).
    public var id: RequestID?
    /// What went wrong.
    public var error: ErrorObject

    /// Creates an error response.
    public init(id: RequestID?, error: ErrorObject) {
        self.id = id
        self.error = error
    }

    private enum CodingKeys: String, CodingKey {
        case jsonrpc, id, error
    }

    /// Encodes with an explicit `"id": null` when the id is unknown, as JSON-RPC requires.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(jsonrpc, forKey: .jsonrpc)
        if let id { try container.encode(id, forKey: .id) } else { try container.encodeNil(forKey: .id) }
        try container.encode(error, forKey: .error)
    }

    /// Decodes an error response.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decodeIfPresent(RequestID.self, forKey: .id)
        error = try container.decode(ErrorObject.self, forKey: .error)
    }
}

/// A JSON-RPC notification the broker sends (no `id`).
public struct NotificationMessage<Params: Encodable & Sendable>: Encodable, Sendable {
    /// Always `2.0`.
    public let jsonrpc = "2.0"
    /// The notification's name.
    public var method: NotificationName
    /// Its params.
    public var params: Params

    /// Creates a notification.
    public init(method: NotificationName, params: Params) {
        self.method = method
        self.params = params
    }

    private enum CodingKeys: String, CodingKey {
        case jsonrpc, method, params
    }
}
