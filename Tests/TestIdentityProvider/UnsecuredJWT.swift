import BrokerProtocol

/// Unsecured JWTs (RFC 7519 §6): header `{"typ":"JWT","alg":"none"}` and an empty signature, as in Entra's v1 id
/// tokens.
enum UnsecuredJWT {
    /// The protected header of an unsecured JWT.
    private struct Header: Encodable {
        let typ: String
        let alg: String
    }

    /// `base64url(header).base64url(claims).`: the compact form with an empty signature part.
    static func encode(_ claims: some Encodable) throws -> String {
        let encoder = WireEncoder()
        let header = Base64URL.encode(try encoder.encode(Header(typ: "JWT", alg: "none")))
        let payload = Base64URL.encode(try encoder.encode(claims))
        return "\(header).\(payload)."
    }
}
