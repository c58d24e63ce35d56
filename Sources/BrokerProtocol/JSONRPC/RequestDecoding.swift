#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// Decodes request frames into ``IncomingRequest``s, classifying every failure as JSON-RPC says.
///
/// - Not JSON: `parse_error`, id null.
/// - JSON but not a request object (an array, a missing or wrong `jsonrpc`/`method`): `invalid_request`.
/// - Unknown method: `method_not_found`, with the request's id.
/// - Params missing, of the wrong type, or with a wrong field: `invalid_params`, naming the field.
public struct RequestDecoder: Sendable {
    private let decoder = WireDecoder(limits: .request)

    /// Creates a decoder.
    public init() {}

    /// Decodes one frame (the bytes of one line, without the newline).
    public func decode(_ frame: Data) -> Result<IncomingRequest, RequestRejection> {
        decode(Array(frame))
    }

    /// Decodes one frame (the bytes of one line, without the newline).
    public func decode(_ frame: [UInt8]) -> Result<IncomingRequest, RequestRejection> {
        do {
            let envelope = try decoder.decode(Envelope.self, from: frame)
            return envelope.outcome
        } catch let error as DecodingError {
            return .failure(Self.classify(error))
        } catch {
            return .failure(
                RequestRejection(id: nil, error: ErrorObject(.parseError, "not JSON"), isNotification: false)
            )
        }
    }

    private static func classify(_ error: DecodingError) -> RequestRejection {
        switch error {
        case .dataCorrupted(let context) where context.codingPath.isEmpty:
            // Say what is wrong (a duplicate key, the depth, a control character, a byte-order mark, …) and where.
            let detail = (context.underlyingError as? JSONSyntaxError).map { ": \($0)" } ?? ""
            return RequestRejection(
                id: nil,
                error: ErrorObject(.parseError, "not valid JSON\(detail)"),
                isNotification: false
            )
        default:
            return RequestRejection(
                id: nil,
                error: ErrorObject(.invalidRequest, "not a JSON-RPC 2.0 request object"),
                isNotification: false
            )
        }
    }
}

/// The request object, decoded in one pass: envelope errors throw, params errors become an outcome.
private struct Envelope: Decodable {
    let outcome: Result<IncomingRequest, RequestRejection>

    private enum CodingKeys: String, CodingKey {
        case jsonrpc, id, method, params
    }

    init(from decoder: any Decoder) throws {
        let container: KeyedDecodingContainer<CodingKeys>
        do {
            container = try decoder.container(keyedBy: CodingKeys.self)
        } catch {
            let isBatch = (try? decoder.unkeyedContainer()) != nil
            outcome = .failure(
                RequestRejection(
                    id: nil,
                    error: ErrorObject(
                        .invalidRequest,
                        isBatch ? "batch requests are not supported" : "a request must be a JSON object"
                    ),
                    isNotification: false
                )
            )
            return
        }
        let hasID = container.contains(.id)
        let id: RequestID?
        do {
            // Ids are integers or strings: a null id could not be told apart from the broker's id-less errors.
            if hasID, try container.decodeNil(forKey: .id) { throw RequestRejection.nullID }
            id = try container.decodeIfPresent(RequestID.self, forKey: .id)
        } catch {
            outcome = .failure(
                Self.reject(nil, .invalidRequest, "id must be a string or an integer", notification: false)
            )
            return
        }
        if case .string(let text)? = id, text.utf8.count > WireProtocol.maximumStringIdBytes {
            outcome = .failure(
                Self.reject(
                    nil,
                    .invalidRequest,
                    "a string id is at most \(WireProtocol.maximumStringIdBytes) bytes long",
                    notification: false
                )
            )
            return
        }
        // Only a well-formed request object without an id is a notification; anything malformed is answered
        // (with id null when none could be read), as JSON-RPC 2.0 requires.
        guard (try? container.decode(String.self, forKey: .jsonrpc)) == "2.0" else {
            outcome = .failure(Self.reject(id, .invalidRequest, "jsonrpc must be \"2.0\"", notification: false))
            return
        }
        guard let name = try? container.decode(String.self, forKey: .method) else {
            outcome = .failure(Self.reject(id, .invalidRequest, "method must be a string", notification: false))
            return
        }
        let isNotification = !hasID
        guard let method = Methods.named(name) else {
            outcome = .failure(
                Self.reject(id, .methodNotFound, "no method named \(Self.quoted(name))", notification: isNotification)
            )
            return
        }
        do {
            let call = try Self.decodeCall(method, from: container)
            if let correlationId = call.correlationId, !WireProtocol.isValidCorrelationId(correlationId) {
                let field = ParamField(AcquireTokenSilentlyParams.CodingKeys.correlationId).path
                var rejection = Self.reject(
                    id,
                    .invalidParams,
                    "\(field): at most \(WireProtocol.maximumCorrelationIdBytes) bytes, no control character (a UUID "
                        + "has 36)",
                    notification: isNotification
                )
                rejection.error.data?.field = field
                outcome = .failure(rejection)
                return
            }
            outcome = .success(IncomingRequest(id: id, isNotification: isNotification, call: call))
        } catch let error as DecodingError {
            let (message, field) = Self.describe(error)
            var rejection = Self.reject(id, .invalidParams, message, notification: isNotification)
            rejection.error.data?.field = field
            outcome = .failure(rejection)
        }
    }

    /// The params of `method` (its defaults when they may be left out and are).
    private static func decodeCall<Method: BrokerMethod>(
        _ method: Method.Type,
        from container: KeyedDecodingContainer<CodingKeys>
    ) throws -> any MethodCall {
        if let omitted = Method.Params.whenOmitted,
            !container.contains(.params) || (try? container.decodeNil(forKey: .params)) == true
        {
            return Call<Method>(omitted)
        }
        return Call<Method>(try container.decode(Method.Params.self, forKey: .params))
    }

    private static func reject(
        _ id: RequestID?,
        _ code: ErrorCode,
        _ message: String,
        notification: Bool
    ) -> RequestRejection {
        RequestRejection(id: id, error: ErrorObject(code, message), isNotification: notification)
    }

    /// A message and a field path for a params decoding error, such as `authParameters.clientId: missing`.
    ///
    /// Values are never quoted back: a misplaced token must not echo into an error.
    private static func describe(_ error: DecodingError) -> (message: String, field: String) {
        func path(_ keys: [any CodingKey]) -> String {
            var out = "params"
            for key in keys.dropFirst() {
                if let index = key.intValue { out += "[\(index)]" } else { out += "." + key.stringValue }
            }
            return out
        }
        switch error {
        case .keyNotFound(let key, let context):
            let field = path(context.codingPath + [key])
            return ("\(field): required field missing", field)
        case .typeMismatch(let type, let context):
            let field = path(context.codingPath)
            return ("\(field): expected \(Self.jsonTypeName(type))", field)
        case .valueNotFound(let type, let context):
            let field = path(context.codingPath)
            return ("\(field): expected \(Self.jsonTypeName(type)), got null", field)
        case .dataCorrupted(let context):
            // The wire decoder's own explanations ("expected one of …", "expected an integer …") name the rule,
            // never the value; anything else is only called invalid.
            let field = path(context.codingPath)
            if let syntax = context.underlyingError as? JSONSyntaxError { return ("\(field): \(syntax.reason)", field) }
            if context.debugDescription.hasPrefix("expected ") {
                return ("\(field): \(context.debugDescription)", field)
            }
            return ("\(field): invalid value", field)
        @unknown default:
            return ("params: invalid", "params")
        }
    }

    private static func jsonTypeName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type, is Secret.Type: "a string"
        case is Bool.Type: "a boolean"
        case is Int.Type, is Int64.Type, is Int32.Type: "an integer"
        case is Double.Type: "a number"
        case is [String].Type: "an array of strings"
        case is any ArrayMarker.Type: "an array"
        default: "an object"
        }
    }

    private static func quoted(_ name: String) -> String {
        let printable = name.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value < 0x7F } && name.count <= 64
        return printable ? "\"\(name)\"" : "(unprintable)"
    }
}

/// Lets error messages tell arrays from objects without naming every element type.
private protocol ArrayMarker {}
extension Array: ArrayMarker {}

extension RequestRejection {
    /// Thrown inside envelope decoding for `"id": null`; reported like any id of the wrong type.
    fileprivate static let nullID = NullIDError()
}

private struct NullIDError: Error {}
