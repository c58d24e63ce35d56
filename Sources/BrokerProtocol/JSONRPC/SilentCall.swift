/// The silent call written and its answer read without Codable, for a client whose whole run is one token: the
/// CLI's start-up path for `tokenbroker token`, where instantiating Codable's generic containers (each one a scan of
/// the program's protocol conformances) would cost more than the rest of the run.
///
/// The request is byte for byte what ``WireEncoder`` writes for the same call (a test holds them equal); the answer
/// is read from the strict JSON tape, and only a token answer is read: anything else (an error, a shape this reader
/// does not know) is for the full client to handle.
package enum SilentCall {
    /// The request line (with its newline) of `acquireTokenSilently` with `parameters`, as request `id`.
    ///
    /// Nil when `parameters` carry a field a command line does not set (a username apart from the account, a
    /// redirect URI, claims, interactive-only fields): such a request is for ``WireEncoder``.
    package static func requestLine(_ parameters: AuthParameters, correlationId: String, id: Int64) -> [UInt8]? {
        guard parameters.username == nil, parameters.redirectUri == nil, parameters.decodedClaims == nil,
            parameters.authorizationType == nil, parameters.prompt == nil, parameters.loginHint == nil,
            parameters.domainHint == nil, parameters.additionalQueryParametersForAuthorization == nil
        else { return nil }
        var line: [UInt8] = []
        line.reserveCapacity(512)
        func append(_ text: StaticString) {
            line.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
        }
        func string(_ text: String) {
            WireEncoder.appendString(text, to: &line)
        }
        append(#"{"jsonrpc":"2.0","id":"#)
        line.append(contentsOf: String(id).utf8)
        append(#","method":"acquireTokenSilently","params":{"authParameters":{"clientId":"#)
        string(parameters.clientId)
        if let authority = parameters.authority {
            append(#","authority":"#)
            string(authority)
        }
        if let scopes = parameters.requestedScopes {
            append(#","requestedScopes":["#)
            for (index, scope) in scopes.enumerated() {
                if index > 0 { append(",") }
                string(scope)
            }
            append("]")
        }
        if let resource = parameters.resource {
            append(#","resource":"#)
            string(resource)
        }
        if let account = parameters.account {
            append(#","account":{"#)
            if let identifier = account.identifier {
                append(#""identifier":"#)
                string(identifier)
            }
            if let username = account.username {
                append(account.identifier == nil ? #""username":"# : #","username":"#)
                string(username)
            }
            append("}")
        }
        if let forceRefresh = parameters.forceRefresh {
            append(forceRefresh ? #","forceRefresh":true"# : #","forceRefresh":false"#)
        }
        if let seconds = parameters.minimumValiditySeconds {
            append(#","minimumValiditySeconds":"#)
            line.append(contentsOf: String(seconds).utf8)
        }
        append(#"},"correlationId":"#)
        string(correlationId)
        append("}}\n")
        return line
    }

    /// A token answer's fields that a command line prints.
    package struct Token: Sendable, Hashable {
        package var accessToken: String
        /// Epoch milliseconds.
        package var expiresOn: Int64
        package var username: String

        package init(accessToken: String, expiresOn: Int64, username: String) {
            self.accessToken = accessToken
            self.expiresOn = expiresOn
            self.username = username
        }
    }

    /// What a line from the broker is to the call with `id`.
    package enum Reading: Sendable, Hashable {
        /// The token it answered.
        case token(Token)
        /// Another message (a notification, another call's answer): read on.
        case notForThisCall
        /// Its answer, but not a token (an error, or a shape this reader leaves to the full client).
        case otherAnswer
    }

    /// Reads one line (without its newline) from the broker, for the call `id`.
    package static func read(_ line: [UInt8], id: Int64) -> Reading {
        guard let tape = try? JSONTape(line), tape.nodes.first?.kind == .object else { return .otherAnswer }
        guard let answerID = tape.member(of: 0, named: "id") else { return .notForThisCall }
        switch tape.nodes[answerID].kind {
        case .number where tape.integer(at: answerID) == id: break
        case .null: return .otherAnswer  // an error without an id: about this connection
        default: return .notForThisCall
        }
        guard let result = tape.member(of: 0, named: "result"),
            let response = tape.member(of: result, named: "brokerTokenResponse"),
            let accessToken = string(tape, tape.member(of: response, named: "accessToken")),
            let expires = tape.member(of: response, named: "expiresOn"), tape.nodes[expires].kind == .number,
            let expiresOn = tape.integer(at: expires),
            let account = tape.member(of: response, named: "account"),
            let username = string(tape, tape.member(of: account, named: "username"))
        else { return .otherAnswer }
        return .token(Token(accessToken: accessToken, expiresOn: expiresOn, username: username))
    }

    private static func string(_ tape: JSONTape, _ index: Int?) -> String? {
        guard let index, tape.nodes[index].kind == .string else { return nil }
        return try? tape.string(at: index)
    }
}

extension SilentCall {
    /// A document that is not one JSON object, or whose member is not a string.
    package struct NotReadable: Error {}

    /// The string member `name` of the JSON object in `bytes` (nil when absent or null), read strictly and without
    /// Codable: for a tool's small inputs (kubectl's KUBERNETES_EXEC_INFO).
    package static func stringMember(_ name: String, ofObject bytes: [UInt8]) -> Result<String?, NotReadable> {
        guard let tape = try? JSONTape(bytes, limits: .request), tape.nodes.first?.kind == .object else {
            return .failure(NotReadable())
        }
        guard let index = tape.member(of: 0, named: name), tape.nodes[index].kind != .null else { return .success(nil) }
        guard let text = string(tape, index) else { return .failure(NotReadable()) }
        return .success(text)
    }
}
