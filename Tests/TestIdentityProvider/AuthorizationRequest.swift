import Foundation

/// The parameters of an authorization request, checked the way Entra ID checks them.
struct AuthorizationRequest: Sendable {
    /// Why a request cannot go on: some problems can only be shown, others go back to the client's redirect URI.
    enum Problem: Error {
        /// No redirect is possible (unknown client, missing or unusable redirect URI): show this text.
        case page(String)

        /// Redirect to the client with this error.
        case redirect(String)
    }

    let clientID: String
    let redirectURI: String
    let scopes: [String]
    let state: String?
    let nonce: String?
    let codeChallenge: String
    let loginHint: String?

    /// Checks the query of an authorization request.
    static func parse(
        _ query: [String: String],
        configuration: ProviderConfiguration
    ) -> Result<AuthorizationRequest, Problem> {
        guard let clientID = query["client_id"], !clientID.isEmpty else {
            return .failure(.page("The request has no client_id."))
        }
        guard configuration.isKnownClient(clientID) else {
            return .failure(
                .page(
                    "AADSTS700016: Application with identifier '\(clientID)' was not found in the directory "
                        + "'\(configuration.tenantID)'."
                )
            )
        }
        guard let redirectURI = query["redirect_uri"], !redirectURI.isEmpty else {
            return .failure(
                .page("AADSTS900144: The request body must contain the following parameter: 'redirect_uri'.")
            )
        }
        guard let components = URLComponents(string: redirectURI), components.scheme != nil else {
            return .failure(.page("AADSTS90102: 'redirect_uri' value must be a valid absolute URI."))
        }
        let state = query["state"]
        func refuse(_ error: String, _ description: String) -> Result<AuthorizationRequest, Problem> {
            var pairs = [("error", error), ("error_description", description)]
            if let state { pairs.append(("state", state)) }
            return .failure(.redirect(redirect(redirectURI, with: pairs)))
        }
        guard query["response_type"] == "code" else {
            return refuse(
                "unsupported_response_type",
                "AADSTS700054: response_type '\(query["response_type"] ?? "")' is not enabled for the application."
            )
        }
        guard let challenge = query["code_challenge"], !challenge.isEmpty else {
            return refuse(
                "invalid_request",
                "AADSTS900144: The request body must contain the following parameter: 'code_challenge'."
            )
        }
        guard query["code_challenge_method"] == "S256" else {
            return refuse("invalid_request", "AADSTS501471: The code_challenge_method must be S256.")
        }
        guard isCodeChallenge(challenge) else {
            return refuse("invalid_request", "AADSTS501491: Invalid size of Code_Challenge parameter.")
        }
        if query["prompt"] == "none" {
            return refuse(
                "login_required",
                "AADSTS50058: A silent sign-in request was sent but no user is signed in."
            )
        }
        return .success(
            AuthorizationRequest(
                clientID: clientID.lowercased(),
                redirectURI: redirectURI,
                scopes: Scopes.parse(query["scope"]),
                state: state,
                nonce: query["nonce"],
                codeChallenge: challenge,
                loginHint: query["login_hint"]
            )
        )
    }

    /// The redirect that hands `code` (and the state) back to the client.
    func redirect(code: String) -> String {
        var pairs = [("code", code)]
        if let state { pairs.append(("state", state)) }
        return Self.redirect(redirectURI, with: pairs)
    }

    /// The redirect that tells the client the user declined.
    func redirectDenied() -> String {
        var pairs = [
            ("error", "access_denied"),
            ("error_description", "AADSTS65004: User declined to consent to access the app."),
        ]
        if let state { pairs.append(("state", state)) }
        return Self.redirect(redirectURI, with: pairs)
    }

    /// `uri` with `pairs` appended to its query.
    private static func redirect(_ uri: String, with pairs: [(String, String)]) -> String {
        let fragmentStart = uri.firstIndex(of: "#") ?? uri.endIndex
        let base = uri[..<fragmentStart]
        let separator = base.contains("?") ? (base.hasSuffix("?") || base.hasSuffix("&") ? "" : "&") : "?"
        return "\(base)\(separator)\(FormCoding.encode(pairs))"
    }

    /// Whether `text` can be an S256 challenge: 43 to 128 base64url characters (RFC 7636 §4.2).
    private static func isCodeChallenge(_ text: String) -> Bool {
        (43...128).contains(text.utf8.count)
            && text.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                    true
                default:
                    false
                }
            }
    }
}
