import ArgumentParser
import BrokerClient
import BrokerProtocol
import Glibc

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// `tokenbroker grant …`: capabilities of the managed-identity endpoint, for containers and sandboxes.
struct Grant: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Let a container or sandbox get tokens through the broker's managed-identity endpoint.",
        discussion: """
            A grant lets whoever holds its secret get one account's access tokens for one app, for the
            resources or scopes it names, until it expires or is revoked: the way Azure SDKs and MSAL
            get tokens in App Service (IDENTITY_ENDPOINT and IDENTITY_HEADER). Never a refresh token,
            never a sign-in; every token served is audited with the grant's label.
            """,
        subcommands: [GrantCreate.self, GrantList.self, GrantRevoke.self]
    )
}

struct GrantCreate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Create a grant; print IDENTITY_ENDPOINT and IDENTITY_HEADER in env-file form on stdout.",
        discussion: """
            For `docker run --env-file`, a devcontainer's runArgs or a sandbox's environment:

              (umask 077; tokenbroker grant create --client-id … --resource https://vault.azure.net > grant.env)

            or --output grant.env (created 0600). The secret is shown this once: the broker keeps only its hash.
            The endpoint listens on loopback by default, which a container reaches only with --network host;
            for a container on a bridge, listen on the bridge's address (docker0: --listen 172.17.0.1:0).
            """
    )

    @OptionGroup var connection: ConnectionOptions
    @Option(help: "The app (client id) whose tokens the grant hands out.") var clientId: String
    @Option(
        name: .customLong("resource"),
        help: "A resource the holder may ask for (asked for as <resource>/.default); repeatable."
    ) var resources: [String] = []
    @Option(name: .customLong("scope"), help: "A scope the holder may ask for; repeatable.") var scopes: [String] = []
    @Option(help: "The authority (default: https://login.microsoftonline.com/common).") var authority: String?
    @Option(help: "The account: identifier or username (default: the only account).") var account: String?
    @Option(help: "How long the grant lasts: seconds, or a number with s, m, h or d (default 8h, at most 30d).")
    var ttl: String?
    @Option(help: "A name for the grant in listings and the audit log (default: its id).") var label: String?
    @Option(help: "Where the endpoint listens: ADDRESS:PORT, port 0 for any (default 127.0.0.1:0).") var listen: String?
    @Option(help: "Write the env lines to this file (created 0600) instead of stdout.") var output: String?
    @Flag(help: "Print the whole result as JSON (it holds the secret).") var json = false

    func validate() throws {
        guard !resources.isEmpty || !scopes.isEmpty else { throw ValidationError("give --resource or --scope") }
        // Checked before the grant exists: its secret is shown once, and a file that cannot be written loses it.
        if let output, access(output, F_OK) == 0 { throw ValidationError("--output \(output) exists already") }
        if let ttl, Self.seconds(ttl) == nil {
            throw ValidationError("--ttl: expected seconds or a number with s, m, h or d, such as 8h")
        }
    }

    /// `90`, `90s`, `30m`, `8h`, `7d` in seconds.
    static func seconds(_ text: String) -> Int? {
        let units: [Character: Int] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
        if let unit = text.last.flatMap({ units[$0] }) {
            return Int(text.dropLast()).flatMap { $0 > 0 && $0 <= Int.max / unit ? $0 * unit : nil }
        }
        return Int(text).flatMap { $0 > 0 ? $0 : nil }
    }

    private var params: CreateGrantParams {
        CreateGrantParams(
            clientId: clientId,
            authority: authority,
            resources: resources.isEmpty ? nil : resources,
            scopes: scopes.isEmpty ? nil : scopes,
            account: account.map(AccountSelector.init(identifierOrUsername:)),
            lifetimeSeconds: ttl.flatMap(Self.seconds),
            label: label,
            listen: listen
        )
    }

    func run() async throws {
        try await withBroker(connection) { broker in
            let request = params
            let created: CreateGrantResult
            do {
                created = try await broker.createGrant(request)
            } catch let error as BrokerError {
                guard error.code == .noAccount else { throw error }
                let login = Format.loginCommand(
                    clientId: clientId,
                    authority: authority,
                    scopes: scopes,
                    resources: resources
                )
                throw Failure(error, hint: "sign in first: " + login)
            }
            let grant = created.grant
            if json { return try Output.json(created) }
            let lines = "IDENTITY_ENDPOINT=\(grant.endpoint)\nIDENTITY_HEADER=\(created.identityHeader.reveal())\n"
            if let output {
                do {
                    try Files.writePrivately(Data(lines.utf8), to: output)
                } catch {
                    // Nobody holds the secret now: the grant goes too.
                    _ = try? await broker.revokeGrant(grant.id)
                    Output.error("the grant was revoked, as its secret could not be written")
                    throw error
                }
            } else {
                Output.write(1, lines)
            }
            let expires = Format.time(Date(timeIntervalSince1970: TimeInterval(grant.expiresAt)))
            Output.progress(
                "grant \(grant.id) (\(grant.label)) for \(grant.username ?? grant.accountIdentifier), "
                    + "client \(grant.clientId), until \(expires); revoke with: tokenbroker grant revoke \(grant.id)"
            )
            if grant.endpoint.hasPrefix("http://127.") || grant.endpoint.hasPrefix("http://[::1]") {
                Output.progress(
                    "the endpoint is on loopback: a container reaches it with --network host; on a bridge, "
                        + "create the grant with --listen <bridge address>:0"
                )
            }
        }
    }
}

struct GrantList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List the grants not yet expired or revoked (never their secrets)."
    )

    @OptionGroup var connection: ConnectionOptions
    @Flag(help: "Print the grants as JSON.") var json = false

    func run() async throws {
        try await withBroker(connection) { broker in
            let grants = try await broker.grants()
            if json { return try Output.json(grants) }
            guard !grants.isEmpty else { return Output.line("no grants") }
            let rows = grants.map { grant in
                [
                    grant.id, grant.label, grant.username ?? grant.accountIdentifier, grant.clientId,
                    (grant.resources + grant.scopes).joined(separator: " "),
                    Format.time(Date(timeIntervalSince1970: TimeInterval(grant.expiresAt))),
                    "\(grant.tokensServed)",
                    grant.listening ? grant.endpoint : "\(grant.endpoint) (not listening: \(grant.problem ?? "?"))",
                ]
            }
            Output.line(
                Format.table(
                    header: [
                        "ID", "LABEL", "ACCOUNT", "CLIENT ID", "RESOURCES/SCOPES", "EXPIRES", "SERVED", "ENDPOINT",
                    ],
                    rows: rows
                )
            )
        }
    }
}

struct GrantRevoke: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke",
        abstract: "Revoke a grant: its holders get no token from now on."
    )

    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The grant's id, or a label that names one grant.") var grant: String

    func run() async throws {
        try await withBroker(connection) { broker in
            let revoked = try await broker.revokeGrant(grant)
            Output.line("revoked \(revoked.id) (\(revoked.label))")
        }
    }
}
