import BrokerOAuth
import BrokerProtocol
import Crypto
import CryptoExtras
import Foundation
import Synchronization

/// Signs JWTs the way a provider does, with keys made for the test.
struct TestSigner {
    enum Key {
        case rsa(_RSA.Signing.PrivateKey)
        case p256(P256.Signing.PrivateKey)
    }

    let key: Key
    let keyId: String

    static func rsa(keyId: String = "rsa-1") throws -> TestSigner {
        TestSigner(key: .rsa(try _RSA.Signing.PrivateKey(keySize: .bits2048)), keyId: keyId)
    }

    static func p256(keyId: String = "ec-1") -> TestSigner {
        TestSigner(key: .p256(P256.Signing.PrivateKey()), keyId: keyId)
    }

    var algorithm: String {
        switch key {
        case .rsa: "RS256"
        case .p256: "ES256"
        }
    }

    /// The public key as a JWK.
    var jwk: [String: Any] {
        switch key {
        case .rsa(let key):
            guard let primitives = try? key.publicKey.getKeyPrimitives() else { preconditionFailure("RSA key") }
            let (n, e) = (Base64URL.encode(primitives.modulus), Base64URL.encode(primitives.publicExponent))
            return ["kty": "RSA", "kid": keyId, "use": "sig", "alg": "RS256", "n": n, "e": e]
        case .p256(let key):
            let point = Array(key.publicKey.x963Representation.dropFirst())
            return [
                "kty": "EC", "kid": keyId, "crv": "P-256", "x": Base64URL.encode(point[0..<32]),
                "y": Base64URL.encode(point[32..<64]),
            ]
        }
    }

    func sign(_ claims: [String: Any], header: [String: Any]? = nil) throws -> String {
        let header = header ?? ["alg": algorithm, "kid": keyId, "typ": "JWT"]
        let input =
            Base64URL.encode(try JSONSerialization.data(withJSONObject: header)) + "."
            + Base64URL.encode(try JSONSerialization.data(withJSONObject: claims))
        let signature: [UInt8]
        switch key {
        case .rsa(let key):
            signature = Array(
                try key.signature(for: SHA256.hash(data: Array(input.utf8)), padding: .insecurePKCS1v1_5)
                    .rawRepresentation
            )
        case .p256(let key):
            signature = Array(try key.signature(for: Array(input.utf8)).rawRepresentation)
        }
        return input + "." + Base64URL.encode(signature)
    }
}
