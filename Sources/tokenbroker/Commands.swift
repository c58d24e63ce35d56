public import ArgumentParser
import BrokerClient
public import BrokerProtocol
import BrokerSettings

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show whether the broker runs, and what it holds.")

    @OptionGroup var connection: ConnectionOptions
    @Flag(help: "Print the status as JSON.") var json = false

    func run() async throws {
        let units = connection.socket == nil ? UnitStates.describe() : nil
        do {
            try await withBroker(connection) { broker in try await show(broker, units: units) }
        } catch {
            // Not running: what systemd knows helps most here.
            if let units, !json { Output.line("systemd:     \(units)") }
            throw error
        }
    }

    private func show(_ broker: Broker, units: String?) async throws {
        let status = try await broker.status()
        if json { return try Output.json(status) }
        Output.line(
            "tokenbrokerd \(status.version) (protocol \(status.protocolVersion)), pid \(status.pid), up \(Format.duration(status.uptimeSeconds))"
        )
        Output.line(
            "socket:      \(status.socketPath) (\(status.activation == "systemd" ? "socket-activated by systemd" : "bound by the daemon"))"
        )
        // Asked after the broker answered: its first connection may have started the service.
        if let units = units.map({ _ in UnitStates.describe() ?? "" }), !units.isEmpty {
            Output.line("systemd:     \(units)")
        }
        Output.line("state:       \(status.stateDirectory)")
        let cache = status.cache
        Output.line(
            "cache:       \(cache.accounts) accounts, \(cache.accessTokens) access tokens, \(cache.refreshTokens) refresh tokens, \(cache.idTokens) id tokens"
        )
        Output.line(
            "connections: \(status.connections.open) open, \(status.connections.accepted) accepted, \(status.connections.refused) refused"
        )
        Output.line(
            "requests:    \(status.requests.succeeded) answered, \(status.requests.failed) failed, \(status.requests.inFlight) in flight"
        )
        if let bus = status.bus { Output.line("bus:         \(Self.describe(bus))") }
        if let key = status.keyStore { Output.line("key:         \(Self.describe(key))") }
        // A broker of protocol 1.1 has no grants to list.
        if let grants = try? await broker.grants(), !grants.isEmpty {
            Output.line("grants:      \(Self.describe(grants))")
        }
        if let store = status.store, !store.isHealthy {
            for problem in Self.problems(of: store) { Output.line("store:       \(problem)") }
        }
        for error in status.recentErrors.suffix(5) {
            let when = Date(timeIntervalSince1970: Double(error.at) / 1000)
            Output.line(
                "  \(Format.time(when))  \(error.method.isEmpty ? "-" : error.method)  \(error.errorCode): \(error.message)"
            )
        }
    }

    /// Where the cache key is kept, in one line: a warning for a plain file, what to do when locked.
    static func describe(_ key: KeyStoreStatus) -> String {
        let store = key.store ?? "none"
        if key.locked {
            return "LOCKED (\(store)): \(key.problem ?? "the key cannot be had")\n             \(key.hint ?? "")"
        }
        if let warning = key.warning { return "\(store): WARNING: \(warning)" }
        return "\(store): \(key.protection ?? "")"
    }

    /// The Broker1 front end, in one line.
    static func describe(_ bus: StatusResult.BusStatus) -> String {
        switch bus.state {
        case .owner: "answers MSAL apps as \(bus.name) on the session bus (\(bus.calls) calls)"
        case .taken: "not answering MSAL apps: \(bus.message ?? "\(bus.name) is owned by another program")"
        case .starting: "joining the session bus"
        case .off: "Broker1 front end off" + (bus.message.map { ": \($0)" } ?? "")
        case .unavailable: "not answering MSAL apps: \(bus.message ?? "no session bus")"
        }
    }

    /// The managed-identity endpoint's grants, in one line.
    static func describe(_ grants: [EndpointGrant]) -> String {
        let endpoints = Set(grants.map(\.endpoint)).sorted()
        let down = grants.filter { !$0.listening }.count
        return "\(grants.count) live (tokenbroker grant list), served at " + endpoints.joined(separator: ", ")
            + (down > 0 ? "; \(down) not listening" : "")
    }

    /// What is wrong with the cache's storage, one sentence each.
    static func problems(of store: StatusResult.StoreHealth) -> [String] {
        var problems: [String] = []
        if store.databaseWasMissing {
            problems.append("the database was missing beside its key at start: the cache started empty")
        }
        if store.damagedEntries > 0 {
            problems.append("\(store.damagedEntries) entries cannot be opened (left in place; see the daemon's log)")
        }
        if store.failedWrites > 0 {
            let when = store.lastWriteErrorAt.map {
                " at " + Format.time(Date(timeIntervalSince1970: Double($0) / 1000))
            }
            problems.append(
                "\(store.failedWrites) writes failed, the last\(when ?? ""): \(store.lastWriteError ?? "no reason given")"
            )
        }
        return problems
    }
}

struct Accounts: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the accounts the broker holds.")

    @OptionGroup var connection: ConnectionOptions
    @Option(help: "Only accounts with tokens for this client id (or its family).") var clientId: String?
    @Option(help: "Only accounts of this authority.") var authority: String?
    @Flag(help: "Print the accounts as JSON.") var json = false

    func run() async throws {
        try await withBroker(connection) { broker in
            let accounts = try await broker.accounts(clientId: clientId, authority: authority)
            if json { return try Output.json(accounts) }
            guard !accounts.isEmpty else { return Output.line("No accounts. Sign in with `tokenbroker login`.") }
            let rows = accounts.map {
                [$0.username.isEmpty ? "-" : $0.username, $0.identifier, $0.environment, $0.realm]
            }
            Output.line(Format.table(header: ["USERNAME", "IDENTIFIER", "ENVIRONMENT", "REALM"], rows: rows))
        }
    }
}

struct AccountCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "account",
        abstract: "Show one account, found by identifier or else by username."
    )

    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The account's identifier (uid.utid) or username (UPN).") var identifierOrUsername: String
    @Flag(help: "Print the account as JSON.") var json = false

    func run() async throws {
        try await withBroker(connection) { broker in
            let account = try await broker.account(
                AccountSelector(identifierOrUsername: identifierOrUsername)
            )
            if json { return try Output.json(account) }
            Output.line("username:         \(account.username)")
            Output.line("identifier:       \(account.identifier)")
            Output.line("environment:      \(account.environment)")
            Output.line("realm:            \(account.realm)")
            Output.line("local account id: \(account.localAccountId)")
            if let name = account.name { Output.line("name:             \(name)") }
            if let source = account.accountSource { Output.line("signed in by:     \(source)") }
        }
    }
}

/// The app and what it asks for: shared by `token` and `login`.
struct AppOptions: ParsableArguments {
    @Option(help: "The app's client id.") var clientId: String
    @Option(
        name: .customLong("scope"),
        help: "A scope; repeat the option or give a space-separated list."
    ) var scopes: [String] = []
    @Option(help: "An ADAL v1 resource, asked for as <resource>/.default.") var resource: String?
    @Option(help: "The authority (default: https://login.microsoftonline.com/common).") var authority: String?

    /// The scopes, space-separated lists split.
    var scopeList: [String] {
        scopes.flatMap { $0.split(separator: " ").map(String.init) }
    }

    func validate() throws {
        guard !scopes.isEmpty || resource != nil else { throw ValidationError("give --scope or --resource") }
    }
}

extension AccountSelector {
    /// The lookup rule for one word from the command line: by identifier when it is one, else by username.
    init(identifierOrUsername text: String) {
        self.init(identifier: text, username: text)
    }
}

struct Token: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print an access token for an app, from the broker's cache or refreshed; never prompts.",
        discussion: "Prints the token alone on stdout (for `$(tokenbroker token …)`), or everything with --json."
    )

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var app: AppOptions
    @Option(help: "The account: identifier or username (default: the only account).") var account: String?
    @Option(help: "The token must stay valid at least this many seconds.") var minValidity: Int?
    @Flag(help: "Refresh even if a cached token fits.") var forceRefresh = false
    @Flag(help: "Print the whole result as JSON.") var json = false

    func validate() throws {
        if let minValidity, minValidity < 0 { throw ValidationError("--min-validity must not be negative") }
    }

    func run() async throws {
        try await withBroker(connection) { broker in
            let request = TokenRequest(
                clientId: app.clientId,
                scopes: app.scopeList,
                resource: app.resource,
                authority: app.authority,
                account: account.map(AccountSelector.init(identifierOrUsername:)),
                minimumValidity: minValidity.map { .seconds($0) },
                forceRefresh: forceRefresh
            )
            let result = try await broker.silentToken(request)
            if json { return try Output.json(result) }
            Output.line(result.accessToken.reveal())
        }
    }
}

struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sign in interactively, so this app (and its family) gets tokens silently afterwards.",
        discussion: """
            --webview picks how the sign-in is shown:
              default      the browser when this session has a display (DISPLAY or WAYLAND_DISPLAY), else a device code
              system       the broker's browser: system-browser of tokenbrokerd.conf, its $BROWSER, else
                           xdg-open; the redirect is caught on 127.0.0.1
              custom       the browser profile of --browser-command (a private window, another browser)
              device-code  a code to enter on another device
            --browser-command names a profile of tokenbrokerd.conf (browser.<name> = <command>), or is a
            command line, which is saved there as a profile first: only your configuration names
            programs the broker runs, never a client.
            Progress goes to stderr; stdout gets the result (with --json, all of it).
            """
    )

    enum Webview: String, ExpressibleByArgument, CaseIterable {
        case `default`, system, custom
        case deviceCode = "device-code"

        var webviewType: WebviewType {
            switch self {
            case .default: .default
            case .system: .systemBrowser
            case .custom: .customBrowser
            case .deviceCode: .deviceCode
            }
        }
    }

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var app: AppOptions
    @Option(help: "How the sign-in is shown: default, system, custom or device-code.") var webview: Webview = .default
    @Option(
        help:
            "For --webview custom: a browser profile of tokenbrokerd.conf, or a command line (quoted as in a shell) to save as one."
    )
    var browserCommand: String?
    @Option(help: "The username to pre-fill; also lets a signed-in account skip the sign-in.") var loginHint: String?
    @Option(help: "The account to sign in again: identifier or username.") var account: String?
    @Option(help: "login, select_account, consent, none or create.") var prompt: String?
    @Option(help: "Entra ID's home-realm hint (consumers, organizations, a domain).") var domainHint: String?
    @Option(help: "Give up after this many seconds (default 300).") var timeout: Int?
    @Flag(help: "Print the whole result as JSON.") var json = false

    func validate() throws {
        if webview == .custom, (browserCommand ?? "").isEmpty {
            throw ValidationError("--webview custom needs --browser-command")
        }
        if browserCommand != nil, webview != .custom {
            throw ValidationError("--browser-command goes with --webview custom")
        }
        if let browserCommand {
            guard let words = ShellWords.split(browserCommand) else {
                throw ValidationError("--browser-command has an unclosed quote")
            }
            if words.isEmpty { throw ValidationError("--browser-command is empty") }
        }
        if let timeout, timeout < 1 { throw ValidationError("--timeout must be at least 1") }
    }

    func run() async throws {
        let profile = try browserCommand.map(browserProfile)
        try await withBroker(connection) { broker in
            let request = InteractiveRequest(
                clientId: app.clientId,
                scopes: app.scopeList,
                resource: app.resource,
                authority: app.authority,
                webviewType: webview.webviewType,
                browserProfile: profile,
                account: account.map(AccountSelector.init(identifierOrUsername:)),
                prompt: prompt,
                loginHint: loginHint,
                domainHint: domainHint,
                timeout: timeout.map { .seconds($0) }
            )
            let result = try await broker.acquireToken(request) { event in
                switch event {
                case .didStartLoad: Output.progress("Opening the sign-in page…")
                case .didFinishLoad(let url):
                    Output.progress("Continue in the browser. If it did not open, visit:\n  \(url)")
                case .deviceCode(let prompt):
                    Output.progress(prompt.message)
                case .didComplete: Output.progress("Signed in; fetching tokens…")
                case .didFail: break  // the result carries the same error
                }
            }
            if json { return try Output.json(result) }
            let who = result.account.username.isEmpty ? result.account.identifier : result.account.username
            let source = result.tokenSource == .cache ? " (already signed in)" : ""
            Output.line("signed in as \(who)\(source)")
        }
    }
}

extension Login {
    /// The profile `--browser-command` names: one of the configuration's, or a command line saved as a new one
    /// (named after its program), which the broker reads when the sign-in starts.
    func browserProfile(_ value: String) throws -> String {
        let file = ConfigurationFile()
        let profiles = file.read().browserProfiles
        if profiles[value] != nil { return value }
        guard let command = ShellWords.split(value), let program = command.first else {
            throw ValidationError("--browser-command names no profile and no command")
        }
        let base = String(
            (program.split(separator: "/").last ?? "browser").lowercased()
                .map { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") ? $0 : "-" }
                .prefix(40)
        )
        let stem = ConfigurationFile.isProfileName(base) ? base : "browser"
        var name = stem
        var suffix = 2
        while let existing = profiles[name], existing != command {
            name = "\(stem)-\(suffix)"
            suffix += 1
        }
        if profiles[name] == nil {
            do {
                try file.saveBrowserProfile(name, command: command)
            } catch {
                Output.error("cannot save the browser profile in \(file.url.path): \(error)")
                throw ExitCode(73)
            }
            Output.progress("Saved the browser command as profile \"\(name)\" in \(file.url.path).")
        }
        return name
    }
}

struct Import: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Import an MSAL or ADAL token cache file into the broker.",
        discussion: "Adds and updates entries; never deletes, never replaces a newer token with an older one."
    )

    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The cache file, or - for stdin.") var file: String
    @Option(help: "The file's format: msal or adal.") var format: CacheFormat = .msal
    @Flag(help: "Print the report as JSON.") var json = false

    func run() async throws {
        let data: Data
        switch Files.contents(file == "-" ? nil : file) {
        case .read(let bytes): data = Data(bytes)
        case .unreadable(let reason):
            Output.error("cannot read \(file): \(reason)")
            throw ExitCode(66)
        }
        guard data.count <= WireProtocol.maximumResponseBytes else {
            Output.error(
                "\(file) is \(data.count) bytes, larger than any cache the broker exports (\(WireProtocol.maximumResponseBytes)); refusing it"
            )
            throw ExitCode(65)
        }
        guard let text = String(data: data, encoding: .utf8) else {
            Output.error("\(file) is not UTF-8 text")
            throw ExitCode(65)
        }
        try await withBroker(connection) { broker in
            let report = try await broker.importCache(Secret(text), format: format)
            if json { return try Output.json(report) }
            let counts = report.imported
            Output.line(
                "imported \(counts.accounts) accounts, \(counts.accessTokens) access tokens, \(counts.refreshTokens) refresh tokens, \(counts.idTokens) id tokens, \(counts.appMetadata) app metadata"
            )
            if !report.skipped.isEmpty {
                Output.line("skipped \(report.skipped.count):")
                for entry in report.skipped { Output.line("  \(entry.entry): \(entry.reason)") }
            }
        }
    }
}

struct Export: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Export the broker's cache as MSAL or ADAL JSON (it contains tokens: keep it private).",
        discussion: "Writes to stdout, or to --output with mode 0600."
    )

    @OptionGroup var connection: ConnectionOptions
    @Option(help: "The format: msal or adal.") var format: CacheFormat = .msal
    @Option(help: "Only what this client id (and its family) can use.") var clientId: String?
    @Option(help: "Write to this file (created 0600) instead of stdout.") var output: String?

    func run() async throws {
        try await withBroker(connection) { broker in
            let export = try await broker.exportCache(format: format, clientId: clientId)
            let bytes = Data(export.data.reveal().utf8)
            guard let output else {
                Output.write(1, Array(bytes) + [UInt8(ascii: "\n")])
                return
            }
            try Files.writePrivately(bytes, to: output)
        }
    }
}

struct RemoveAccount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove-account",
        abstract: "Sign an account out of the broker (all its tokens), or out of one client id."
    )

    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The account's identifier or username.") var identifierOrUsername: String
    @Option(help: "Remove only this client id's tokens; the account stays for other apps.") var clientId: String?
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        try await withBroker(connection) { broker in
            let result = try await broker.removeAccount(
                AccountSelector(identifierOrUsername: identifierOrUsername),
                clientId: clientId
            )
            if json { return try Output.json(result) }
            Output.line(
                result.accountRemoved
                    ? "removed the account and \(result.removedCredentials) tokens"
                    : "removed \(result.removedCredentials) tokens of \(clientId ?? "the client")"
            )
        }
    }
}

extension CacheFormat: ExpressibleByArgument {}
