import BrokerCache
import BrokerCore
import BrokerProtocol
import BrokerTestSupport
import Logging
import NIOCore
import NIOHTTP1
import Testing

@testable import BrokerManagedIdentity

/// What the endpoint accepts as a token request, and the status it answers everything else with.
struct EndpointRequestTests {
    private let local: SocketAddress
    private let remote: SocketAddress

    init() throws {
        local = try SocketAddress(ipAddress: "172.17.0.1", port: 41234)
        remote = try SocketAddress(ipAddress: "172.17.0.2", port: 50000)
    }

    private func parse(
        _ uri: String,
        method: HTTPMethod = .GET,
        headers: [(String, String)] = [("X-IDENTITY-HEADER", "secret")],
        hasBody: Bool = false
    ) -> Result<EndpointRequest, Refusal> {
        EndpointRequest.parse(
            HTTPRequestHead(version: .http1_1, method: method, uri: uri, headers: HTTPHeaders(headers)),
            hasBody: hasBody,
            local: local,
            remote: remote
        )
    }

    /// App Service's request, as azure-identity and msal send it.
    @Test func acceptsTheAppServiceForm() throws {
        let request = try parse(
            "/msi/token?api-version=2019-08-01&resource=https%3A%2F%2Fvault.azure.net&client_id=app",
            headers: [("X-IDENTITY-HEADER", "s3cret"), ("Metadata", "true"), ("x-ms-client-request-id", "req-1")]
        ).get()
        #expect(request.secret == "s3cret")
        #expect(request.resource == "https://vault.azure.net")
        #expect(request.clientId == "app")
        #expect(request.correlationId == "req-1")
        #expect(request.local == (try? ListenAddress.parse("172.17.0.1:41234").get()))
        #expect(request.remote == "172.17.0.2:50000")
        #expect(request.remoteHost == "172.17.0.2")
    }

    /// Each malformed request gets its status, and a message that names the fault.
    @Test func refusesWhatIsNotATokenRequest() {
        let cases: [(Result<EndpointRequest, Refusal>, UInt, String)] = [
            (parse("/msi/token?api-version=2019-08-01&resource=r", method: .POST), 405, "only GET"),
            (parse("/other?api-version=2019-08-01&resource=r"), 404, "/msi/token"),
            (parse("/msi/token?resource=r"), 400, "api-version"),
            (parse("/msi/token?api-version=2017-09-01&resource=r"), 400, "api-version"),
            (parse("/msi/token?api-version=2019-08-01"), 400, "resource"),
            (parse("/msi/token?api-version=2019-08-01&resource="), 400, "resource"),
            (parse("/msi/token?api-version=2019-08-01&resource=a&resource=b"), 400, "twice"),
            (parse("/msi/token?api-version=2019-08-01&resource=r&mi_res_id=x"), 400, "one identity"),
            (parse("/msi/token?api-version=2019-08-01&resource=r&object_id=x"), 400, "one identity"),
            (parse("/msi/token?api-version=2019-08-01&resource=r", headers: []), 401, "X-IDENTITY-HEADER"),
            (
                parse("/msi/token?api-version=2019-08-01&resource=r", headers: [("X-IDENTITY-HEADER", "")]), 401,
                "X-IDENTITY-HEADER"
            ),
            (
                parse(
                    "/msi/token?api-version=2019-08-01&resource=r",
                    headers: [("X-IDENTITY-HEADER", "a"), ("X-IDENTITY-HEADER", "b")]
                ),
                401, "X-IDENTITY-HEADER"
            ),
            (parse("/msi/token?api-version=2019-08-01&resource=r", hasBody: true), 400, "no body"),
        ]
        for (result, status, fragment) in cases {
            guard case .failure(let refusal) = result else {
                Issue.record("accepted a request that should get \(status)")
                continue
            }
            #expect(refusal.status.code == status, "\(refusal.message)")
            #expect(refusal.message.contains(fragment), "\(refusal.message)")
        }
    }

    /// An SDK's request id that is too long or has spaces is replaced, never echoed into logs.
    @Test func replacesAnUnusableRequestId() throws {
        let long = try parse(
            "/msi/token?api-version=2019-08-01&resource=r",
            headers: [("X-IDENTITY-HEADER", "s"), ("x-ms-client-request-id", String(repeating: "a", count: 65))]
        ).get()
        #expect(long.correlationId.count == 36)
    }

    /// The error body is App Service's shape, which MSAL turns into "statusCode, message".
    @Test func answersErrorsInAppServicesShape() {
        let reply = Reply.failure(.unauthorized, "the grant has expired")
        #expect(reply.status == .unauthorized)
        #expect(String(decoding: reply.body, as: UTF8.self) == #"{"message":"the grant has expired","statusCode":401}"#)
    }

    /// The endpoint serves the three grant methods of the table (the broker serves the rest).
    @Test func servesTheGrantMethods() async throws {
        let broker = TokenBroker(
            cache: try await TokenCache(store: InMemoryTokenStore([])),
            logger: Logger(label: "test")
        )
        let endpoint = IdentityEndpoint(broker: broker, logger: Logger(label: "test"))
        #expect(
            endpoint.handlers().served == [Methods.CreateGrant.name, Methods.ListGrants.name, Methods.RevokeGrant.name]
        )
        #expect(!endpoint.servesGrants)
    }
}
