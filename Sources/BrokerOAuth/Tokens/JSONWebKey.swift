public import BrokerProtocol
import Crypto
import CryptoExtras
import Foundation

/// One public key of a provider's JWKS (RFC 7517): RSA or an elliptic curve, with what it may verify.
public struct JSONWebKey: Sendable {
    /// The key id.
    public let keyId: String?
    /// `sig`, `enc` or nil.
    public let use: String?
    /// The algorithm the key is for, when the provider says.
    public let algorithm: String?
    private let material: Material

    private enum Material: Sendable {
        case rsa(_RSA.Signing.PublicKey)
        case p256(P256.Signing.PublicKey)
        case p384(P384.Signing.PublicKey)
    }

    /// Reads one key; nil for kinds the broker does not verify with (symmetric keys, other curves) or broken ones.
    public init?(_ object: [String: JSONValue]) {
        keyId = object["kid"]?.stringValue
        use = object["use"]?.stringValue
        algorithm = object["alg"]?.stringValue
        switch object["kty"]?.stringValue {
        case "RSA":
            guard let n = object["n"]?.stringValue.flatMap(Base64URL.decode),
                let e = object["e"]?.stringValue.flatMap(Base64URL.decode),
                let key = try? _RSA.Signing.PublicKey(n: n, e: e)
            else { return nil }
            material = .rsa(key)
        case "EC":
            guard let x = object["x"]?.stringValue.flatMap(Base64URL.decode),
                let y = object["y"]?.stringValue.flatMap(Base64URL.decode)
            else { return nil }
            let point = [0x04] + Array(x) + Array(y)
            switch object["crv"]?.stringValue {
            case "P-256":
                guard let key = try? P256.Signing.PublicKey(x963Representation: point) else { return nil }
                material = .p256(key)
            case "P-384":
                guard let key = try? P384.Signing.PublicKey(x963Representation: point) else { return nil }
                material = .p384(key)
            default:
                return nil
            }
        default:
            return nil
        }
    }

    /// The JWS algorithms verified here: RSA PKCS#1 v1.5 and PSS with SHA-2, and ECDSA on P-256 and P-384.
    public static let supportedAlgorithms: Set<String> = [
        "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
    ]

    /// Whether this key can check a signature made with `algorithm`.
    public func fits(_ algorithm: String) -> Bool {
        guard use == nil || use == "sig", self.algorithm == nil || self.algorithm == algorithm else { return false }
        switch material {
        case .rsa: return algorithm.hasPrefix("RS") || algorithm.hasPrefix("PS")
        case .p256: return algorithm == "ES256"
        case .p384: return algorithm == "ES384"
        }
    }

    /// Whether `signature` over `input` is valid under `algorithm` with this key.
    public func verifies(_ signature: [UInt8], over input: [UInt8], algorithm: String) -> Bool {
        guard fits(algorithm) else { return false }
        switch material {
        case .rsa(let key):
            let padding: _RSA.Signing.Padding = algorithm.hasPrefix("PS") ? .PSS : .insecurePKCS1v1_5
            let rsaSignature = _RSA.Signing.RSASignature(rawRepresentation: signature)
            switch algorithm.dropFirst(2) {
            case "256": return key.isValidSignature(rsaSignature, for: SHA256.hash(data: input), padding: padding)
            case "384": return key.isValidSignature(rsaSignature, for: SHA384.hash(data: input), padding: padding)
            case "512": return key.isValidSignature(rsaSignature, for: SHA512.hash(data: input), padding: padding)
            default: return false
            }
        case .p256(let key):
            guard let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
            return key.isValidSignature(ecdsa, for: SHA256.hash(data: input))
        case .p384(let key):
            guard let ecdsa = try? P384.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
            return key.isValidSignature(ecdsa, for: SHA384.hash(data: input))
        }
    }

    /// The usable keys of a JWKS document (`{"keys": [...]}`); keys of unknown kinds are skipped.
    public static func keySet(body: [UInt8]) throws(IDTokenError) -> [JSONWebKey] {
        guard let object = try? JSONValue.parse(body).objectValue, case .array(let keys)? = object["keys"] else {
            throw IDTokenError("the provider's JWKS is not a JSON object with keys")
        }
        return keys.compactMap { $0.objectValue.flatMap(JSONWebKey.init) }
    }
}
