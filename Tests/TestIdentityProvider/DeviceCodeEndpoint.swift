import Foundation
import NIOHTTP1

/// `POST /{tenant}/oauth2/v2.0/devicecode`: starts a device authorization (RFC 8628 §3.1).
struct DeviceCodeEndpoint: Sendable {
    /// The device authorization response.
    struct Body: Encodable {
        let deviceCode: String
        let userCode: String
        let verificationURI: String
        let expiresIn: Int
        let interval: Int
        let message: String

        enum CodingKeys: String, CodingKey {
            case deviceCode = "device_code"
            case userCode = "user_code"
            case verificationURI = "verification_uri"
            case expiresIn = "expires_in"
            case interval
            case message
        }
    }

    let provider: IdentityProvider
    let configuration: ProviderConfiguration

    /// Issues a device code and user code for a known client.
    func handle(_ request: HTTPRequest) async -> HTTPResponse {
        let now = Date()
        let correlationID = request.header("client-request-id") ?? Random.uuid()
        await provider.countDeviceCodeRequest()
        let form = request.form
        guard let clientID = form["client_id"]?.lowercased(), !clientID.isEmpty else {
            return EntraError.missing("client_id").response(correlationID: correlationID, now: now)
        }
        guard configuration.isKnownClient(clientID) else {
            return EntraError.unknownClient(clientID, tenantID: configuration.tenantID)
                .response(correlationID: correlationID, now: now)
        }
        let authorization = await provider.startDeviceAuthorization(
            clientID: clientID,
            scopes: Scopes.parse(form["scope"]),
            now: now
        )
        var response = HTTPResponse.json(
            Body(
                deviceCode: authorization.deviceCode,
                userCode: authorization.userCode,
                verificationURI: configuration.deviceLoginURL,
                expiresIn: configuration.deviceCodeLifetime,
                interval: configuration.deviceCodeInterval,
                message: "To sign in, use a web browser to open the page \(configuration.deviceLoginURL) and enter "
                    + "the code \(authorization.userCode) to authenticate."
            )
        )
        response.headers.replaceOrAdd(name: "client-request-id", value: correlationID)
        return response
    }
}
