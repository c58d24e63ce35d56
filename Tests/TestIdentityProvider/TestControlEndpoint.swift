import BrokerProtocol
import Foundation
import NIOHTTP1

/// `/_test/…`: the test-control API (JSON in, JSON out) that queues faults, delays, revokes and inspects.
struct TestControlEndpoint: Sendable {
    let provider: IdentityProvider
    /// The provider's signing key, whose `kid` a forger's key passes for.
    let key: SigningKey

    /// Dispatches `/_test/<action>`.
    func handle(_ request: HTTPRequest, action: String) async -> HTTPResponse {
        if action == "stats" {
            guard request.method == .GET else { return .methodNotAllowed("GET") }
            return .json(await provider.stats())
        }
        guard request.method == .POST else { return .methodNotAllowed("POST") }
        do {
            switch action {
            case "fail-next":
                return try await failNext(decode(FailNextRequest.self, from: request))
            case "forge-id-tokens":
                return try await forgeIDTokens(decode(ForgeIDTokensRequest.self, from: request))
            case "delay":
                let delay = try decode(DelayRequest.self, from: request)
                guard delay.ms >= 0 else { return Self.invalid("ms must not be negative") }
                await provider.setTokenDelay(.milliseconds(delay.ms))
                return .json(ControlResult(ok: true, count: nil, faultsLeft: nil))
            case "hold":
                await provider.setHolding(true)
                return .json(ControlResult(ok: true, count: nil, faultsLeft: nil))
            case "release":
                await provider.setHolding(false)
                return .json(ControlResult(ok: true, count: nil, faultsLeft: nil))
            case "reset":
                await provider.reset()
                return .json(ControlResult(ok: true, count: nil, faultsLeft: 0))
            case "revoke":
                let user = User(username: try decode(UserRequest.self, from: request).username)
                let count = await provider.setActiveRefreshTokens(ofUserWithKey: user.key, to: .revoked)
                return .json(ControlResult(ok: true, count: count, faultsLeft: nil))
            case "expire-refresh-tokens":
                let user = User(username: try decode(UserRequest.self, from: request).username)
                let count = await provider.setActiveRefreshTokens(ofUserWithKey: user.key, to: .expired)
                return .json(ControlResult(ok: true, count: count, faultsLeft: nil))
            case "device":
                return try await device(decode(DeviceDecisionRequest.self, from: request))
            default:
                return .notFound("no test control action '\(action)'")
            }
        } catch {
            return Self.invalid("the body is not the JSON this action takes: \(error)")
        }
    }

    private func failNext(_ request: FailNextRequest) async -> HTTPResponse {
        let count = request.count ?? 1
        let status = request.status ?? 503
        guard count >= 1 else { return Self.invalid("count must be at least 1") }
        guard (200...599).contains(status) else { return Self.invalid("status must be an HTTP status (200-599)") }
        guard (request.delayMs ?? 0) >= 0, (request.retryAfter ?? 0) >= 0 else {
            return Self.invalid("delayMs and retryAfter must not be negative")
        }
        let fault = Fault(
            remaining: count,
            status: status,
            error: request.error ?? "temporarily_unavailable",
            suberror: request.suberror,
            errorDescription: request.errorDescription,
            errorCode: request.errorCode,
            retryAfter: request.retryAfter,
            grantType: request.grantType,
            delay: .milliseconds(request.delayMs ?? 0)
        )
        let left = await provider.queueFault(fault)
        return .json(ControlResult(ok: true, count: count, faultsLeft: left))
    }

    private func forgeIDTokens(_ request: ForgeIDTokensRequest) async -> HTTPResponse {
        let count = request.count ?? 1
        guard count >= 1 else { return Self.invalid("count must be at least 1") }
        do {
            let key = try SigningKey(keyID: key.keyID)
            let left = await provider.queueForgery(
                IDTokenForgery(remaining: count, key: key, objectID: request.objectId)
            )
            return .json(ControlResult(ok: true, count: left, faultsLeft: nil))
        } catch {
            return .json(ControlError(error: "server_error", message: "no key: \(error)"), status: .internalServerError)
        }
    }

    private func device(_ request: DeviceDecisionRequest) async -> HTTPResponse {
        let action = request.action ?? "approve"
        guard action == "approve" || action == "deny" else { return Self.invalid("action must be approve or deny") }
        let outcome = await provider.decideDeviceCode(
            userCode: request.userCode,
            username: request.username,
            approve: action == "approve",
            now: Date()
        )
        switch outcome {
        case .success:
            return .json(ControlResult(ok: true, count: nil, faultsLeft: nil))
        case .failure(let problem):
            return .json(
                ControlError(error: "\(problem)", message: DeviceLoginEndpoint.explain(problem)),
                status: problem == .unknownCode ? .notFound : .badRequest
            )
        }
    }

    /// Decodes the JSON body; an empty body reads as `{}`.
    private func decode<T: Decodable>(_ type: T.Type, from request: HTTPRequest) throws -> T {
        let body =
            request.body.allSatisfy { $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }
            ? Array("{}".utf8) : request.body
        return try WireDecoder().decode(type, from: body)
    }

    private static func invalid(_ message: String) -> HTTPResponse {
        .json(ControlError(error: "invalid_request", message: message), status: .badRequest)
    }
}
