import BrokerClient
import BrokerProtocol
import Glibc

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// `tokenbroker token` and `kube-credential` before the command tree: a process per use (scripts,
/// `$(tokenbroker token …)`, kubectl) spends most of its time starting, so their plain forms are answered without
/// ArgumentParser, Swift concurrency or Codable (each of which costs start-up time: reflecting the command tree,
/// starting threads, scanning protocol conformances).
///
/// Only a token is answered here. Any other argument, form or answer (`--help`, `--json`, `--scope=x`, an error from
/// the broker, no broker at all) returns nil before anything was printed, and the full CLI runs as if this were not
/// here: its parsing, its messages and its exit statuses stay the only ones. `TOKENBROKER_CLI_FAST_PATH=0` turns it
/// off (a test compares the two).
enum FastPath {
    /// The exit status when the fast path answered; nil for the full CLI.
    static func run(_ arguments: [String]) -> Int32? {
        if let setting = getenv("TOKENBROKER_CLI_FAST_PATH"), String(cString: setting) == "0" { return nil }
        guard arguments.count > 1 else { return nil }
        switch arguments[1] {
        case "token":
            guard let options = TokenOptions(arguments.dropFirst(2), command: .token),
                let token = silentToken(options.request, socket: options.socket)
            else { return nil }
            Output.line(token.accessToken)
        case "kube-credential":
            guard let options = TokenOptions(arguments.dropFirst(2), command: .kubeCredential),
                case .success(let apiVersion) = KubeCredential.requestedAPIVersion(),
                let token = silentToken(options.request, socket: options.socket)
            else { return nil }
            Output.write(
                1,
                KubeCredential.execCredential(
                    apiVersion: apiVersion,
                    token: token.accessToken,
                    expiresAt: token.expiresOn / 1000
                )
            )
        default:
            return nil
        }
        return 0
    }

    /// The token, or nil when anything but a token came of asking (the full CLI asks again and reports it).
    private static func silentToken(_ request: TokenRequest, socket: String?) -> SilentCall.Token? {
        // getenv, not ProcessInfo: it would copy the whole environment into a dictionary first.
        let path = socket ?? SocketLocation.resolve(variable: { getenv($0).map { String(cString: $0) } })
        guard let connection = try? BlockingConnection.connect(to: path) else { return nil }
        kept = connection
        return try? connection.silentToken(request)
    }

    /// The connection, left for the process's exit to close: tearing it down instantiates the generic types of its
    /// listener table, which costs more than the rest of the run.
    nonisolated(unsafe) private static var kept: BlockingConnection?

    /// The commands answered here.
    private enum Command {
        case token, kubeCredential
    }

    /// A command's options, in the plain form only: `--name value` and flags, each once (`--scope` repeated).
    private struct TokenOptions {
        var socket: String?
        var request: TokenRequest

        init?(_ arguments: ArraySlice<String>, command: Command) {
            // Plain variables, not a dictionary of options: a new generic type costs a conformance scan at start.
            var socket: String?
            var clientId: String?
            var resource: String?
            var authority: String?
            var account: String?
            var minimumValidity: String?
            var tokenType: String?
            var scopes: [String] = []
            var forceRefresh = false
            var remaining = arguments[...]
            func take(_ value: inout String?) -> Bool {
                guard value == nil, let next = remaining.popFirst() else { return false }
                value = next
                return true
            }
            while let argument = remaining.popFirst() {
                let taken: Bool
                switch argument {
                case "--force-refresh" where command == .token:
                    taken = !forceRefresh
                    forceRefresh = true
                case "--scope":
                    var value: String?
                    taken = take(&value)
                    scopes += value.map { $0.split(separator: " ").map(String.init) } ?? []
                case "--socket": taken = take(&socket)
                case "--client-id": taken = take(&clientId)
                case "--resource": taken = take(&resource)
                case "--authority": taken = take(&authority)
                case "--account": taken = take(&account)
                case "--min-validity" where command == .token: taken = take(&minimumValidity)
                case "--token-type" where command == .kubeCredential: taken = take(&tokenType)
                default: taken = false
                }
                guard taken else { return nil }
            }
            // kubectl's id tokens come from the full CLI (it reads their expiry from the token itself).
            guard let clientId, !scopes.isEmpty || resource != nil, tokenType == nil || tokenType == "access" else {
                return nil
            }
            var validity: Duration?
            if let minimumValidity {
                guard let seconds = Int(minimumValidity), seconds >= 0 else { return nil }
                validity = .seconds(seconds)
            }
            self.socket = socket
            request = TokenRequest(
                clientId: clientId,
                scopes: scopes,
                resource: resource,
                authority: authority,
                account: account.map(AccountSelector.init(identifierOrUsername:)),
                minimumValidity: validity,
                forceRefresh: forceRefresh
            )
        }
    }
}
