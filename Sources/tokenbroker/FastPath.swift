import ArgumentParser
import BrokerClient
import BrokerProtocol
import Glibc

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// `tokenbroker token`, `kube-credential` and `git-credential get` before the command tree: a process per use
/// (scripts, `$(tokenbroker token …)`, kubectl, git) spends most of its time starting, so their plain forms are
/// answered without ArgumentParser, Swift concurrency or Codable (each of which costs start-up time: reflecting the
/// command tree, starting threads, scanning protocol conformances).
///
/// Only a token is asked here. Any other argument or form (`--help`, `--json`, `--scope=x`, no broker at all)
/// returns nil before anything was printed, and the full CLI runs as if this were not here: its parsing stays the
/// only one (git's input, once read, is handed on). The broker's error is reported with the full CLI's own words
/// and exit status, not asked again.
/// The commands' decisions and output are the full CLI's own functions. `TOKENBROKER_CLI_FAST_PATH=0` turns it off
/// (a test compares the two).
enum FastPath {
    /// The exit status when the fast path answered; nil for the full CLI.
    static func run(_ arguments: [String]) -> Int32? {
        if let setting = getenv("TOKENBROKER_CLI_FAST_PATH"), String(cString: setting) == "0" { return nil }
        guard arguments.count > 1, let command = Command(rawValue: arguments[1]),
            let given = Options(arguments.dropFirst(2), command: command)
        else { return nil }
        switch command {
        case .token:
            guard let request = given.tokenRequest else { return nil }
            return answer(request, socket: given.socket) { Output.line($0.accessToken) }
        case .kubeCredential:
            // kubectl's id tokens come from the full CLI (it reads their expiry from the token itself).
            guard given.tokenType == nil || given.tokenType == "access", let request = given.tokenRequest,
                case .success(let apiVersion) = KubeCredential.requestedAPIVersion()
            else { return nil }
            return answer(request, socket: given.socket) { token in
                Output.write(
                    1,
                    KubeCredential.execCredential(
                        apiVersion: apiVersion,
                        token: token.accessToken,
                        expiresAt: token.expiresOn / 1000
                    )
                )
            }
        case .gitCredential:
            guard given.action == "get", case .read(let attributes) = CredentialInput.read(),
                let request = try? GitCredential.request(for: attributes, options: given.gitOptions)
            else { return nil }
            return answer(request, socket: given.socket) { token in
                Output.write(
                    1,
                    GitCredential.answer(
                        to: attributes,
                        accessToken: token.accessToken,
                        username: token.username,
                        expiresOn: token.expiresOn
                    )
                )
            }
        }
    }

    /// Asks for the token once and writes it with `write` (exit status 0), or reports the broker's error as the full
    /// CLI reports it (its exit status).
    ///
    /// Asking again would meet the broker's memory of a failed refresh, and say so. Nil when nothing was asked (no
    /// broker, a request the plain writer does not write): the full CLI asks and reports.
    private static func answer(
        _ request: TokenRequest,
        socket: String?,
        write: (SilentCall.Token) -> Void
    ) -> Int32? {
        // getenv, not ProcessInfo: it would copy the whole environment into a dictionary first.
        let path = socket ?? SocketLocation.resolve(variable: { getenv($0).map { String(cString: $0) } })
        guard let connection = try? BlockingConnection.connect(to: path) else { return nil }
        kept = connection
        do {
            guard let token = try connection.silentToken(request) else { return nil }
            write(token)
            return 0
        } catch {
            return Failure(refusing: request, error).report().rawValue
        }
    }

    /// The connection, left for the process's exit to close: tearing it down instantiates the generic types of its
    /// listener table, which costs more than the rest of the run.
    nonisolated(unsafe) private static var kept: BlockingConnection?

    /// The commands answered here.
    enum Command: String {
        case token
        case kubeCredential = "kube-credential"
        case gitCredential = "git-credential"
    }

    /// A command's options in the plain form only: `--name value` and flags, each once (`--scope` repeated).
    ///
    /// And git's action. Plain variables, not a dictionary: a new generic type costs a conformance scan at start.
    struct Options {
        var socket: String?
        var clientId: String?
        var scopes: [String] = []
        var resource: String?
        var authority: String?
        var account: String?
        var minimumValidity: Duration?
        var forceRefresh = false
        var tokenType: String?
        var action: String?

        init?(_ arguments: ArraySlice<String>, command: Command) {
            var remaining = arguments[...]
            func take(_ value: inout String?) -> Bool {
                guard value == nil, let next = remaining.popFirst() else { return false }
                value = next
                return true
            }
            var validity: String?
            while let argument = remaining.popFirst() {
                let taken: Bool
                switch argument {
                case "--socket": taken = take(&socket)
                case "--client-id": taken = take(&clientId)
                case "--resource": taken = take(&resource)
                case "--authority": taken = take(&authority)
                case "--account": taken = take(&account)
                case "--scope":
                    var value: String?
                    taken = take(&value)
                    // token and kube-credential split a space-separated list; git's helper takes each as it is.
                    if let value, command == .gitCredential {
                        scopes.append(value)
                    } else if let value {
                        guard let words = Self.words(value) else { return nil }
                        scopes += words
                    }
                case "--force-refresh" where command == .token:
                    taken = !forceRefresh
                    forceRefresh = true
                case "--min-validity" where command == .token: taken = take(&validity)
                case "--token-type" where command == .kubeCredential: taken = take(&tokenType)
                case _ where command == .gitCredential && !argument.hasPrefix("-"):
                    taken = action == nil
                    action = argument
                default: taken = false
                }
                guard taken else { return nil }
            }
            if let validity {
                guard let seconds = Int(validity), seconds >= 0 else { return nil }
                minimumValidity = .seconds(seconds)
            }
        }

        /// The words of `text` between spaces, empty ones left out, as the full CLI's `split(separator: " ")` gives
        /// them; nil for text that is not ASCII (a space there could begin a character), which the full CLI splits.
        ///
        /// Without an array of substrings in between: the first use of its type in a process cost more than the
        /// rest of the parsing (23,000 instructions, callgrind).
        static func words(_ text: String) -> [String]? {
            var text = text
            return text.withUTF8 { bytes -> [String]? in
                var words: [String] = []
                var start = 0
                for index in 0...bytes.count {
                    if index < bytes.count {
                        guard bytes[index] < 0x80 else { return nil }
                        guard bytes[index] == UInt8(ascii: " ") else { continue }
                    }
                    if index > start {
                        words.append(
                            String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                        )
                    }
                    start = index + 1
                }
                return words
            }
        }

        /// `token`'s and `kube-credential`'s request; nil when the full CLI has to say what is missing.
        var tokenRequest: TokenRequest? {
            guard let clientId, !scopes.isEmpty || resource != nil else { return nil }
            return TokenRequest(
                clientId: clientId,
                scopes: scopes,
                resource: resource,
                authority: authority,
                account: account.map(AccountSelector.init(identifierOrUsername:)),
                minimumValidity: minimumValidity,
                forceRefresh: forceRefresh
            )
        }

        var gitOptions: GitCredential.RequestOptions {
            GitCredential.RequestOptions(
                clientId: clientId,
                scopes: scopes,
                resource: resource,
                authority: authority,
                account: account
            )
        }
    }
}
