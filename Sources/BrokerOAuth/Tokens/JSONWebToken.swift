public import BrokerProtocol
import BrokerTime
import Foundation

/// A JWS in compact form (RFC 7515 §7.1), split and decoded but not yet trusted.
public struct JSONWebToken: Sendable {
    /// The protected header.
    public let header: [String: JSONValue]
    /// The payload's claims.
    public let claims: [String: JSONValue]
    /// `base64url(header) "." base64url(payload)`: what the signature covers.
    let signingInput: [UInt8]
    /// The signature bytes.
    let signature: [UInt8]

    /// Splits and decodes `compact`; the signature is not checked here.
    public init(compact: String) throws(IDTokenError) {
        guard let jws = CompactJWS.parts(of: compact) else {
            throw IDTokenError("the id_token is not a compact JWS (three parts)")
        }
        guard let payloadBytes = Base64URL.decode(utf8: jws.bytes[jws.payload]),
            let signature = Base64URL.decode(utf8: jws.bytes[jws.signature])
        else { throw IDTokenError("the id_token is not base64url") }
        // A provider's tokens share one header (its algorithm and key): the last one is decoded once.
        let encodedHeader = Array(jws.bytes[jws.header])
        guard let header = Self.lastHeader.value(of: encodedHeader, Self.decodeHeader) else {
            let base64 = Base64URL.decode(utf8: encodedHeader) != nil
            throw IDTokenError(base64 ? "the id_token's header is not a JSON object" : "the id_token is not base64url")
        }
        guard let claims = try? JSONValue.parse(Array(payloadBytes)).objectValue else {
            throw IDTokenError("the id_token's claims are not a JSON object")
        }
        self.header = header
        self.claims = claims
        self.signingInput = Array(jws.bytes[jws.header.lowerBound..<jws.payload.upperBound])
        self.signature = Array(signature)
    }

    /// The last protected header decoded, by its base64url text.
    private static let lastHeader = LastDecoded<[UInt8], [String: JSONValue]>()

    /// A protected header's JSON object, from its base64url text; nil when it is not one.
    private static func decodeHeader(_ encoded: [UInt8]) -> [String: JSONValue]? {
        Base64URL.decode(utf8: encoded).flatMap { try? JSONValue.parse(Array($0)).objectValue }
    }

    /// The signing algorithm (`alg`).
    public var algorithm: String? {
        header["alg"]?.stringValue
    }

    /// The key id (`kid`).
    public var keyId: String? {
        header["kid"]?.stringValue
    }

    /// A string claim.
    public func string(_ name: String) -> String? {
        claims[name]?.stringValue
    }

    /// A numeric date claim, in epoch seconds (fractions dropped).
    public func seconds(_ name: String) -> Int64? {
        switch claims[name] {
        case .integer(let value)?: value
        case .number(let value)? where value.isFinite && abs(value) < 1e15: Int64(value)
        default: nil
        }
    }

    /// The audiences: `aud` as a string or an array of strings.
    public var audiences: [String] {
        switch claims["aud"] {
        case .string(let value)?: [value]
        case .array(let values)?: values.compactMap(\.stringValue)
        default: []
        }
    }
}

/// Why an id_token was refused.
public struct IDTokenError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong; never the token.
    public var reason: String

    init(_ reason: String) {
        self.reason = reason
    }

    /// The reason.
    public var description: String {
        reason
    }
}
