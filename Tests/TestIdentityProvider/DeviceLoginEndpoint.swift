import Foundation
import NIOHTTP1

/// `GET|POST /devicelogin`: where the user enters a device's user code and signs in (or declines).
struct DeviceLoginEndpoint: Sendable {
    let provider: IdentityProvider

    /// Shows the code entry form (`GET`, pre-filled from `?otc=`), or takes the user's answer (`POST`).
    func handle(_ request: HTTPRequest) async -> HTTPResponse {
        guard request.method == .POST else {
            return .html(HTMLPage.deviceLogin(userCode: request.query["otc"]))
        }
        let form = request.form
        let userCode = form["user_code"] ?? ""
        let approve = form["action"] != "deny"
        let outcome = await provider.decideDeviceCode(
            userCode: userCode,
            username: form["username"],
            approve: approve,
            now: Date()
        )
        switch outcome {
        case .success:
            let text =
                approve
                ? "You have signed in to the application on your device. You may now close this window."
                : "You have declined to sign in to the application on your device. You may now close this window."
            return .html(HTMLPage.message(title: approve ? "Signed in" : "Declined", text))
        case .failure(let problem):
            return .html(
                HTMLPage.deviceLogin(userCode: userCode, problem: Self.explain(problem)),
                status: problem == .unknownCode ? .notFound : .badRequest
            )
        }
    }

    /// What to tell a user (or a test) whose answer was not taken.
    static func explain(_ problem: IdentityProvider.DeviceDecisionProblem) -> String {
        switch problem {
        case .unknownCode: "That code was not recognized. Check the code and try again."
        case .expired: "That code has expired. Start over on your device."
        case .alreadyDecided: "That code has already been used."
        case .missingUsername: "Enter a username."
        }
    }
}
