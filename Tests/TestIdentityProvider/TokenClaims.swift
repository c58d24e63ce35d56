/// The claims of an id token, as Entra ID's v2.0 endpoint issues them.
struct IDTokenClaims: Encodable {
    let aud: String
    let iss: String
    let iat: Int64
    let nbf: Int64
    let exp: Int64
    let name: String
    let nonce: String?
    let oid: String
    let preferredUsername: String
    let sub: String
    let tid: String
    let ver: String

    enum CodingKeys: String, CodingKey {
        case aud, iss, iat, nbf, exp, name, nonce, oid
        case preferredUsername = "preferred_username"
        case sub, tid, ver
    }
}

/// The claims of an access token; the `jti` makes every token unique.
struct AccessTokenClaims: Encodable {
    let aud: String
    let iss: String
    let iat: Int64
    let nbf: Int64
    let exp: Int64
    let appid: String
    let name: String
    let oid: String
    let preferredUsername: String
    let scp: String
    let sub: String
    let tid: String
    let ver: String
    let jti: String

    enum CodingKeys: String, CodingKey {
        case aud, iss, iat, nbf, exp, appid, name, oid
        case preferredUsername = "preferred_username"
        case scp, sub, tid, ver, jti
    }
}

/// The decoded `client_info`: the user's object id and tenant id, which MSAL joins into the home account id.
struct ClientInfo: Encodable {
    let uid: String
    let utid: String
}
