import NIOCore
import NIOHTTP1

/// One complete HTTP request: the head, the query split into parameters, and the whole body.
struct HTTPRequest: Sendable {
    /// The request method.
    let method: HTTPMethod

    /// The path, without the query.
    let path: String

    /// The query parameters (first of repeated names wins).
    let query: [String: String]

    /// The request headers.
    let headers: HTTPHeaders

    /// The body bytes (empty when there is none).
    let body: [UInt8]

    /// Creates the request from what NIO decoded.
    init(head: HTTPRequestHead, body: ByteBuffer) {
        method = head.method
        headers = head.headers
        self.body = Array(body.readableBytesView)
        if let mark = head.uri.firstIndex(of: "?") {
            path = String(head.uri[..<mark])
            query = FormCoding.parse(head.uri[head.uri.index(after: mark)...])
        } else {
            path = head.uri
            query = [:]
        }
    }

    /// The body read as a form (`application/x-www-form-urlencoded`).
    var form: [String: String] {
        FormCoding.parse(String(decoding: body, as: UTF8.self))
    }

    /// The first value of a header, if present.
    func header(_ name: String) -> String? {
        headers.first(name: name)
    }
}
