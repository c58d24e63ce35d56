import Foundation
import NIOHTTP1

/// `POST /{tenant}/oauth2/v2.0/token`: faults and delays first, then the grant, then signed tokens.
struct TokenEndpoint: Sendable {
    /// The grant types the endpoint redeems.
    static let authorizationCodeGrant = "authorization_code"
    static let refreshTokenGrant = "refresh_token"
    static let deviceCodeGrant = "urn:ietf:params:oauth:grant-type:device_code"

    let provider: IdentityProvider
    let minter: TokenMinter

    /// Answers one token request; the `client-request-id` header comes back as a header and as `correlation_id`.
    func handle(_ request: HTTPRequest) async -> HTTPResponse {
        let now = Date()
        let correlationID = request.header("client-request-id") ?? Random.uuid()
        let form = request.form
        let admission = await provider.admitTokenRequest(grantType: form["grant_type"])
        var response: HTTPResponse
        if let fault = admission.fault, !fault.passesThrough {
            response = fault.entraError.response(correlationID: correlationID, now: now)
        } else {
            response = await answer(form, correlationID: correlationID, now: now)
        }
        response.delay = admission.delay
        response.headers.replaceOrAdd(name: "client-request-id", value: correlationID)
        response.headers.replaceOrAdd(name: "Cache-Control", value: "no-store, no-cache")
        response.headers.replaceOrAdd(name: "Pragma", value: "no-cache")
        return response
    }

    private func answer(_ form: [String: String], correlationID: String, now: Date) async -> HTTPResponse {
        let configuration = minter.configuration
        let outcome: Result<IssuedGrant, EntraError>
        if let grantType = form["grant_type"], !grantType.isEmpty {
            if let clientID = form["client_id"]?.lowercased(), !clientID.isEmpty {
                if !configuration.isKnownClient(clientID) {
                    outcome = .failure(.unknownClient(clientID, tenantID: configuration.tenantID))
                } else {
                    switch grantType {
                    case Self.authorizationCodeGrant:
                        outcome = await provider.redeemAuthorizationCode(form, clientID: clientID, now: now)
                    case Self.refreshTokenGrant:
                        outcome = await provider.redeemRefreshToken(form, clientID: clientID, now: now)
                    case Self.deviceCodeGrant:
                        outcome = await provider.redeemDeviceCode(form, clientID: clientID, now: now)
                    default:
                        outcome = .failure(
                            EntraError(
                                "unsupported_grant_type",
                                code: 70003,
                                "The app requested an unsupported grant type '\(grantType)'."
                            )
                        )
                    }
                }
            } else {
                outcome = .failure(.missing("client_id"))
            }
        } else {
            outcome = .failure(.missing("grant_type"))
        }
        switch outcome {
        case .success(let grant):
            do {
                let body = try minter.body(for: grant, includeClientInfo: form["client_info"] == "1", now: now)
                return .json(body)
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
}
