import Glibc

/// Where a managed-identity endpoint listens: an IP address of this host and a port.
///
/// Only literal addresses: a name could resolve elsewhere tomorrow. Never the wildcard (`0.0.0.0`, `::`), which
/// would open the endpoint on every network the machine joins.
public struct ListenAddress: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The address as written, without brackets (`127.0.0.1`, `172.17.0.1`, `::1`).
    public let host: String
    /// The port; 0 before a bind picks one.
    public let port: Int

    /// The default: loopback, any port.
    public static let loopback = ListenAddress(validHost: "127.0.0.1", port: 0)

    private init(validHost host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `ADDRESS:PORT` or `[ADDRESS]:PORT`; nil with the reason when it is not a usable address.
    public static func parse(_ text: String) -> Result<ListenAddress, ListenAddressError> {
        let host: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                return .failure(ListenAddressError("write an IPv6 address as [ADDRESS]:PORT"))
            }
            host = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") else {
                return .failure(ListenAddressError("expected ADDRESS:PORT, such as 127.0.0.1:0 or 172.17.0.1:8181"))
            }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard !portText.isEmpty, portText.count <= 5, portText.allSatisfy({ $0.isASCII && $0.isNumber }),
            let port = Int(portText), port <= 65535
        else {
            return .failure(ListenAddressError("the port must be a number from 0 to 65535"))
        }
        return make(host: String(host), port: port)
    }

    /// The same address with `port` (the one a bind picked).
    public func with(port: Int) -> ListenAddress {
        ListenAddress(validHost: host, port: port)
    }

    /// Whether it is a loopback address (reachable from this host's own network namespace only).
    public var isLoopback: Bool {
        host.hasPrefix("127.") || host == "::1"
    }

    /// `127.0.0.1:8181`, `[::1]:8181`.
    public var description: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// The `IDENTITY_ENDPOINT` URL of a grant served here.
    public var endpointURL: String {
        "http://\(description)/msi/token"
    }

    private static func make(host: String, port: Int) -> Result<ListenAddress, ListenAddressError> {
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            let first = UInt8(truncatingIfNeeded: v4.s_addr)
            guard v4.s_addr != 0 else { return .failure(wildcard) }
            guard first < 224 else { return .failure(ListenAddressError("a multicast or broadcast address")) }
            return .success(
                ListenAddress(validHost: canonical(AF_INET, withUnsafeBytes(of: v4) { Array($0) }), port: port)
            )
        }
        if inet_pton(AF_INET6, host, &v6) == 1 {
            let bytes = withUnsafeBytes(of: v6) { Array($0) }
            guard bytes.contains(where: { $0 != 0 }) else { return .failure(wildcard) }
            guard bytes[0] != 0xff else { return .failure(ListenAddressError("a multicast address")) }
            // ::ffff:a.b.c.d binds the IPv4 address (::ffff:0.0.0.0 every one): the IPv4 form says what it is.
            if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xff, bytes[11] == 0xff {
                return .failure(ListenAddressError("an IPv4-mapped address: write the IPv4 address itself"))
            }
            // The kernel's spelling, which is what a connection's local address is compared with.
            return .success(ListenAddress(validHost: canonical(AF_INET6, bytes), port: port))
        }
        return .failure(ListenAddressError("not an IP address (names are not accepted): \(host.prefix(64))"))
    }

    private static func canonical(_ family: Int32, _ address: [UInt8]) -> String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let written = address.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &text, socklen_t(text.count)) }
        guard written != nil else { return "" }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static let wildcard = ListenAddressError(
        "the wildcard address would open the endpoint on every network; name one address, such as a container "
            + "bridge's (ip -brief address)"
    )

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        switch Self.parse(text) {
        case .success(let address): self = address
        case .failure(let error):
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.reason))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// Why a listen address was refused.
public struct ListenAddressError: Error, Sendable, CustomStringConvertible {
    /// The reason, for people.
    public let reason: String

    init(_ reason: String) {
        self.reason = reason
    }

    public var description: String {
        reason
    }
}
