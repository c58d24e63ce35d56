public import BrokerProtocol
public import Foundation

/// One HTTP exchange with an identity provider: what the grants send.
///
/// Bodies carry secrets (refresh tokens, codes, verifiers), so neither this type nor ``HTTPResponse`` prints them.
public struct HTTPRequest: Sendable, CustomStringConvertible {
    /// The two methods the OAuth endpoints need.
    public enum Method: String, Sendable {
        /// Discovery, JWKS.
        case get = "GET"
        /// The token and device authorization endpoints.
        case post = "POST"
    }

    /// The method.
    public var method: Method
    /// The endpoint.
    public var url: URL
    /// Header fields, in order.
    public var headers: [(name: String, value: String)]
    /// The body, if any.
    public var body: [UInt8]?

    /// Creates a request.
    public init(method: Method, url: URL, headers: [(name: String, value: String)] = [], body: [UInt8]? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }

    /// A form POST (`application/x-www-form-urlencoded`).
    public static func form(_ url: URL, _ form: FormBody, headers: [(name: String, value: String)] = []) -> HTTPRequest
    {
        HTTPRequest(
            method: .post,
            url: url,
            headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json")] + headers,
            body: form.encoded()
        )
    }

    /// `METHOD url` without the body or headers.
    public var description: String {
        "\(method.rawValue) \(url.absoluteString)"
    }
}

/// What came back.
public struct HTTPResponse: Sendable, CustomStringConvertible {
    /// The status code.
    public var status: Int
    /// Header fields, in order.
    public var headers: [(name: String, value: String)]
    /// The body, at most the transport's limit.
    public var body: [UInt8]

    /// Creates a response.
    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first value of the header `name` (case-insensitive).
    public func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    /// The status code and body size; never the body (it may hold tokens).
    public var description: String {
        "HTTP \(status), \(body.count) bytes"
    }
}

/// Sends HTTP requests to identity providers.
///
/// The broker uses ``AsyncHTTPTransport``; unit tests of one module may script answers.
public protocol HTTPTransport: Sendable {
    /// Sends `request` and collects the whole response, or fails within `timeout`.
    func send(_ request: HTTPRequest, timeout: Duration) async throws(TransportError) -> HTTPResponse
}

/// Why no HTTP response arrived.
public struct TransportError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kinds of failure, as the retry logic tells them apart.
    public enum Kind: Sendable, Hashable {
        /// No connection could be made (refused, unreachable, name not resolved): the request was never sent.
        case connection
        /// The connection broke after the request may have been sent: the provider may have acted on it.
        case interrupted
        /// The provider did not answer in time; it may have acted on the request.
        case timeout
        /// The response body was larger than the limit.
        case responseTooLarge
        /// The request was canceled.
        case canceled
    }

    /// What kind of failure.
    public var kind: Kind
    /// A short reason for logs; never contains a request body.
    public var reason: String

    /// Creates an error.
    public init(_ kind: Kind, _ reason: String) {
        self.kind = kind
        self.reason = reason
    }

    /// The reason.
    public var description: String {
        reason
    }
}

/// An `application/x-www-form-urlencoded` body or query: ordered name–value pairs.
///
/// Values may be secrets; `description` lists the names only.
public struct FormBody: Sendable, CustomStringConvertible {
    private var fields: [(name: String, value: String)] = []

    /// An empty form.
    public init() {}

    /// Adds a field.
    public mutating func add(_ name: String, _ value: String) {
        fields.append((name, value))
    }

    /// Adds a field when `value` is not nil.
    public mutating func add(_ name: String, _ value: String?) {
        if let value { fields.append((name, value)) }
    }

    /// Adds a secret field.
    public mutating func add(_ name: String, secret: Secret) {
        fields.append((name, secret.reveal()))
    }

    /// Whether a field of this name is present.
    public func contains(_ name: String) -> Bool {
        fields.contains { $0.name == name }
    }

    /// The value of the first field `name`.
    public func value(of name: String) -> String? {
        fields.first { $0.name == name }?.value
    }

    /// The encoded bytes: `name=value&…`, with everything but unreserved characters percent-encoded.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        // Room for the worst case, every byte escaped, reserved once: growing byte by byte, and each escape appended
        // as an array of three, cost a refresh's form 23,000 instructions (callgrind).
        out.reserveCapacity(fields.reduce(0) { $0 + 2 + 3 * ($1.name.utf8.count + $1.value.utf8.count) })
        for (index, field) in fields.enumerated() {
            if index > 0 { out.append(UInt8(ascii: "&")) }
            Self.percentEncode(field.name, into: &out)
            out.append(UInt8(ascii: "="))
            Self.percentEncode(field.value, into: &out)
        }
        return out
    }

    /// The encoded text, for a URL query.
    public func encodedString() -> String {
        String(decoding: encoded(), as: UTF8.self)
    }

    /// The field names, never the values.
    public var description: String {
        "FormBody(\(fields.map(\.name).joined(separator: ", ")))"
    }

    /// Appends `text` with every byte but an unreserved character's as `%XX`.
    ///
    /// Runs of unreserved bytes (a refresh token is one of a kilobyte and more) are copied whole, found sixteen bytes
    /// at a time: appended byte by byte, each append checking the array's room, the form of a refresh cost 8,000
    /// instructions (callgrind).
    private static func percentEncode(_ text: String, into out: inout [UInt8]) {
        var text = text
        text.withUTF8 { bytes in
            var index = 0
            while index < bytes.count {
                let run = unreservedRun(in: bytes, from: index)
                if run > index { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[index..<run])) }
                guard run < bytes.count else { return }
                let byte = bytes[run]
                out.append(UInt8(ascii: "%"))
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0xF)])
                index = run + 1
            }
        }
    }

    /// The first offset at or after `start` whose byte is not an unreserved character; `bytes.count` when all are.
    private static func unreservedRun(in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        var index = start
        if let base = bytes.baseAddress {
            // Signed bytes, whose compares SSE2 has: every byte above 0x7F is negative and fails each test. A-Z and
            // a-z are one range once the case bit is set. The constants are made once, outside the loop: written in
            // the compares themselves, some of them were compared lane by lane, through memory.
            let caseBit = SIMD16<Int8>(repeating: 0x20)
            let (beforeA, afterZ) = (SIMD16<Int8>(repeating: 0x60), SIMD16<Int8>(repeating: 0x7B))
            let (beforeZero, afterNine) = (SIMD16<Int8>(repeating: 0x2F), SIMD16<Int8>(repeating: 0x3A))
            let (dash, dot) = (SIMD16<Int8>(repeating: 0x2D), SIMD16<Int8>(repeating: 0x2E))
            let (underscore, tilde) = (SIMD16<Int8>(repeating: 0x5F), SIMD16<Int8>(repeating: 0x7E))
            while index + 16 <= bytes.count {
                let chunk = UnsafeRawPointer(base + index).loadUnaligned(as: SIMD16<Int8>.self)
                let letter = chunk | caseBit
                let isLetter = (beforeA .< letter) .& (letter .< afterZ)
                let isDigit = (beforeZero .< chunk) .& (chunk .< afterNine)
                let isMark = (chunk .== dash) .| (chunk .== dot) .| (chunk .== underscore) .| (chunk .== tilde)
                if !all(isLetter .| isDigit .| isMark) { break }
                index += 16
            }
        }
        while index < bytes.count, unreserved[Int(bytes[index])] { index += 1 }
        return index
    }

    private static let hexDigits = Array("0123456789ABCDEF".utf8)

    /// Whether each byte is an unreserved character (RFC 3986, section 2.3), which a form keeps as it is.
    private static let unreserved: [Bool] = (0...255).map { byte in
        switch UInt8(byte) {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: "~"):
            true
        default:
            false
        }
    }

    /// Parses `name=value&…` (a redirect's query); `+` is a space.
    ///
    /// Nil when a percent escape is broken.
    public static func parse(_ text: some StringProtocol) -> [(name: String, value: String)]? {
        var result: [(String, String)] = []
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = decode(parts[0]), let value = decode(parts.count > 1 ? parts[1] : "") else {
                return nil
            }
            result.append((name, value))
        }
        return result
    }

    private static func decode(_ text: some StringProtocol) -> String? {
        String(text.replacingOccurrences(of: "+", with: " ")).removingPercentEncoding
    }
}
