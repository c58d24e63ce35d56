import ArgumentParser
import BrokerProtocol
import Dispatch
import Foundation

/// `tokenbroker-test-idp`: an Entra-shaped identity provider for one tenant on 127.0.0.1, for integration tests.
@main
struct TestIdentityProviderCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokenbroker-test-idp",
        abstract: "An Entra ID-shaped OAuth/OIDC provider on 127.0.0.1 for tokenbroker's integration tests.",
        discussion: """
            Prints one JSON line ({"port", "baseURL", "tenantId", "authority"}) on standard output once it listens, \
            logs to standard error, and serves until SIGTERM or SIGINT. With --tls-certificate-out it serves HTTPS \
            with a fresh self-signed certificate written to that path. See Tests/TestIdentityProvider/README.md.
            """
    )

    @Option(help: "The TCP port on 127.0.0.1; 0 picks a free one.")
    var port = 0

    @Option(name: .customLong("tenant-id"), help: "The tenant id (a GUID).")
    var tenantID = ProviderConfiguration.defaultTenantID

    @Option(
        name: .customLong("family-client"),
        help: "A family (FOCI) client id; repeatable. Replaces the two default family clients."
    )
    var familyClients: [String] = []

    @Option(
        name: .customLong("client"),
        help: "A client id outside the family; repeatable. Replaces the default non-family client."
    )
    var otherClients: [String] = []

    @Option(help: "Access and id token lifetime in seconds (expires_in).")
    var tokenLifetime = 3600

    @Option(help: "Send refresh_in with this many seconds.")
    var refreshIn: Int?

    @Option(help: "Refresh tokens expire this many seconds after they are issued (default: never).")
    var refreshTokenLifetime: Int?

    @Flag(help: "Return the same refresh token on refresh instead of rotating it.")
    var noRotate = false

    @Option(help: "The device code polling interval in seconds.")
    var deviceCodeInterval = 1

    @Option(help: "The device code lifetime in seconds.")
    var deviceCodeLifetime = 600

    @Option(
        name: .customLong("tls-certificate-out"),
        help: ArgumentHelp(
            "Serve HTTPS with a fresh self-signed certificate, and write its PEM to this path (a CA bundle).",
            valueName: "path"
        )
    )
    var tlsCertificateOut: String?

    mutating func validate() throws {
        guard UUID(uuidString: tenantID) != nil else { throw ValidationError("--tenant-id must be a GUID") }
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0...65535") }
        guard tokenLifetime > 0, deviceCodeLifetime > 0, deviceCodeInterval >= 0 else {
            throw ValidationError("lifetimes must be positive and the interval not negative")
        }
        guard (refreshIn ?? 1) > 0, (refreshTokenLifetime ?? 1) > 0 else {
            throw ValidationError("--refresh-in and --refresh-token-lifetime must be positive")
        }
        guard tlsCertificateOut?.isEmpty != true else { throw ValidationError("--tls-certificate-out needs a path") }
        let families = Set(familyClients.map { $0.lowercased() })
        guard families.isDisjoint(with: otherClients.map { $0.lowercased() }) else {
            throw ValidationError("a client id cannot be both a family client and a non-family client")
        }
    }

    func run() async throws {
        let key = try SigningKey()
        let tls = try tlsCertificateOut.map { _ in try TLSIdentity() }
        let served = ServedTime()
        let server = try await HTTPServer.bind(host: "127.0.0.1", port: port, tls: tls?.context, timing: served)
        // The scheme's default port is left out, as clients write the URL (MSAL keys its cache by the host alone).
        let scheme = tls == nil ? "http" : "https"
        let isDefaultPort = server.port == (tls == nil ? 80 : 443)
        let baseURL = "\(scheme)://127.0.0.1" + (isDefaultPort ? "" : ":\(server.port)")
        if let tls, let tlsCertificateOut {
            // Written before the start-up line, so a client reading that line finds the certificate in place.
            try tls.writeCertificate(to: tlsCertificateOut)
            Log.info("wrote the TLS certificate to \(tlsCertificateOut)")
        }
        let configuration = ProviderConfiguration(
            tenantID: tenantID.lowercased(),
            familyClients: Set(
                (familyClients.isEmpty ? ProviderConfiguration.defaultFamilyClients : familyClients)
                    .map { $0.lowercased() }
            ),
            otherClients: Set(
                (otherClients.isEmpty ? ProviderConfiguration.defaultOtherClients : otherClients)
                    .map { $0.lowercased() }
            ),
            tokenLifetime: tokenLifetime,
            refreshIn: refreshIn,
            refreshTokenLifetime: refreshTokenLifetime,
            rotatesRefreshTokens: !noRotate,
            deviceCodeInterval: deviceCodeInterval,
            deviceCodeLifetime: deviceCodeLifetime,
            baseURL: baseURL
        )
        let router = Router(provider: IdentityProvider(configuration: configuration, served: served), key: key)
        let stopping = SignalWatch(signals: [SIGTERM, SIGINT])
        try announce(
            ReadyLine(
                port: server.port,
                baseURL: baseURL,
                tenantId: configuration.tenantID,
                authority: configuration.authority
            )
        )
        Log.info(
            "serving tenant \(configuration.tenantID) at \(baseURL); family clients "
                + "\(configuration.familyClients.sorted()), other clients \(configuration.otherClients.sorted())"
        )
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run(handler: router.handle) }
            group.addTask {
                let signal = await stopping.next()
                Log.info("signal \(signal): stopping")
            }
            _ = try await group.next()
            // Whatever finished first (a signal, or the listener failing), stop the rest; never hang on a peer.
            DispatchQueue.global().asyncAfter(deadline: .now() + 3) {
                Log.info("connections did not close in time; exiting")
                Foundation.exit(0)
            }
            group.cancelAll()
        }
    }

    /// Writes the start-up line on standard output; the file handle writes at once, nothing is buffered.
    private func announce(_ line: ReadyLine) throws {
        FileHandle.standardOutput.write(Data(try WireEncoder().encode(line) + [UInt8(ascii: "\n")]))
    }
}

/// The one line printed on standard output once the provider listens.
struct ReadyLine: Encodable {
    let port: Int
    let baseURL: String
    let tenantId: String
    let authority: String
}
