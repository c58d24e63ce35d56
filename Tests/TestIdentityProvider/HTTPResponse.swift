import BrokerProtocol
import NIOHTTP1

/// An HTTP response to send.
struct HTTPResponse: Sendable {
    /// The status.
    var status: HTTPResponseStatus

    /// The headers; `Content-Length` and `Connection` are added when the response is written.
    var headers: HTTPHeaders

    /// The body.
    var body: [UInt8]

    /// Creates a response.
    init(status: HTTPResponseStatus, contentType: String, body: [UInt8]) {
        self.status = status
        headers = HTTPHeaders([("Content-Type", contentType)])
        self.body = body
    }

    /// A compact JSON response; a value that cannot be encoded gives a 500.
    static func json(_ value: some Encodable, status: HTTPResponseStatus = .ok) -> HTTPResponse {
        do {
            return HTTPResponse(
                status: status,
                contentType: "application/json; charset=utf-8",
                body: try WireEncoder().encode(value)
            )
        } catch {
            Log.info("cannot encode a response: \(error)")
            return HTTPResponse(
                status: .internalServerError,
                contentType: "application/json; charset=utf-8",
                body: Array(#"{"error":"server_error"}"#.utf8)
            )
        }
    }

    /// An HTML page.
    static func html(_ page: String, status: HTTPResponseStatus = .ok) -> HTTPResponse {
        HTTPResponse(status: status, contentType: "text/html; charset=utf-8", body: Array(page.utf8))
    }

    /// A 302 redirect to `location`.
    static func redirect(to location: String) -> HTTPResponse {
        var response = html(HTMLPage.redirect(to: location), status: .found)
        response.headers.add(name: "Location", value: location)
        return response
    }

    /// A JSON error for paths and methods outside the provider's API.
    static func notFound(_ what: String) -> HTTPResponse {
        json(ControlError(error: "not_found", message: what), status: .notFound)
    }

    /// A JSON error for a known path asked with the wrong method.
    static func methodNotAllowed(_ allowed: String) -> HTTPResponse {
        var response = json(
            ControlError(error: "method_not_allowed", message: "this endpoint accepts \(allowed)"),
            status: .methodNotAllowed
        )
        response.headers.add(name: "Allow", value: allowed)
        return response
    }
}
