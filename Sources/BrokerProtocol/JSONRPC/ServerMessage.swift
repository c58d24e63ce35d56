#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A message from the broker as a client reads it: a response to one of its requests, or a notification.
public enum ServerMessage: Sendable {
    /// A successful response; `result` is of the type the client registered for `id`.
    case result(id: RequestID, result: any Sendable)
    /// An error response; `id` is nil when the broker could not read the request's id.
    case error(id: RequestID?, error: ErrorObject)
    /// A notification about a running request.
    case notification(ServerNotification)
    /// A response to an id the client no longer waits for (a call it cancelled); ignore it.
    case orphanResponse(id: RequestID)
}

/// A notification from the broker, with typed params.
public enum ServerNotification: Sendable, Hashable {
    case webAuthDidStartLoad(WebAuthLoadNotification)
    case webAuthDidFinishLoad(WebAuthLoadNotification)
    case webAuthDidFail(WebAuthFailNotification)
    case webAuthDidComplete(WebAuthCompleteNotification)
    case deviceCodePrompt(DeviceCodeNotification)
    /// A notification this library does not know (from a newer broker); ignore it.
    case unknown(method: String)

    /// The correlation id of the request the notification is about.
    public var correlationId: String? {
        switch self {
        case .webAuthDidStartLoad(let params), .webAuthDidFinishLoad(let params): params.correlationId
        case .webAuthDidFail(let params): params.correlationId
        case .webAuthDidComplete(let params): params.correlationId
        case .deviceCodePrompt(let params): params.correlationId
        case .unknown: nil
        }
    }
}

/// Decodes broker messages in one pass, using the result type the client expects for each request id.
public struct ServerMessageDecoder: Sendable {
    /// Tells the decoder which result type belongs to a request id; nil for ids the client does not know.
    public typealias ResultTypes = @Sendable (RequestID) -> (any (Decodable & Sendable).Type)?

    private let decoder: WireDecoder

    /// Creates a decoder that looks result types up with `resultTypes`.
    public init(resultTypes: @escaping ResultTypes) {
        var decoder = WireDecoder()
        decoder.userInfo[resultTypesKey] = ResultTypesBox(lookup: resultTypes)
        self.decoder = decoder
    }

    /// Decodes one line from the broker.
    public func decode(_ frame: [UInt8]) throws -> ServerMessage {
        try decoder.decode(DecodedServerMessage.self, from: frame).message
    }
}

private let resultTypesKey: CodingUserInfoKey = {
    guard let key = CodingUserInfoKey(rawValue: "tokenbroker.resultTypes") else {
        preconditionFailure("CodingUserInfoKey refused a constant, non-empty key")
    }
    return key
}()

private struct ResultTypesBox: Sendable {
    let lookup: ServerMessageDecoder.ResultTypes
}

private struct DecodedServerMessage: Decodable {
    let message: ServerMessage

    private enum CodingKeys: String, CodingKey {
        case id, method, params, result, error
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        if container.contains(.error) {
            let id = try container.decodeIfPresent(RequestID.self, forKey: .id)
            message = .error(id: id, error: try container.decode(ErrorObject.self, forKey: .error))
            return
        }
        if container.contains(.result) {
            let id = try container.decode(RequestID.self, forKey: .id)
            guard let box = decoder.userInfo[resultTypesKey] as? ResultTypesBox, let type = box.lookup(id) else {
                message = .orphanResponse(id: id)
                return
            }
            message = .result(id: id, result: try Self.decodeResult(type, from: container))
            return
        }
        let method = try container.decode(String.self, forKey: .method)
        switch NotificationName(rawValue: method) {
        case .webAuthDidStartLoad:
            message = .notification(
                .webAuthDidStartLoad(try container.decode(WebAuthLoadNotification.self, forKey: .params))
            )
        case .webAuthDidFinishLoad:
            message = .notification(
                .webAuthDidFinishLoad(try container.decode(WebAuthLoadNotification.self, forKey: .params))
            )
        case .webAuthDidFail:
            message = .notification(
                .webAuthDidFail(try container.decode(WebAuthFailNotification.self, forKey: .params))
            )
        case .webAuthDidComplete:
            message = .notification(
                .webAuthDidComplete(try container.decode(WebAuthCompleteNotification.self, forKey: .params))
            )
        case .deviceCodePrompt:
            message = .notification(
                .deviceCodePrompt(try container.decode(DeviceCodeNotification.self, forKey: .params))
            )
        case nil:
            message = .notification(.unknown(method: method))
        }
    }

    private static func decodeResult<T: Decodable & Sendable>(
        _ type: T.Type,
        from container: KeyedDecodingContainer<CodingKeys>
    ) throws -> any Sendable {
        try container.decode(T.self, forKey: .result)
    }
}
