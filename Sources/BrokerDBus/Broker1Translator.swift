public import BrokerCore
import BrokerOAuth
import BrokerProtocol
import Foundation
import Synchronization

/// Turns a Broker1 call into a call of the broker's method table, and its result or failure into the answer
/// Broker1's clients accept.
///
/// No logic of its own beyond translating shapes: which account, which token, what a failure means, all come from
/// the same handlers the socket uses.
public struct Broker1Translator: Sendable {
    /// An answer: ready now (from memory), or after the broker's task.
    public enum Reply: Sendable {
        /// The answer JSON.
        case now(String)
        /// Work for a task; it returns the answer JSON.
        case later(@Sendable () async -> String)
    }

    private let handlers: MethodHandlers
    private let owner: FlowOwner
    private let releaseVersion: String
    private let decoder = WireDecoder(limits: .request)
    /// The silent request read last and the token answer written last: see ``RecentSilentCalls``.
    private let recent = RecentSilentCalls()

    /// A translator over `handlers`.
    ///
    /// - Parameters:
    ///   - handlers: the broker's method table.
    ///   - owner: the flow owner of the sign-ins the bus starts (no notifications; the broker's stop cancels them).
    ///   - releaseVersion: tokenbroker's version, for `getLinuxBrokerVersion`.
    public init(handlers: MethodHandlers, owner: FlowOwner, releaseVersion: String) {
        self.handlers = handlers
        self.owner = owner
        self.releaseVersion = releaseVersion
    }

    /// Answers one call.
    ///
    /// Never throws: every failure is a Broker1 error object. `display` gives the user's graphical session (`DISPLAY`, `WAYLAND_DISPLAY`, …), nil when there is none; it
    /// is asked only by an interactive sign-in, which opens the browser there.
    public func answer(
        method name: String,
        correlationId: String,
        request: String,
        caller: Caller,
        display: () -> [String: String]?
    ) -> Reply {
        guard let method = Broker1.Method(rawValue: name) else {
            return .now(
                Self.error(.apiContractViolation, "\(Broker1.interface) has no method \"\(shown(name))\"")
            )
        }
        guard request.utf8.count <= WireProtocol.maximumFrameBytes else {
            return .now(
                Self.error(
                    .apiContractViolation,
                    "the request is larger than \(WireProtocol.maximumFrameBytes >> 20) MiB",
                    code: .frameTooLarge
                )
            )
        }
        guard WireProtocol.isValidCorrelationId(correlationId) else {
            return .now(
                Self.error(
                    .apiContractViolation,
                    "the correlation id must be at most \(WireProtocol.maximumCorrelationIdBytes) bytes without a "
                        + "control character",
                    code: .invalidParams
                )
            )
        }
        let correlationId = correlationId.isEmpty ? WireProtocol.newCorrelationId() : correlationId
        do throws(BrokerFailure) {
            switch method {
            case .getAccounts: return try accounts(request, correlationId: correlationId, caller: caller)
            case .acquireTokenSilently: return try silent(request, correlationId: correlationId, caller: caller)
            case .acquireTokenInteractively:
                return try interactive(request, correlationId: correlationId, caller: caller, display: display())
            case .removeAccount: return try removeAccount(request, correlationId: correlationId, caller: caller)
            case .getLinuxBrokerVersion:
                return .now(
                    Self.encode(
                        Broker1.VersionAnswer(
                            linuxBrokerVersion: Broker1.interfaceVersion,
                            tokenbrokerVersion: releaseVersion
                        )
                    )
                )
            case .cancelInteractiveFlow: return try cancel(correlationId: correlationId, caller: caller)
            case .acquirePrtSsoCookie:
                return .now(
                    Self.error(
                        .incorrectConfiguration,
                        "tokenbroker holds no primary refresh token: this machine is not registered with Entra ID "
                            + "through it, so it has no device-bound SSO cookie to give"
                    )
                )
            case .generateSignedHttpRequest:
                return .now(
                    Self.error(
                        .incorrectConfiguration,
                        "tokenbroker holds no proof-of-possession key: it issues bearer tokens only, not signed "
                            + "HTTP requests"
                    )
                )
            }
        } catch {
            return .now(Self.error(error))
        }
    }

    // MARK: - Methods

    private func accounts(_ request: String, correlationId: String, caller: Caller) throws(BrokerFailure) -> Reply {
        let decoded = try decode(Broker1.AccountsRequest.self, request)
        let params = GetAccountsParams(clientId: try Self.clientId(decoded.clientId), correlationId: correlationId)
        return try run(Methods.GetAccounts.self, params, caller: caller) { result in
            Broker1.AccountsAnswer(accounts: result.accounts.map { Broker1.Account($0) })
        }
    }

    private func silent(_ request: String, correlationId: String, caller: Caller) throws(BrokerFailure) -> Reply {
        let parameters: AuthParameters
        let requested: String
        if let read = recent.parameters(of: request) {
            (parameters, requested) = read
        } else {
            (parameters, requested) = try Self.authParameters(try decode(Broker1.TokenRequest.self, request))
            recent.remember(request, parameters: parameters, requested: requested)
        }
        let params = AcquireTokenSilentlyParams(authParameters: parameters, correlationId: correlationId)
        let (recent, clientId) = (recent, parameters.clientId)
        return try run(Methods.AcquireTokenSilently.self, params, caller: caller) { result in
            let token = result.brokerTokenResponse
            if let written = recent.answer(for: token, requested: requested, clientId: clientId) { return written }
            let answer = Self.encode(Self.tokenAnswer(token, requested: requested, clientId: clientId))
            recent.remember(answer, for: token, requested: requested, clientId: clientId)
            return answer
        }
    }

    private func interactive(
        _ request: String,
        correlationId: String,
        caller: Caller,
        display: @autoclosure () -> [String: String]?
    ) throws(BrokerFailure) -> Reply {
        let decoded = try decode(Broker1.TokenRequest.self, request)
        var (parameters, requested) = try Self.authParameters(decoded)
        guard let display = display() else {
            throw BrokerFailure(
                .interactionRequired,
                "tokenbroker cannot show a sign-in here: the user's session has no display (neither DISPLAY nor "
                    + "WAYLAND_DISPLAY). Sign in once with `tokenbroker login --client-id \(parameters.clientId)` "
                    + "(it offers a device code), then try again"
            )
        }
        // The broker shows the sign-in in the user's browser, with a loopback redirect of its own: the app's
        // `nativeclient` redirect leads nowhere a browser can hand back.
        parameters.loginHint = parameters.username
        let clientId = parameters.clientId
        let params = AcquireTokenInteractivelyParams(
            authParameters: parameters,
            webviewType: .systemBrowser,
            environment: display,
            correlationId: correlationId
        )
        return try run(
            Methods.AcquireTokenInteractively.self,
            params,
            caller: caller
        ) { [requested] in
            Self.tokenAnswer($0.brokerTokenResponse, requested: requested, clientId: clientId)
        }
    }

    private func removeAccount(
        _ request: String,
        correlationId: String,
        caller: Caller
    ) throws(BrokerFailure)
        -> Reply
    {
        let decoded = try decode(Broker1.RemoveAccountRequest.self, request)
        guard let selector = decoded.account?.selector else {
            throw Self.invalid("account", "name the account to remove")
        }
        // sso-mib sends its own client id: the account's tokens for that app go, the sign-in stays for the others.
        let params = RemoveAccountParams(
            account: selector,
            clientId: try decoded.clientId.map(Self.clientId),
            correlationId: correlationId
        )
        return try run(Methods.RemoveAccount.self, params, caller: caller) { _ in
            Broker1.EmptyAnswer()
        }
    }

    private func cancel(correlationId: String, caller: Caller) throws(BrokerFailure) -> Reply {
        let params = CancelInteractiveFlowParams(correlationId: correlationId)
        return try run(Methods.CancelInteractiveFlow.self, params, caller: caller) {
            _ in Broker1.EmptyAnswer()
        }
    }

    /// Calls the method's handler, and shapes its answer (now or later) with `shape`.
    private func run<Method: BrokerMethod, Answer: Encodable & Sendable>(
        _ method: Method.Type,
        _ params: Method.Params,
        caller: Caller,
        shape: @escaping @Sendable (Method.Result) -> Answer
    ) throws(BrokerFailure) -> Reply {
        try run(method, params, caller: caller) { Self.encode(shape($0)) }
    }

    /// Calls the method's handler; `write` writes the answer JSON of its result.
    private func run<Method: BrokerMethod>(
        _ method: Method.Type,
        _ params: Method.Params,
        caller: Caller,
        write: @escaping @Sendable (Method.Result) -> String
    ) throws(BrokerFailure) -> Reply {
        guard let handler = handlers.handler(for: method) else {
            throw BrokerFailure(.internalError, "this broker does not serve \(Method.name.rawValue)")
        }
        switch try handler.answer(params, caller) {
        case .now(let result):
            return .now(write(result))
        case .later(let work):
            let owner = owner
            return .later {
                do throws(BrokerFailure) {
                    return write(try await work(owner))
                } catch {
                    return Self.error(error)
                }
            }
        }
    }

    // MARK: - Requests

    private func decode<T: Decodable>(_ type: T.Type, _ request: String) throws(BrokerFailure) -> T {
        do {
            return try decoder.decode(type, from: Array(request.utf8))
        } catch let error as JSONSyntaxError {
            throw BrokerFailure(.parseError, "the request is not JSON: \(error.reason)")
        } catch let error as DecodingError {
            if case .dataCorrupted(let context) = error, let syntax = context.underlyingError as? JSONSyntaxError {
                throw BrokerFailure(.parseError, "the request is not JSON: \(syntax.reason)")
            }
            throw BrokerFailure(.invalidParams, "the request does not have Broker1's shape: \(Self.describe(error))")
        } catch {
            throw BrokerFailure(.invalidParams, "the request does not have Broker1's shape")
        }
    }

    private static func clientId(_ clientId: String?) throws(BrokerFailure) -> String {
        guard let clientId, !clientId.isEmpty else {
            throw invalid("clientId", "the client id is missing")
        }
        return clientId
    }

    /// The socket protocol's `authParameters` for a Broker1 token request, and the requested scopes as the client
    /// wrote them (echoed in `grantedScopes`).
    private static func authParameters(
        _ request: Broker1.TokenRequest
    ) throws(BrokerFailure) -> (
        AuthParameters, String
    ) {
        let given = request.authParameters
        if let pop = given.popParams, pop != .null {
            throw invalid(
                "authParameters.popParams",
                "tokenbroker issues bearer tokens only: proof-of-possession tokens need a device-bound key it "
                    + "does not hold"
            )
        }
        let scopes = given.requestedScopes ?? []
        let parameters = AuthParameters(
            clientId: try clientId(given.clientId),
            authority: given.authority.flatMap { $0.isEmpty ? nil : $0 },
            requestedScopes: scopes,
            account: given.account?.selector ?? request.account?.selector,
            username: given.username.flatMap { $0.isEmpty ? nil : $0 },
            decodedClaims: given.decodedClaims.flatMap { $0.isEmpty ? nil : $0 },
            prompt: given.prompt.flatMap { $0.isEmpty ? nil : $0 }
        )
        return (parameters, scopes.joined(separator: " "))
    }

    /// A bad member of a Broker1 request, named by its path in the request.
    private static func invalid(_ field: String, _ message: String) -> BrokerFailure {
        BrokerFailure(.invalidParams, "\(field): \(message)", details: .init(field: field))
    }

    private static func describe(_ error: DecodingError) -> String {
        func path(_ keys: [any CodingKey]) -> String {
            keys.isEmpty
                ? "the request"
                : keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
        }
        switch error {
        case .keyNotFound(let key, let context): return "\(path(context.codingPath + [key])) is missing"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            return "\(path(context.codingPath)) has the wrong type"
        case .dataCorrupted(let context): return "\(path(context.codingPath)) is invalid"
        @unknown default: return "invalid"
        }
    }

    // MARK: - Answers

    /// The Broker1 token answer for a token result.
    ///
    /// `requested` is echoed as `grantedScopes` (the clients fail
    /// when it differs from what they asked); the id token is the account's, or an unsigned one built from it
    /// when the broker holds none for this client.
    static func tokenAnswer(_ result: TokenResult, requested: String, clientId: String) -> Broker1.TokenAnswer {
        let account = Broker1.Account(result.account, clientInfo: result.clientInfo)
        return Broker1.TokenAnswer(
            brokerTokenResponse: Broker1.TokenResponse(
                accessToken: result.accessToken,
                accessTokenType: result.accessTokenType.lowercased() == "pop" ? 1 : 0,
                expiresOn: result.expiresOn,
                extendedExpiresOn: result.extendedExpiresOn ?? result.expiresOn,
                clientInfo: account.clientInfo,
                idToken: result.idToken ?? Broker1.unsignedIdToken(for: result.account, clientId: clientId),
                grantedScopes: requested.isEmpty ? result.grantedScopes.joined(separator: " ") : requested,
                account: account
            )
        )
    }

    /// The Broker1 status of a failure.
    ///
    /// Only 2 (InteractionRequired) and 13 make a client sign in interactively;
    /// so a silent request that found no account, or several, answers 2.
    static func status(of failure: BrokerFailure) -> Broker1.Status {
        switch failure.code {
        case .interactionRequired, .noAccount: return .interactionRequired
        case .invalidParams where failure.details.field == ParamField.authParameters(.account).path:
            return .interactionRequired
        case .invalidParams
        where failure.details.field == ParamField(AcquireTokenInteractivelyParams.CodingKeys.webviewType).path:
            // The browser the user's configuration names could not start: theirs to fix, not the app's request.
            return .incorrectConfiguration
        case .invalidParams, .invalidRequest, .parseError, .methodNotFound, .unsupportedProtocolVersion,
            .frameTooLarge:
            return .apiContractViolation
        case .userCanceled: return .userCanceled
        case .serverError:
            if let oauth = failure.underlying as? OAuthError, oauth.kind == .unavailable, oauth.response == nil {
                return .networkTemporarilyUnavailable
            }
            return .serverTemporarilyUnavailable
        case .unauthorizedClient: return .incorrectConfiguration
        case .brokerBusy, .throttled, .timeout, .brokerStopping, .cacheLocked: return .transientError
        default: return .unexpected
        }
    }

    static func error(_ failure: BrokerFailure) -> String {
        var context = failure.message
        // The provider's description, unless the message already carries it (a refusal's message quotes it).
        if let description = failure.details.errorDescription, !description.isEmpty, !context.contains(description) {
            context += ": \(description)"
        }
        let answer = Broker1.ErrorAnswer(status(of: failure), context, errorCode: failure.code)
        return encode(answer)
    }

    static func error(_ status: Broker1.Status, _ context: String, code: ErrorCode? = nil) -> String {
        encode(Broker1.ErrorAnswer(status, context, errorCode: code))
    }

    static func encode(_ value: some Encodable) -> String {
        guard let bytes = try? WireEncoder().encode(value) else {
            return
                #"{"error":{"status":0,"errorCode":0,"tag":29794,"context":"the answer could not be encoded","subStatus":0}}"#
        }
        return String(decoding: bytes, as: UTF8.self)
    }

}

/// The silent request a translator read last and the token answer it wrote last, for the clients that ask the same
/// over and over: clients that keep no tokens of their own, and MSALRuntime in each new process of an app (a CLI or a
/// script is a process per use) where no Secret Service holds its cache.
///
/// Reading the request and writing the answer through Codable were 240,000 of the 600,000 instructions a cached answer
/// took on the bus's thread (callgrind). Only what is a function of them is kept: the broker still answers (and
/// audits) every call, and its token result, the correlation id aside, must equal the one the answer was written
/// for.
final class RecentSilentCalls: Sendable {
    private struct Read {
        let request: String
        let parameters: AuthParameters
        let requested: String
    }

    private struct Written {
        let token: TokenResult
        let requested: String
        let clientId: String
        let answer: String
    }

    private let read = Mutex<Read?>(nil)
    private let written = Mutex<Written?>(nil)

    /// The parameters and requested scopes `request` was read as, if it is the request read last.
    func parameters(of request: String) -> (AuthParameters, String)? {
        read.withLock { read in
            guard let read, read.request == request else { return nil }
            return (read.parameters, read.requested)
        }
    }

    /// Remembers what `request` was read as.
    func remember(_ request: String, parameters: AuthParameters, requested: String) {
        read.withLock { $0 = Read(request: request, parameters: parameters, requested: requested) }
    }

    /// The answer written last, if it was written for this token result (its correlation id aside), requested
    /// scopes and client.
    func answer(for token: TokenResult, requested: String, clientId: String) -> String? {
        written.withLock { written in
            guard let written, written.requested == requested, written.clientId == clientId,
                Self.sameToken(written.token, token)
            else { return nil }
            return written.answer
        }
    }

    /// Remembers the answer written for `token`.
    func remember(_ answer: String, for token: TokenResult, requested: String, clientId: String) {
        written.withLock { $0 = Written(token: token, requested: requested, clientId: clientId, answer: answer) }
    }

    /// Whether two results are equal but for their correlation ids, which Broker1's answer does not carry.
    private static func sameToken(_ one: TokenResult, _ other: TokenResult) -> Bool {
        var other = other
        other.correlationId = one.correlationId
        return one == other
    }
}
