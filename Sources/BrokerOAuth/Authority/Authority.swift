import BrokerProtocol
public import Foundation

/// An authority: where users sign in and tokens come from.
///
/// - Entra ID: `https://login.microsoftonline.com/<tenant>`, where the tenant is `common`, `organizations`,
///   `consumers`, a tenant id or a domain. Hosts of Microsoft's clouds are known; more can be configured
///   (Azure Stack, a test provider).
/// - Any OpenID Connect issuer, found through `/.well-known/openid-configuration`.
///
/// Only `https`, except `http` on loopback hosts (a local test provider). No query, fragment or credentials.
public struct Authority: Sendable, Hashable, CustomStringConvertible {
    /// What kind of provider.
    public enum Kind: Sendable, Hashable {
        /// Entra ID (Azure AD v2.0 endpoints, `client_info`, FOCI) with its tenant segment.
        case entra(tenant: String)
        /// A generic OpenID Connect issuer.
        case oidc
    }

    /// The authority URL, normalized: lowercase scheme and host, no trailing slash.
    public let url: URL
    /// What kind of provider.
    public let kind: Kind
    /// The host (and `:port` when not the scheme's default): MSAL's `environment`.
    public let environment: String
    /// The tenant (Entra ID) or the issuer path (other providers): the cache's `realm` when it is fixed.
    ///
    /// Nil for `common`, `organizations` and domain tenants, whose realm is the account's tenant.
    public let fixedRealm: String?
    /// The environments a cache entry may carry for this authority: the host and its aliases.
    public let environmentAliases: Set<String>

    /// The Entra ID hosts of Microsoft's clouds, grouped by the aliases MSAL treats as one.
    public static let entraAliasGroups: [Set<String>] = [
        ["login.microsoftonline.com", "login.windows.net", "login.microsoft.com", "sts.windows.net"],
        ["login.partner.microsoftonline.cn", "login.chinacloudapi.cn"],
        ["login.microsoftonline.us", "login.usgovcloudapi.net"],
    ]

    /// The tenants that are not a tenant: any organization, any work account, any personal account.
    public static let tenantlessTenants: Set<String> = ["common", "organizations", "consumers"]

    /// The default authority, as in MSAL.
    public static let defaultURL = "https://login.microsoftonline.com/common"

    /// Parses an authority.
    ///
    /// `entraHosts` adds hosts (`host` or `host:port`) to treat as Entra ID.
    public init(parsing string: String, entraHosts: Set<String> = []) throws(AuthorityError) {
        guard let components = URLComponents(string: string), let scheme = components.scheme?.lowercased(),
            let host = components.host?.lowercased(), !host.isEmpty
        else { throw AuthorityError("the authority is not an absolute URL") }
        guard components.query == nil, components.fragment == nil, components.user == nil,
            components.password == nil
        else { throw AuthorityError("the authority must not carry a query, fragment or credentials") }
        switch scheme {
        case "https": break
        case "http" where Self.isLoopback(host): break
        case "http": throw AuthorityError("plain http is allowed only for loopback hosts (127.0.0.1, ::1, localhost)")
        default: throw AuthorityError("the authority must be an https URL")
        }
        let defaultPort = scheme == "https" ? 443 : 80
        let hostPart = host.contains(":") ? "[\(host)]" : host
        let environment = components.port.map { $0 == defaultPort ? hostPart : "\(hostPart):\($0)" } ?? hostPart
        let segments = components.path.split(separator: "/").map(String.init)

        var normalized = URLComponents()
        normalized.scheme = scheme
        normalized.host = host
        normalized.port = components.port == defaultPort ? nil : components.port
        normalized.path = segments.isEmpty ? "" : "/" + segments.joined(separator: "/")
        guard let url = normalized.url else { throw AuthorityError("the authority is not a valid URL") }

        let isEntraHost =
            Self.entraAliasGroups.contains { $0.contains(environment) } || entraHosts.contains(environment)
        if isEntraHost {
            guard segments.count == 1, let tenant = segments.first?.lowercased() else {
                throw AuthorityError("an Entra ID authority is https://<host>/<tenant>")
            }
            self.kind = .entra(tenant: tenant)
        } else {
            self.kind = .oidc
        }
        self.url = url
        self.environment = environment
        switch kind {
        case .entra(let tenant) where tenant == "consumers": fixedRealm = Self.consumersTenantId
        case .entra(let tenant): fixedRealm = UUID(uuidString: tenant) != nil ? tenant : nil
        case .oidc: fixedRealm = segments.joined(separator: "/")
        }
        environmentAliases = Self.entraAliasGroups.first { $0.contains(environment) } ?? [environment]
    }

    /// The Microsoft-account tenant `consumers` resolves to.
    public static let consumersTenantId = "9188040d-6c67-4c5b-b112-36a304b66dad"

    /// Whether this is an Entra ID authority.
    public var isEntra: Bool {
        if case .entra = kind { return true }
        return false
    }

    /// The URL.
    public var description: String {
        url.absoluteString
    }

    /// Whether `host` is a loopback address (127.0.0.0/8, ::1) or exactly `localhost`: never a name that merely
    /// starts with `127.`.
    public static func isLoopback(_ host: String) -> Bool {
        LoopbackHost.contains(host)
    }
}

/// Why an authority was refused.
public struct AuthorityError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong.
    public let reason: String

    init(_ reason: String) {
        self.reason = reason
    }

    /// The reason.
    public var description: String {
        reason
    }
}
