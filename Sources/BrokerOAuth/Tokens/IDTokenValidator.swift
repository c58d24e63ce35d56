public import BrokerProtocol

/// Checks an id_token the way OpenID Connect Core §3.1.3.7 asks (and MSAL Python does): `iss`, `aud` (and `azp`
/// when there are several audiences), `exp` and `nbf` with a 120-second skew, `nonce`, and the signature against
/// the issuer's JWKS when the provider publishes one.
///
/// Without a `jwks_uri` the token is trusted on the strength of the TLS connection it came over, which Core
/// §3.1.3.7 allows for tokens from the token endpoint. So is a refresh's token that names the account the refresh
/// was for (see `knownSubject`).
public struct IDTokenValidator: Sendable {
    /// The clock skew allowed on `exp` and `nbf`, in seconds.
    public static let clockSkew: Int64 = 120

    /// The provider the token must come from.
    public let metadata: ProviderMetadata
    /// The client the token must be for.
    public let clientId: String

    /// Creates a validator.
    public init(metadata: ProviderMetadata, clientId: String) {
        self.metadata = metadata
        self.clientId = clientId
    }

    /// Checks `idToken` and returns it parsed.
    ///
    /// `nonce` is the one sent in the authorization request (nil for tokens from a refresh or a device code),
    /// `now` the time in epoch seconds, `keys` the issuer's signing keys (nil when it publishes none).
    ///
    /// `knownSubject` is, for a refresh, the `local_account_id` of the account whose refresh token was redeemed (the
    /// `oid`, else `sub`, that an earlier answer or an imported cache gave it). A token naming that same person
    /// (`oid`, else `sub`) is not checked against `keys`: it came straight from the token endpoint, over the
    /// connection that carried the account's refresh token, which Core §3.1.3.7 (step 6) lets stand in for the
    /// signature; the keys themselves come over the same kind of connection. Its other claims (the tenant, the
    /// username, the names) are then taken on that connection's word, as the response's unsigned `client_info`,
    /// which places the account, always was. The signature, an RSA verification, was a quarter of a refresh's
    /// instructions. A token naming anyone else is checked in full.
    public func validate(
        _ idToken: Secret,
        nonce: String?,
        now: Int64,
        keys: SigningKeys?,
        knownSubject: String? = nil
    ) async throws(IDTokenError) -> JSONWebToken {
        let token = try JSONWebToken(compact: idToken.reveal())
        // The signature first (the subject is read to know whether it is needed): nothing else in a token that does
        // not verify is worth reading.
        if let keys {
            guard let algorithm = token.algorithm, JSONWebKey.supportedAlgorithms.contains(algorithm) else {
                throw IDTokenError("the id_token's algorithm \(token.algorithm ?? "(none)") is not accepted")
            }
            if !names(token, knownSubject) { try await verifySignature(of: token, algorithm: algorithm, with: keys) }
        }
        let expectedIssuer = metadata.expectedIssuer(tenantId: token.string("tid"))
        guard let issuer = token.string("iss"), issuer == expectedIssuer else {
            throw IDTokenError("the id_token's issuer is not \(expectedIssuer)")
        }
        let audiences = token.audiences
        guard audiences.contains(clientId) else { throw IDTokenError("the id_token is not for client \(clientId)") }
        if audiences.count > 1, token.string("azp") != clientId {
            throw IDTokenError("the id_token has several audiences and its azp is not client \(clientId)")
        }
        guard let expires = token.seconds("exp") else { throw IDTokenError("the id_token has no exp") }
        guard now <= expires + Self.clockSkew else { throw IDTokenError("the id_token has expired") }
        if let notBefore = token.seconds("nbf"), now < notBefore - Self.clockSkew {
            throw IDTokenError("the id_token is not valid yet (nbf)")
        }
        if let nonce, token.string("nonce") != nonce {
            throw IDTokenError("the id_token's nonce is not the one sent")
        }
        return token
    }

    /// Whether `token` names `subject` (`oid`, else `sub`).
    private func names(_ token: JSONWebToken, _ subject: String?) -> Bool {
        guard let subject, !subject.isEmpty else { return false }
        return (token.string("oid") ?? token.string("sub")) == subject
    }

    private func verifySignature(
        of token: JSONWebToken,
        algorithm: String,
        with keys: SigningKeys
    ) async throws(IDTokenError) {
        let candidates = try await keys.keys(for: token.keyId, algorithm: algorithm)
        guard !candidates.isEmpty else {
            throw IDTokenError("no key of the issuer's JWKS matches the id_token (kid \(token.keyId ?? "none"))")
        }
        guard
            candidates.contains(where: { $0.verifies(token.signature, over: token.signingInput, algorithm: algorithm) })
        else { throw IDTokenError("the id_token's signature does not verify with the issuer's keys") }
    }
}
