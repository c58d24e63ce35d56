import BrokerCore
import BrokerProtocol
import BrokerTime
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// A managed-identity token request, checked: `GET /msi/token?api-version=2019-08-01&resource=…[&client_id=…]`
/// with the grant's secret in `X-IDENTITY-HEADER`.
struct EndpointRequest: Sendable {
    /// The secret the request brought.
    let secret: String
    /// The resource (or scope) asked for.
    let resource: String
    /// The client id the holder named, if any (a user-assigned identity's, to Azure SDKs).
    let clientId: String?
    /// The SDK's request id (`x-ms-client-request-id`), else a new one.
    let correlationId: String
    /// The listener the request came to.
    let local: ListenAddress?
    /// Who sent it, for the audit line: the address without the port.
    ///
    /// A client takes a new port for each connection: with it, each request was a caller of its own, written
    /// again and never counted as a repeat.
    let remoteHost: String
    /// The port it was sent from (0 for an address without one); nil when the peer is unknown.
    let remotePort: Int?

    /// Who sent it: address and port, for a refusal's log line.
    var remote: String {
        remotePort.map { "\(remoteHost):\($0)" } ?? remoteHost
    }

    /// The path App Service's clients are given in `IDENTITY_ENDPOINT`.
    static let path = "/msi/token"
    /// Query parameters naming an identity this endpoint cannot choose: a grant is one identity.
    static let otherIdentities: Set<String> = ["principal_id", "object_id", "mi_res_id", "msi_res_id"]

    static func parse(
        _ head: HTTPRequestHead,
        hasBody: Bool,
        local: SocketAddress?,
        remote: SocketAddress?
    ) -> Result<EndpointRequest, Refusal> {
        guard head.method == .GET else { return .failure(Refusal(.methodNotAllowed, "only GET is served")) }
        guard !hasBody else { return .failure(Refusal(.badRequest, "a token request has no body")) }
        guard let components = URLComponents(string: head.uri), components.path == path else {
            return .failure(Refusal(.notFound, "the token endpoint is \(path)"))
        }
        var query: [String: String] = [:]
        for item in components.queryItems ?? [] {
            guard query[item.name] == nil else {
                return .failure(Refusal(.badRequest, "the parameter \(shown(item.name)) is given twice"))
            }
            query[item.name] = item.value ?? ""
        }
        guard query["api-version"] == "2019-08-01" else {
            return .failure(Refusal(.badRequest, "api-version must be 2019-08-01"))
        }
        guard let resource = query["resource"], !resource.isEmpty else {
            return .failure(Refusal(.badRequest, "the resource parameter is required"))
        }
        if let other = otherIdentities.first(where: { query[$0] != nil }) {
            return .failure(Refusal(.badRequest, "\(other) is not supported: a grant serves one identity"))
        }
        let secrets = head.headers["X-IDENTITY-HEADER"]
        guard secrets.count == 1, let secret = secrets.first, !secret.isEmpty else {
            return .failure(Refusal(.unauthorized, "the X-IDENTITY-HEADER header (the grant's secret) is required"))
        }
        let requestId = head.headers.first(name: "x-ms-client-request-id").flatMap { id in
            id.count <= 64 && id.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value < 0x7f } ? id : nil
        }
        return .success(
            EndpointRequest(
                secret: secret,
                resource: resource,
                clientId: query["client_id"].flatMap { $0.isEmpty ? nil : $0 },
                correlationId: requestId ?? WireProtocol.newCorrelationId(),
                local: local.flatMap { address in
                    guard let ip = address.ipAddress, let port = address.port else { return nil }
                    return try? ListenAddress.parse(ip.contains(":") ? "[\(ip)]:\(port)" : "\(ip):\(port)").get()
                },
                // The C library writes an address as text through sprintf (3,000 instructions): once a request.
                remoteHost: remote.map { $0.ipAddress ?? "?" } ?? "unknown",
                remotePort: remote.map { $0.port ?? 0 }
            )
        )
    }
}

extension IdentityEndpoint {
    /// How a request is answered.
    enum Prepared {
        /// From the cache, at once.
        case now(Reply)
        /// After a refresh at the identity provider.
        case later(@Sendable () async -> Reply)
    }

    /// The grant the request's secret names, checked against the request; then the token through the broker's
    /// silent path.
    func prepare(_ request: EndpointRequest) -> Result<Prepared, Refusal> {
        guard let grant = broker.grants.holder(of: request.secret) else {
            let now = broker.clock.elapsed
            let count = refusals.withLock { refusals -> Int? in
                refusals.count += 1
                if let last = refusals.lastLogged, now - last < .seconds(60) { return nil }
                defer { refusals = (0, now) }
                return refusals.count
            }
            if let count {
                logger.notice(
                    "managed-identity requests refused: a secret that names no grant",
                    metadata: ["from": "\(request.remote)", "refused": "\(count)"]
                )
            }
            return .failure(
                Refusal(.unauthorized, "the X-IDENTITY-HEADER secret names no grant (revoked, or never made)")
            )
        }
        guard grant.expiresAt > broker.clock.nowSeconds else {
            return .failure(Refusal(.unauthorized, "the grant \(grant.label) has expired: make a new one"))
        }
        guard request.local == grant.listen else {
            return .failure(Refusal(.unauthorized, "the grant \(grant.label) is not served at this address"))
        }
        if let clientId = request.clientId, clientId.lowercased() != grant.clientId.lowercased() {
            return .failure(
                Refusal(.badRequest, "client_id \(shown(clientId)) is not this grant's identity (\(grant.clientId))")
            )
        }
        let caller = Caller(
            pid: 0,
            uid: UInt32.max,
            gid: UInt32.max,
            executable: nil,
            via: .endpoint,
            grant: grant.label,
            address: request.remoteHost
        )
        let answer: Answer<AcquireTokenResult>
        do {
            answer = try broker.answer(
                grant,
                resource: request.resource,
                caller: caller,
                correlationId: request.correlationId
            )
        } catch {
            return .failure(refusal(error, grant: grant))
        }
        switch answer {
        case .now(let result):
            return .success(.now(reply(result, grant: grant, resource: request.resource)))
        case .later(let work):
            return .success(
                .later {
                    do throws(BrokerFailure) {
                        return self.reply(try await work(.none), grant: grant, resource: request.resource)
                    } catch {
                        // Revoked, or expired, while the provider answered: the holder hears what it would now.
                        guard self.broker.grants.isServing(grant.id) else {
                            return .failure(.unauthorized, "the grant \(grant.label) was revoked or has expired")
                        }
                        let refusal = self.refusal(error, grant: grant)
                        return .failure(refusal.status, refusal.message)
                    }
                }
            )
        }
    }

    private func reply(_ result: AcquireTokenResult, grant: GrantRecord, resource: String) -> Reply {
        broker.grants.served(grant.id)
        let token = result.brokerTokenResponse
        return .token(
            TokenAnswer(
                access_token: token.accessToken.reveal(),
                client_id: grant.clientId,
                expires_on: "\(token.expiresOn / 1000)",
                resource: resource,
                token_type: token.accessTokenType
            )
        )
    }

    /// The status and message a broker failure gets: the holder's own mistakes 4xx, a sign-in needed on the host
    /// 403, the provider or the broker being unavailable 503 (which the SDKs retry).
    private func refusal(_ failure: BrokerFailure, grant: GrantRecord) -> Refusal {
        switch failure.code {
        case .permissionDenied:
            return Refusal(.forbidden, failure.message)
        case .invalidParams:
            return Refusal(.badRequest, failure.message)
        case .interactionRequired, .noAccount:
            return Refusal(
                .forbidden,
                "the grant's account must sign in again on the host (tokenbroker login --client-id \(grant.clientId)): "
                    + failure.message
            )
        case .throttled:
            return Refusal(.tooManyRequests, failure.message)
        case .brokerBusy, .serverError, .timeout, .brokerStopping:
            return Refusal(.serviceUnavailable, failure.message)
        default:
            return Refusal(.internalServerError, failure.message)
        }
    }
}
