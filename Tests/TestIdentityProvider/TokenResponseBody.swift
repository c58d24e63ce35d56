/// A successful token endpoint answer; optional members are left out when nil.
struct TokenResponseBody: Encodable {
    let tokenType: String
    let scope: String
    let expiresIn: Int
    let extExpiresIn: Int
    let refreshIn: Int?
    let accessToken: String
    let refreshToken: String
    let idToken: String
    let clientInfo: String?
    let foci: String?

    enum CodingKeys: String, CodingKey {
        case tokenType = "token_type"
        case scope
        case expiresIn = "expires_in"
        case extExpiresIn = "ext_expires_in"
        case refreshIn = "refresh_in"
        case accessToken = "access_token"
        case refreshToken = "refresh_token"
        case idToken = "id_token"
        case clientInfo = "client_info"
        case foci
    }
}

/// A successful answer of the v1 token endpoint (`oauth2/token`): numbers as decimal strings, as Entra sends them.
///
/// `expires_on` and `not_before` are epoch seconds; `scope` is always `user_impersonation`.
struct V1TokenResponseBody: Encodable {
    let tokenType: String
    let scope: String
    let expiresIn: String
    let extExpiresIn: String
    let expiresOn: String
    let notBefore: String
    let resource: String
    let accessToken: String
    let refreshToken: String
    let idToken: String
    let clientInfo: String?
    let foci: String?

    enum CodingKeys: String, CodingKey {
        case tokenType = "token_type"
        case scope
        case expiresIn = "expires_in"
        case extExpiresIn = "ext_expires_in"
        case expiresOn = "expires_on"
        case notBefore = "not_before"
        case resource
        case accessToken = "access_token"
        case refreshToken = "refresh_token"
        case idToken = "id_token"
        case clientInfo = "client_info"
        case foci
    }
}
