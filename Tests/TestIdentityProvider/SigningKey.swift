import BrokerProtocol
import Crypto
import CryptoExtras

/// The provider's RS256 signing key, made fresh at each start, and its public half as a JWKS.
struct SigningKey: Sendable {
    /// The JWKS document served at `discovery/v2.0/keys`.
    struct KeySet: Encodable, Sendable {
        /// The keys (one).
        let keys: [Key]
    }

    /// One public RSA key in JWK form.
    struct Key: Encodable, Sendable {
        let kty: String
        let use: String
        let alg: String
        let kid: String
        let n: String
        let e: String
    }

    /// The `kid` of the key: base64url of the first 20 bytes of the SHA-256 of the modulus.
    let keyID: String

    /// The public key as a JWKS.
    let keySet: KeySet

    private let privateKey: _RSA.Signing.PrivateKey

    /// Generates a 2048-bit RSA key; its `kid` is `keyID` when given (a forger's key passing for the provider's).
    init(keyID: String? = nil) throws {
        privateKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let primitives = try privateKey.publicKey.getKeyPrimitives()
        self.keyID = keyID ?? Base64URL.encode(Array(SHA256.hash(data: primitives.modulus).prefix(20)))
        keySet = KeySet(keys: [
            Key(
                kty: "RSA",
                use: "sig",
                alg: "RS256",
                kid: self.keyID,
                n: Base64URL.encode(primitives.modulus),
                e: Base64URL.encode(primitives.publicExponent)
            )
        ])
    }

    /// A compact JWS (RS256, PKCS#1 v1.5 over SHA-256) with `claims` as its payload.
    func signedJWT(_ claims: some Encodable) throws -> String {
        let encoder = WireEncoder()
        let header = Base64URL.encode(try encoder.encode(JWSHeader(typ: "JWT", alg: "RS256", kid: keyID)))
        let payload = Base64URL.encode(try encoder.encode(claims))
        let signingInput = "\(header).\(payload)"
        let signature = try privateKey.signature(
            for: SHA256.hash(data: Array(signingInput.utf8)),
            padding: .insecurePKCS1v1_5
        )
        return "\(signingInput).\(Base64URL.encode(signature.rawRepresentation))"
    }
}

/// The protected header of the provider's tokens.
struct JWSHeader: Encodable {
    let typ: String
    let alg: String
    let kid: String
}
