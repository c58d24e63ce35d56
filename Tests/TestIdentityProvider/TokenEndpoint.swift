import Foundation
import NIOHTTP1

/// `POST /{tenant}/oauth2/v2.0/token` and `POST /{tenant}/oauth2/token`: faults and delays, the grant, then tokens.
///
/// Both endpoints share the refresh-token store, so a refresh token issued at one is redeemable at the other. They
/// differ in what a request names (`scope` or `resource`) and in the shape of the success body.
struct TokenEndpoint: Sendable {
    /// Which of Entra ID's two token endpoints this is.
    enum Version: Sendable {
        /// `oauth2/v2.0/token` (MSAL): `scope`, numeric lifetimes, a signed v2.0 id token.
        case v2

        /// `oauth2/token` (ADAL): `resource`, lifetimes as strings, an unsigned v1 id token.
        case v1

        /// The grant types this endpoint redeems.
        var grantTypes: [String] {
            switch self {
            case .v2:
                [TokenEndpoint.authorizationCodeGrant, TokenEndpoint.refreshTokenGrant, TokenEndpoint.deviceCodeGrant]
            case .v1: [TokenEndpoint.authorizationCodeGrant, TokenEndpoint.refreshTokenGrant]
            }
        }
    }

    /// The authorization code grant type.
    static let authorizationCodeGrant = "authorization_code"

    /// The refresh token grant type.
    static let refreshTokenGrant = "refresh_token"

    /// The device code grant type (v2 only).
    static let deviceCodeGrant = "urn:ietf:params:oauth:grant-type:device_code"

    let provider: IdentityProvider
    let minter: TokenMinter
    let version: Version

    /// Answers one token request; the `client-request-id` header comes back as a header and as `correlation_id`.
    ///
    /// A delay (`/_test/delay`, a fault's `delayMs`) is waited out here, in the connection's task, after the answer
    /// is worked out; the provider counts the answers waiting at once. So is a hold (`/_test/hold`), until
    /// `/_test/release`.
    func handle(_ request: HTTPRequest) async -> HTTPResponse {
        let started = ContinuousClock.now
        let (response, delay) = await respond(to: request)
        if version == .v2 { await provider.recordTokenAnswer(took: ContinuousClock.now - started) }
        if delay > .zero {
            await provider.delayStarted()
            try? await Task.sleep(for: delay)
            await provider.delayEnded()
        }
        await provider.holdIfHeld()
        return response
    }

    private func respond(to request: HTTPRequest) async -> (HTTPResponse, delay: Duration) {
        let now = Date()
        let correlationID = request.header("client-request-id") ?? Random.uuid()
        let form = request.form
        let admission = await provider.admitTokenRequest(grantType: form["grant_type"], version: version)
        var response: HTTPResponse
        if let fault = admission.fault, !fault.passesThrough {
            response = fault.entraError.response(correlationID: correlationID, now: now)
        } else {
            response = await answer(form, forgery: admission.forgery, correlationID: correlationID, now: now)
        }
        response.headers.replaceOrAdd(name: "client-request-id", value: correlationID)
        response.headers.replaceOrAdd(name: "Cache-Control", value: "no-store, no-cache")
        response.headers.replaceOrAdd(name: "Pragma", value: "no-cache")
        return (response, admission.delay)
    }

    private func answer(
        _ form: [String: String],
        forgery: IDTokenForgery?,
        correlationID: String,
        now: Date
    ) async -> HTTPResponse {
        switch await decide(form, now: now) {
        case .success(let grant):
            do {
                let includeClientInfo = form["client_info"] == "1"
                if let resource = grant.resource {
                    return .json(
                        try minter.v1Body(
                            for: grant.issued,
                            resource: resource,
                            includeClientInfo: includeClientInfo,
                            now: now
                        )
                    )
                }
                return .json(
                    try minter.body(
                        for: grant.issued,
                        includeClientInfo: includeClientInfo,
                        forgery: forgery,
                        now: now
                    )
                )
            } catch {
                Log.info("cannot sign tokens: \(error)")
                return EntraError(
                    "server_error",
                    code: 90033,
                    "A transient error has occurred.",
                    status: .internalServerError
                )
                .response(correlationID: correlationID, now: now)
            }
        case .failure(let failure):
            return failure.response(correlationID: correlationID, now: now)
        }
    }

    /// Checks the request in Entra's order (grant type, client, known client, supported grant, then the v1
    /// `resource`), and lets the provider decide the grant.
    ///
    /// A v1 request's `resource` stands for the scope `<resource>/.default`, which replaces any `scope` it sent.
    private func decide(_ form: [String: String], now: Date) async -> Result<GrantedRequest, EntraError> {
        let configuration = minter.configuration
        guard let grantType = form["grant_type"], !grantType.isEmpty else { return .failure(.missing("grant_type")) }
        guard let clientID = form["client_id"]?.lowercased(), !clientID.isEmpty else {
            return .failure(.missing("client_id"))
        }
        guard configuration.isKnownClient(clientID) else {
            return .failure(.unknownClient(clientID, tenantID: configuration.tenantID))
        }
        guard version.grantTypes.contains(grantType) else { return .failure(.unsupportedGrantType(grantType)) }
        var form = form
        var resource: String?
        if version == .v1 {
            guard let requested = form["resource"], !requested.isEmpty else { return .failure(.missingResource) }
            resource = requested
            form["scope"] = V1Resource.scope(for: requested)
        }
        let outcome: Result<IssuedGrant, EntraError>
        switch grantType {
        case Self.authorizationCodeGrant:
            outcome = await provider.redeemAuthorizationCode(form, clientID: clientID, now: now)
        case Self.refreshTokenGrant:
            outcome = await provider.redeemRefreshToken(form, clientID: clientID, now: now)
        default:
            outcome = await provider.redeemDeviceCode(form, clientID: clientID, now: now)
        }
        return outcome.map { GrantedRequest(issued: $0, resource: resource) }
    }
}

/// A token request the provider granted, and the v1 `resource` when it came to the v1 endpoint.
private struct GrantedRequest {
    /// What the grant decided.
    let issued: IssuedGrant

    /// The v1 `resource` the answer echoes; nil for the v2 endpoint.
    let resource: String?
}

/// How the v1 endpoint's `resource` maps onto v2 scopes.
enum V1Resource {
    /// The v2 scope a v1 `resource` stands for: `<resource>/.default`.
    ///
    /// As in Entra, a resource ending in `/` keeps it, so `https://management.core.windows.net/` becomes
    /// `https://management.core.windows.net//.default`, and the access token's `aud` (the scope up to its last `/`)
    /// is the resource exactly as sent.
    static func scope(for resource: String) -> String {
        "\(resource)/.default"
    }
}
