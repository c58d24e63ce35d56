import NIOHTTP1

/// Maps a request's method and path to the endpoint that answers it.
struct Router: Sendable {
    let configuration: ProviderConfiguration
    let key: SigningKey
    let authorize: AuthorizeEndpoint
    let token: TokenEndpoint
    let v1Token: TokenEndpoint
    let deviceCode: DeviceCodeEndpoint
    let deviceLogin: DeviceLoginEndpoint
    let control: TestControlEndpoint

    /// Wires the endpoints to one provider and key.
    init(provider: IdentityProvider, key: SigningKey) {
        configuration = provider.configuration
        self.key = key
        authorize = AuthorizeEndpoint(provider: provider, configuration: configuration)
        let minter = TokenMinter(key: key, configuration: configuration)
        token = TokenEndpoint(provider: provider, minter: minter, version: .v2)
        v1Token = TokenEndpoint(provider: provider, minter: minter, version: .v1)
        deviceCode = DeviceCodeEndpoint(provider: provider, configuration: configuration)
        deviceLogin = DeviceLoginEndpoint(provider: provider)
        control = TestControlEndpoint(provider: provider, key: key)
    }

    /// Answers one request.
    func handle(_ request: HTTPRequest) async -> HTTPResponse {
        let segments = request.path.split(separator: "/").map(String.init)
        guard let first = segments.first else { return .notFound("no such path: \(request.path)") }
        switch (first, segments.count) {
        case ("_test", 2):
            return await control.handle(request, action: segments[1])
        case ("devicelogin", 1):
            guard request.method == .GET || request.method == .POST else { return .methodNotAllowed("GET, POST") }
            return await deviceLogin.handle(request)
        default:
            return await tenantRoute(request, tenant: first, rest: Array(segments.dropFirst()))
        }
    }

    /// The endpoints under `/{tenant}/`.
    private func tenantRoute(_ request: HTTPRequest, tenant: String, rest: [String]) async -> HTTPResponse {
        let allowed: [HTTPMethod]
        switch rest {
        case ["v2.0", ".well-known", "openid-configuration"], ["discovery", "v2.0", "keys"]: allowed = [.GET]
        case ["oauth2", "v2.0", "authorize"]: allowed = [.GET, .POST]
        case ["oauth2", "v2.0", "token"], ["oauth2", "v2.0", "devicecode"], ["oauth2", "token"]: allowed = [.POST]
        default: return .notFound("no such path: \(request.path)")
        }
        guard configuration.acceptsTenant(tenant) else {
            return EntraError.unknownTenant(tenant).response(
                correlationID: request.header("client-request-id") ?? Random.uuid()
            )
        }
        guard allowed.contains(request.method) else {
            return .methodNotAllowed(allowed.map(\.rawValue).joined(separator: ", "))
        }
        switch rest.last {
        case "openid-configuration":
            return .json(DiscoveryDocument(tenant: tenant, configuration: configuration))
        case "keys":
            return .json(key.keySet)
        case "authorize":
            return await authorize.handle(request)
        case "token":
            // `oauth2/token` is the v1 endpoint, `oauth2/v2.0/token` the v2.0 one.
            return await (rest.count == 2 ? v1Token : token).handle(request)
        default:
            return await deviceCode.handle(request)
        }
    }
}
