import Foundation
import NIOHTTP1

/// `GET|POST /{tenant}/oauth2/v2.0/authorize`: the sign-in page and its answer.
struct AuthorizeEndpoint: Sendable {
    let provider: IdentityProvider
    let configuration: ProviderConfiguration

    /// Shows the sign-in page (`GET`), or takes the user's answer and redirects to the client (`POST`).
    func handle(_ request: HTTPRequest) async -> HTTPResponse {
        let isAnswer = request.method == .POST
        if !isAnswer { await provider.countAuthorizeRequest() }
        let authorization: AuthorizationRequest
        switch AuthorizationRequest.parse(request.query, configuration: configuration) {
        case .success(let parsed):
            authorization = parsed
        case .failure(.page(let problem)):
            return .html(
                HTMLPage.message(title: "Sorry, but we're having trouble signing you in", problem),
                status: .badRequest
            )
        case .failure(.redirect(let location)):
            return .redirect(to: location)
        }
        guard isAnswer else {
            return .html(HTMLPage.signIn(clientID: authorization.clientID, loginHint: authorization.loginHint))
        }
        let form = request.form
        if form["action"] == "deny" {
            return .redirect(to: authorization.redirectDenied())
        }
        let user = User(username: form["username"] ?? "")
        guard !user.username.isEmpty else {
            return .html(
                HTMLPage.signIn(
                    clientID: authorization.clientID,
                    loginHint: authorization.loginHint,
                    problem: "Enter a username."
                )
            )
        }
        let code = await provider.issueAuthorizationCode(for: authorization, user: user, now: Date())
        return .redirect(to: authorization.redirect(code: code))
    }
}
