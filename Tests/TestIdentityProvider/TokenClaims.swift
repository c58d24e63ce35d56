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

/// The claims of an id token as Entra ID's v1 endpoint (`oauth2/token`) issues them, which ADAL reads.
///
/// ADAL takes `upn` as the user id (displayable), and `tid`, `oid`, `given_name` and `family_name` into its cache.
struct V1IDTokenClaims: Encodable {
    /// The `family_name` every user gets.
    static let familyName = "Tester"

    let aud: String
    let iss: String
    let iat: Int64
    let nbf: Int64
    let exp: Int64
    let familyName: String
    let givenName: String
    let name: String
    let oid: String
    let sub: String
    let tid: String
    let uniqueName: String
    let upn: String
    let ver: String

    enum CodingKeys: String, CodingKey {
        case aud, iss, iat, nbf, exp
        case familyName = "family_name"
        case givenName = "given_name"
        case name, oid, sub, tid
        case uniqueName = "unique_name"
        case upn, ver
    }
}
