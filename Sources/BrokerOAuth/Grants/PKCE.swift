public import BrokerProtocol
import Crypto

/// Proof Key for Code Exchange with S256 (RFC 7636): a random verifier kept by the broker, and its SHA-256
/// challenge sent with the authorization request.
public struct PKCE: Sendable {
    /// The only method the broker uses.
    public static let method = "S256"

    /// The verifier: 43 characters of base64url from 32 random bytes.
    ///
    /// Secret until redeemed.
    public let verifier: Secret
    /// `base64url(SHA256(verifier))`.
    public let challenge: String

    /// A fresh verifier and its challenge.
    public init() {
        self.init(verifier: Secret(RandomToken.make()))
    }

    /// The challenge of a given verifier (RFC 7636 appendix B).
    public init(verifier: Secret) {
        self.verifier = verifier
        challenge = Base64URL.encode(Array(SHA256.hash(data: Array(verifier.reveal().utf8))))
    }
}

/// Unguessable values for `state`, `nonce` and PKCE verifiers.
public enum RandomToken {
    /// 32 bytes from the system's CSPRNG (`getrandom` on Linux), base64url: 43 characters.
    public static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return Base64URL.encode(bytes)
    }
}
