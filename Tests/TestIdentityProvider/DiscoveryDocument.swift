/// The OpenID Provider Configuration of one `{tenant}` path, shaped like Entra ID's v2.0 document.
struct DiscoveryDocument: Encodable {
    let issuer: String
    let authorizationEndpoint: String
    let tokenEndpoint: String
    let deviceAuthorizationEndpoint: String
    let jwksURI: String
    let responseTypesSupported: [String]
    let responseModesSupported: [String]
    let codeChallengeMethodsSupported: [String]
    let grantTypesSupported: [String]
    let subjectTypesSupported: [String]
    let idTokenSigningAlgValuesSupported: [String]
    let tokenEndpointAuthMethodsSupported: [String]
    let scopesSupported: [String]
    let claimsSupported: [String]
    let requestURIParameterSupported: Bool
    let tenantRegionScope: String?

    enum CodingKeys: String, CodingKey {
        case issuer
        case authorizationEndpoint = "authorization_endpoint"
        case tokenEndpoint = "token_endpoint"
        case deviceAuthorizationEndpoint = "device_authorization_endpoint"
        case jwksURI = "jwks_uri"
        case responseTypesSupported = "response_types_supported"
        case responseModesSupported = "response_modes_supported"
        case codeChallengeMethodsSupported = "code_challenge_methods_supported"
        case grantTypesSupported = "grant_types_supported"
        case subjectTypesSupported = "subject_types_supported"
        case idTokenSigningAlgValuesSupported = "id_token_signing_alg_values_supported"
        case tokenEndpointAuthMethodsSupported = "token_endpoint_auth_methods_supported"
        case scopesSupported = "scopes_supported"
        case claimsSupported = "claims_supported"
        case requestURIParameterSupported = "request_uri_parameter_supported"
        case tenantRegionScope = "tenant_region_scope"
    }

    /// The document for `tenant` as it appears in the path (the tenant id, `common` or `organizations`).
    ///
    /// Endpoints keep the tenant of the path. The issuer is the tenant's for the tenant id, and Entra's literal
    /// `{tenantid}` template for `common` and `organizations`, which clients fill in from the id token's `tid`.
    init(tenant: String, configuration: ProviderConfiguration) {
        let base = "\(configuration.baseURL)/\(tenant)"
        issuer =
            tenant.lowercased() == configuration.tenantID
            ? configuration.issuer : "\(configuration.baseURL)/{tenantid}/v2.0"
        authorizationEndpoint = "\(base)/oauth2/v2.0/authorize"
        tokenEndpoint = "\(base)/oauth2/v2.0/token"
        deviceAuthorizationEndpoint = "\(base)/oauth2/v2.0/devicecode"
        jwksURI = "\(base)/discovery/v2.0/keys"
        responseTypesSupported = ["code"]
        responseModesSupported = ["query"]
        codeChallengeMethodsSupported = ["S256"]
        grantTypesSupported = ["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"]
        subjectTypesSupported = ["pairwise"]
        idTokenSigningAlgValuesSupported = ["RS256"]
        tokenEndpointAuthMethodsSupported = ["none"]
        scopesSupported = ["openid", "profile", "email", "offline_access"]
        claimsSupported = [
            "sub", "iss", "aud", "exp", "iat", "nbf", "nonce", "preferred_username", "name", "oid", "tid", "ver",
        ]
        requestURIParameterSupported = false
        tenantRegionScope = nil
    }
}
