public import Foundation

/// The parts of an OpenID Provider's discovery document (OpenID Connect Discovery 1.0 §3, RFC 8414) the broker
/// uses.
public struct ProviderMetadata: Sendable, Hashable, Decodable {
    /// The issuer; for Entra ID's multi-tenant authorities a template with `{tenantid}`.
    public var issuer: String
    /// Where the user signs in.
    public var authorizationEndpoint: URL
    /// Where codes, refresh tokens and device codes are redeemed.
    public var tokenEndpoint: URL
    /// RFC 8628's device authorization endpoint, when the provider offers the device code flow.
    public var deviceAuthorizationEndpoint: URL?
    /// The provider's signing keys.
    public var jwksURI: URL?
    /// The PKCE methods, when the provider lists them.
    public var codeChallengeMethodsSupported: [String]?
    /// The grant types, when the provider lists them.
    public var grantTypesSupported: [String]?

    /// Creates metadata.
    public init(
        issuer: String,
        authorizationEndpoint: URL,
        tokenEndpoint: URL,
        deviceAuthorizationEndpoint: URL? = nil,
        jwksURI: URL? = nil,
        codeChallengeMethodsSupported: [String]? = nil,
        grantTypesSupported: [String]? = nil
    ) {
        self.issuer = issuer
        self.authorizationEndpoint = authorizationEndpoint
        self.tokenEndpoint = tokenEndpoint
        self.deviceAuthorizationEndpoint = deviceAuthorizationEndpoint
        self.jwksURI = jwksURI
        self.codeChallengeMethodsSupported = codeChallengeMethodsSupported
        self.grantTypesSupported = grantTypesSupported
    }

    enum CodingKeys: String, CodingKey {
        case issuer
        case authorizationEndpoint = "authorization_endpoint"
        case tokenEndpoint = "token_endpoint"
        case deviceAuthorizationEndpoint = "device_authorization_endpoint"
        case jwksURI = "jwks_uri"
        case codeChallengeMethodsSupported = "code_challenge_methods_supported"
        case grantTypesSupported = "grant_types_supported"
    }

    /// Where an authority's discovery document is: `<authority>/v2.0/.well-known/openid-configuration` for Entra
    /// ID, `<issuer>/.well-known/openid-configuration` for the others.
    public static func discoveryURL(for authority: Authority) -> URL {
        // The authority is a normalized absolute URL, so appending a path keeps it one.
        URL(string: discoveryAddress(for: authority)) ?? authority.url
    }

    /// ``discoveryURL(for:)`` as text, which is what the directory keys its documents by: parsing the URL for every
    /// refresh cost about 5,600 instructions of each (callgrind).
    static func discoveryAddress(for authority: Authority) -> String {
        let suffix = authority.isEntra ? "/v2.0/.well-known/openid-configuration" : "/.well-known/openid-configuration"
        return authority.url.absoluteString + suffix
    }

    /// Checks the document belongs to `authority`: the issuer names it (OpenID Connect Discovery §4.3; one trailing
    /// slash is forgiven), and every endpoint is `https`, or `http` on a loopback host as the authority may be.
    public func validate(for authority: Authority) throws(DiscoveryError) {
        let expected = authority.url.absoluteString
        switch authority.kind {
        case .oidc:
            guard issuer == expected || issuer == expected + "/" else {
                throw DiscoveryError("the provider's issuer \(issuer) is not the authority \(expected)")
            }
        case .entra:
            // Entra ID names the tenant in the issuer (`…/<tenant id>/v2.0`, or the `{tenantid}` template for
            // multi-tenant authorities), on a host of the same cloud.
            guard let host = URLComponents(string: issuer).flatMap(Self.environment(of:)),
                authority.environmentAliases.contains(host)
            else {
                throw DiscoveryError("the provider's issuer \(issuer) is not on \(authority.environment)")
            }
        }
        for (name, endpoint) in [
            ("authorization_endpoint", authorizationEndpoint), ("token_endpoint", tokenEndpoint),
            ("device_authorization_endpoint", deviceAuthorizationEndpoint), ("jwks_uri", jwksURI),
        ] {
            guard let endpoint else { continue }
            guard let host = endpoint.host?.lowercased(),
                endpoint.scheme?.lowercased() == "https"
                    || (endpoint.scheme?.lowercased() == "http" && Authority.isLoopback(host))
            else {
                throw DiscoveryError("the provider's \(name) is not an https URL")
            }
        }
    }

    /// The issuer an id_token of tenant `tenantId` must carry: the template filled in.
    public func expectedIssuer(tenantId: String?) -> String {
        guard let tenantId else { return issuer }
        // A search of the bytes: the standard library's `firstRange(of:)` compares characters through generic
        // collection algorithms, and cost a refresh 31,000 instructions to find no template in a tenant's issuer;
        // Foundation's `contains` bridges both strings to NSString.
        var filled: String?
        var issuer = issuer
        issuer.withUTF8 { bytes in
            let placeholder = Self.tenantPlaceholder
            var start = 0
            var index = 0
            while index + placeholder.count <= bytes.count {
                guard bytes[index] == placeholder[0],
                    UnsafeBufferPointer(rebasing: bytes[index..<index + placeholder.count]).elementsEqual(placeholder)
                else {
                    index += 1
                    continue
                }
                filled = (filled ?? "") + String(decoding: bytes[start..<index], as: UTF8.self) + tenantId
                index += placeholder.count
                start = index
            }
            if let done = filled { filled = done + String(decoding: bytes[start...], as: UTF8.self) }
        }
        return filled ?? issuer
    }

    private static let tenantPlaceholder = Array("{tenantid}".utf8)

    private static func environment(of components: URLComponents) -> String? {
        guard let host = components.host?.lowercased() else { return nil }
        let defaultPort = components.scheme?.lowercased() == "http" ? 80 : 443
        guard let port = components.port, port != defaultPort else { return host }
        return "\(host):\(port)"
    }
}

/// Why an authority's discovery document could not be used.
public struct DiscoveryError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong.
    public var reason: String

    init(_ reason: String) {
        self.reason = reason
    }

    /// The reason.
    public var description: String {
        reason
    }
}
