import ArgumentParser
import BrokerClient
import BrokerProtocol
import BrokerSettings
import Glibc

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// `tokenbroker git-credential`: git's credential helper protocol, answered from the broker's cache.
struct GitCredential: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "git-credential",
        abstract: "A git credential helper: an access token for the host's resource, from the broker's cache.",
        discussion: """
            Set it up per host with --configure (writes credential.<url>.helper to ~/.gitconfig):

              tokenbroker git-credential --configure dev.azure.com

            For Azure DevOps (dev.azure.com, *.visualstudio.com) the app defaults to the Azure CLI's
            client id and the resource to Azure DevOps' (499b84ac-1321-427f-aa17-267ca6975798); any
            other host needs --client-id and --resource or --scope. `get` answers with the token as the
            password (over https, or plain http to a loopback address only); `erase`, which git runs
            when the server refused it, drops that token from the broker's cache, so the next `get`
            refreshes; `store` keeps nothing. When a sign-in is needed it says how on stderr and fails,
            and git goes on to its other helpers.
            """
    )

    /// Azure DevOps' resource (its application id).
    static let azureDevOpsResource = "499b84ac-1321-427f-aa17-267ca6975798"
    /// The Azure CLI's client id: Microsoft's public client that may ask for Azure DevOps' resource (a FOCI app).
    static let azureCLIClientId = "04b07795-8ddb-461a-bbee-02f9e1bf7b46"
    /// The authority for work and school accounts.
    static let organizations = "https://login.microsoftonline.com/organizations"

    @OptionGroup var connection: ConnectionOptions
    @Option(help: "The app's client id (default for Azure DevOps: the Azure CLI's).") var clientId: String?
    @Option(name: .customLong("scope"), help: "A scope; repeatable.") var scopes: [String] = []
    @Option(help: "The resource, asked for as <resource>/.default (default for Azure DevOps: its resource id).")
    var resource: String?
    @Option(help: "The authority (default for Azure DevOps: https://login.microsoftonline.com/organizations).")
    var authority: String?
    @Option(help: "The account: identifier or username (default: the only account).") var account: String?
    @Option(help: "Configure git to ask this helper for HOST (or a URL such as http://127.0.0.1:8080), then exit.")
    var configure: String?
    @Argument(help: "What git asks: get, store or erase.") var action: String?

    func validate() throws {
        if configure == nil, action == nil {
            throw ValidationError("give the action (get, store, erase) or --configure")
        }
        if configure != nil, action != nil { throw ValidationError("--configure takes no action") }
        if let configure, clientId == nil || (resource == nil && scopes.isEmpty),
            !Self.isAzureDevOps(host: Self.url(configure).host)
        {
            throw ValidationError("--client-id and --resource or --scope are needed for hosts other than Azure DevOps")
        }
    }

    /// git's `host` without its port: `127.0.0.1:8080` → `127.0.0.1`, `[::1]:8080` → `[::1]`.
    static func withoutPort(_ host: String) -> String {
        if host.hasPrefix("["), let close = host.firstIndex(of: "]") { return String(host[...close]) }
        let parts = host.split(separator: ":", omittingEmptySubsequences: false)
        return parts.count == 2 ? String(parts[0]) : host
    }

    static func isAzureDevOps(host: String) -> Bool {
        let name = host.split(separator: ":").first.map { $0.lowercased() } ?? ""
        return name == "dev.azure.com" || name.hasSuffix(".visualstudio.com")
    }

    /// `dev.azure.com` as `https://dev.azure.com`; a URL as itself, without a trailing slash.
    static func url(_ text: String) -> (url: String, host: String) {
        var url = text.contains("://") ? text : "https://" + text
        while url.hasSuffix("/") { url.removeLast() }
        let host = url.split(separator: "/", omittingEmptySubsequences: true).dropFirst().first.map(String.init) ?? ""
        return (url, host)
    }

    /// The helper's options that shape the token request, as given on its command line.
    struct RequestOptions {
        var clientId: String?
        var scopes: [String] = []
        var resource: String?
        var authority: String?
        var account: String?

        /// The app and what it asks for, for `host`: the options given, else Azure DevOps' defaults; nil when the
        /// host needs options that were not given.
        func request(forHost host: String) -> TokenRequest? {
            let devOps = GitCredential.isAzureDevOps(host: host)
            guard let clientId = clientId ?? (devOps ? GitCredential.azureCLIClientId : nil) else { return nil }
            let resource = resource ?? (scopes.isEmpty && devOps ? GitCredential.azureDevOpsResource : nil)
            guard resource != nil || !scopes.isEmpty else { return nil }
            return TokenRequest(
                clientId: clientId,
                scopes: scopes,
                resource: resource,
                authority: authority ?? (devOps ? GitCredential.organizations : nil),
                account: account.map(AccountSelector.init(identifierOrUsername:))
            )
        }
    }

    var requestOptions: RequestOptions {
        RequestOptions(clientId: clientId, scopes: scopes, resource: resource, authority: authority, account: account)
    }

    /// What `get` asks the broker for `attributes`; throws the refusal (its message and exit status) when it asks
    /// nothing.
    ///
    /// Typed throws, not a `Result`: see ``Files/Contents``.
    static func request(
        for attributes: CredentialInput.Attributes,
        options: RequestOptions
    ) throws(Failure) -> TokenRequest {
        let scheme = attributes.scheme ?? ""
        let host = attributes.host ?? ""
        guard !scheme.isEmpty, !host.isEmpty else {
            throw Failure(
                "git-credential: the input names no protocol and host (git sends protocol=… and host=…)",
                exitCode: ExitCode(64)
            )
        }
        guard scheme == "https" || (scheme == "http" && LoopbackHost.contains(withoutPort(host))) else {
            throw Failure(
                "git-credential: no token over \(scheme) to \(host): https only, or http to a loopback address",
                exitCode: .failure
            )
        }
        guard let request = options.request(forHost: host) else {
            throw Failure(
                "git-credential: \(host) needs --client-id and --resource or --scope in the helper's command",
                exitCode: .failure
            )
        }
        return request
    }

    /// `get`'s answer to git: the username unless git gave one, the token as the password, and its expiry.
    static func answer(
        to attributes: CredentialInput.Attributes,
        accessToken: String,
        username: String,
        expiresOn: Int64
    ) -> String {
        var answer = ""
        if attributes.username == nil { answer += "username=\(username.isEmpty ? "tokenbroker" : username)\n" }
        return answer + "password=\(accessToken)\npassword_expiry_utc=\(expiresOn / 1000)\n"
    }

    func run() async throws {
        if let configure { return try configureGit(for: configure) }
        let attributes: CredentialInput.Attributes
        switch CredentialInput.read() {
        case .read(let read): attributes = read
        case .malformed(let reason):
            Output.error("git-credential: \(reason)")
            throw ExitCode(64)
        }
        switch action {
        case "get": try await get(attributes)
        case "erase": try await erase(attributes)
        default: return  // `store`, and actions of later gits: nothing to keep.
        }
    }

    private func get(_ attributes: CredentialInput.Attributes) async throws {
        let request: TokenRequest
        do {
            request = try Self.request(for: attributes, options: requestOptions)
        } catch {
            throw error.report()
        }
        try await withBroker(connection) { broker in
            let result = try await broker.silentToken(request)
            Output.write(
                1,
                Self.answer(
                    to: attributes,
                    accessToken: result.accessToken.reveal(),
                    username: result.account.username,
                    expiresOn: result.expiresOn
                )
            )
        }
    }

    private func erase(_ attributes: CredentialInput.Attributes) async throws {
        guard let password = attributes.password, !password.isEmpty else { return }
        try await withBroker(connection) { broker in
            _ = try await broker.discardAccessToken(Secret(password))
        }
    }

    private func configureGit(for target: String) throws {
        let (url, _) = Self.url(target)
        var words = [Process.executablePath, "git-credential"]
        if let socket = connection.socket { words += ["--socket", socket] }
        if let clientId { words += ["--client-id", clientId] }
        for scope in scopes { words += ["--scope", scope] }
        if let resource { words += ["--resource", resource] }
        if let authority { words += ["--authority", authority] }
        if let account { words += ["--account", account] }
        let helper = words.map(ShellWords.quote).joined(separator: " ")
        let key = "credential.\(url).helper"
        // Already there: nothing to add (a helper listed twice would be asked twice).
        if Process.run(["git", "config", "--global", "--fixed-value", "--get-all", key, helper], quiet: true) == 0 {
            return Output.line("git already asks tokenbroker for \(url)")
        }
        guard Process.run(["git", "config", "--global", "--add", key, helper], quiet: false) == 0 else {
            Output.error(
                "git config failed; add this to ~/.gitconfig yourself:\n[credential \"\(url)\"]\n\thelper = \(helper)"
            )
            throw ExitCode.failure
        }
        Output.line("git now asks tokenbroker for \(url) (\(key) in ~/.gitconfig)")
    }
}

/// `tokenbroker kube-credential`: a kubectl (client-go) exec credential plugin.
struct KubeCredential: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kube-credential",
        abstract: "A kubectl exec credential plugin: prints an ExecCredential with a token from the broker's cache.",
        discussion: """
            In a kubeconfig's users[].user.exec (see the README):

              apiVersion: client.authentication.k8s.io/v1
              command: tokenbroker
              args: [kube-credential, --client-id, <app>, --scope, <scope>]
              interactiveMode: Never

            Answers in the apiVersion KUBERNETES_EXEC_INFO names (v1 or v1beta1). For an API server that
            checks OpenID Connect id tokens (--oidc-issuer-url), give --token-type id.
            """
    )

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var app: AppOptions
    @Option(help: "The account: identifier or username (default: the only account).") var account: String?
    @Option(help: "Which token the cluster takes: access or id.") var tokenType: KubeTokenType = .access

    enum KubeTokenType: String, ExpressibleByArgument {
        case access, id
    }

    static let apiVersions = ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"]

    /// What KUBERNETES_EXEC_INFO asks for: the apiVersion to answer in, or why it cannot be read.
    static func requestedAPIVersion() -> Result<String, Failure> {
        requestedAPIVersion(execInfo: getenv("KUBERNETES_EXEC_INFO").map { String(cString: $0) })
    }

    /// The apiVersion the ExecCredential `info` (KUBERNETES_EXEC_INFO's value) asks for: v1 when there is none.
    static func requestedAPIVersion(execInfo info: String?) -> Result<String, Failure> {
        guard let info, !info.isEmpty else {
            return .success(apiVersions[0])
        }
        guard case .success(let version) = SilentCall.stringMember("apiVersion", ofObject: Array(info.utf8)) else {
            return .failure(
                Failure(
                    "kube-credential: KUBERNETES_EXEC_INFO is not an ExecCredential in JSON",
                    exitCode: ExitCode(64)
                )
            )
        }
        guard let version else { return .success(apiVersions[0]) }
        guard apiVersions.contains(version) else {
            return .failure(
                Failure(
                    "kube-credential: apiVersion \(version.prefix(80)) is not one of \(apiVersions)",
                    exitCode: ExitCode(64)
                )
            )
        }
        return .success(version)
    }

    /// The ExecCredential line kubectl reads (keys sorted, as `JSONEncoder` with sorted keys writes them).
    static func execCredential(apiVersion: String, token: String, expiresAt: Int64) -> [UInt8] {
        var line = Array(#"{"apiVersion":"#.utf8)
        WireEncoder.appendString(apiVersion, to: &line)
        line += Array(#","kind":"ExecCredential","status":{"expirationTimestamp":""#.utf8)
        line += Array(Format.utcTimestamp(epochSeconds: expiresAt).utf8)
        line += Array(#"","token":"#.utf8)
        WireEncoder.appendString(token, to: &line)
        line += Array("}}\n".utf8)
        return line
    }

    func run() async throws {
        let apiVersion: String
        switch Self.requestedAPIVersion() {
        case .success(let version): apiVersion = version
        case .failure(let failure): throw failure.report()
        }
        try await withBroker(connection) { broker in
            let (token, expiresAt) = try await token(from: broker)
            Output.write(1, Self.execCredential(apiVersion: apiVersion, token: token, expiresAt: expiresAt))
        }
    }

    /// The token and when it expires (epoch seconds): the access token, or the id token that came with it (a fresh
    /// one when the cached one has less than a minute left).
    private func token(from broker: Broker) async throws -> (String, Int64) {
        var request = TokenRequest(
            clientId: app.clientId,
            scopes: app.scopeList,
            resource: app.resource,
            authority: app.authority,
            account: account.map(AccountSelector.init(identifierOrUsername:))
        )
        for attempt in 0..<2 {
            let result = try await broker.silentToken(request)
            guard tokenType == .id else { return (result.accessToken.reveal(), result.expiresOn / 1000) }
            guard let idToken = result.idToken?.reveal(), let expiry = Self.expiry(ofJWT: idToken) else {
                throw Failure("the provider gave no id token for this app", exitCode: .failure)
            }
            if expiry - Int64(Date().timeIntervalSince1970) > 60 || attempt == 1 { return (idToken, expiry) }
            request.forceRefresh = true
        }
        throw Failure("no fresh id token", exitCode: .failure)
    }

    /// The `exp` claim of a JWT, unverified (the broker checked it when it took the token).
    static func expiry(ofJWT token: String) -> Int64? {
        let parts = token.split(separator: ".")
        guard parts.count == 3, let payload = Base64URL.decode(parts[1]) else { return nil }
        struct Claims: Decodable { let exp: Int64 }
        return try? JSONDecoder().decode(Claims.self, from: payload).exp
    }
}

/// git's credential input: `key=value` lines up to a blank line or the end, at most 64 KiB.
enum CredentialInput {
    static let maximumBytes = 64 << 10

    /// The attributes the helper reads; git's others (`path`, `wwwauth[]`, `capability[]`…) are passed over.
    ///
    /// Plain fields, not a `[String: String]`: that dictionary's first use made the runtime instantiate its type and
    /// check `String: Hashable` through the conformance tables; with the two `Result`s around it, 540,000 of the
    /// helper's 970,000 instructions (callgrind).
    struct Attributes {
        var scheme: String?
        var host: String?
        var username: String?
        var password: String?
    }

    /// What `read()` gives: git's attributes, or why the input is refused.
    ///
    /// Not a `Result`: see ``Files/Contents``.
    enum Reading {
        case read(Attributes)
        case malformed(String)
    }

    /// What git wrote on stdin, once it was read (stdin can be read once; the start-up path may read it first).
    nonisolated(unsafe) private static var input: Files.Contents?

    static func read() -> Reading {
        let read = input ?? Files.contents(nil)
        input = read
        guard case .read(let bytes) = read else { return .malformed("cannot read stdin") }
        return parse(bytes)
    }

    /// The attributes of git's input `bytes`, or why it is refused.
    static func parse(_ bytes: [UInt8]) -> Reading {
        guard bytes.count <= maximumBytes else { return .malformed("the input is over 64 KiB") }
        guard String(validating: bytes, as: UTF8.self) != nil, !bytes.contains(0) else {
            return .malformed("the input is not UTF-8 text")
        }
        // By bytes: String's Character-wise split and its generic `contains` look up protocol conformances at run
        // time, a tenth of this process's start (page faults over the conformance tables).
        var attributes = Attributes()
        for (number, line) in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated()
        {
            let line = line.last == UInt8(ascii: "\r") ? line.dropLast() : line
            if line.isEmpty { break }
            guard let equals = line.firstIndex(of: UInt8(ascii: "=")), equals != line.startIndex else {
                return .malformed("line \(number + 1) is not key=value")
            }
            // A repeated key keeps the last value, as git itself reads them.
            let value = String(decoding: line[(equals + 1)...], as: UTF8.self)
            switch String(decoding: line[..<equals], as: UTF8.self) {
            case "protocol": attributes.scheme = value
            case "host": attributes.host = value
            case "username": attributes.username = value
            case "password": attributes.password = value
            default: continue
            }
        }
        return .read(attributes)
    }
}

/// Running another program (git) without Foundation's Process.
enum Process {
    /// This executable's absolute path.
    static var executablePath: String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return "tokenbroker" }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Runs `arguments` (found on PATH) and returns its exit status; -1 when it could not start.
    ///
    /// `quiet` sends its stdout to /dev/null.
    static func run(_ arguments: [String], quiet: Bool) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if quiet { posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0) }
        var pid: pid_t = 0
        var argv = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        guard posix_spawnp(&pid, arguments[0], &actions, nil, &argv, environ) == 0 else { return -1 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1
    }
}
