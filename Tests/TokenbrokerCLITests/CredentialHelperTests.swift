import ArgumentParser
import BrokerClient
import BrokerProtocol
import Foundation
import Testing

@testable import tokenbroker

/// git's credential protocol and kubectl's exec plugin, as the CLI reads and answers them (Tests/tools runs the
/// built CLI under the real git and the Python kubernetes client).
struct CredentialHelperTests {
    private func attributes(_ text: String) -> CredentialInput.Attributes? {
        guard case .read(let attributes) = CredentialInput.parse(Array(text.utf8)) else { return nil }
        return attributes
    }

    private func refusal(_ text: String) -> String? {
        guard case .malformed(let reason) = CredentialInput.parse(Array(text.utf8)) else { return nil }
        return reason
    }

    /// key=value lines up to a blank line, CRLF or LF, a repeated key's last value; other keys passed over.
    @Test func readsGitsAttributes() throws {
        let read = try #require(
            attributes("protocol=https\r\nhost=dev.azure.com\npath=org/repo\nusername=a\nusername=b\n\nhost=later\n")
        )
        #expect(read.scheme == "https" && read.host == "dev.azure.com" && read.username == "b")
        #expect(read.password == nil)
        #expect(try #require(attributes("")).host == nil)
    }

    @Test(arguments: [
        ("protocol=https\nno equals sign\n", "line 2 is not key=value"),
        ("=value\n", "line 1 is not key=value"),
        ("host=a\u{0}b\n", "the input is not UTF-8 text"),
        (String(repeating: "x", count: 65 * 1024), "the input is over 64 KiB"),
    ])
    func refusesWhatIsNotGitsInput(text: String, reason: String) {
        #expect(refusal(text) == reason)
    }

    /// Azure DevOps needs no options: the Azure CLI's client id, Azure DevOps' resource, the organizations
    /// authority; another host needs its client id and a resource or scope.
    @Test func azureDevOpsHasDefaults() throws {
        for host in ["dev.azure.com", "contoso.visualstudio.com", "DEV.AZURE.COM:443"] {
            let request = try GitCredential.request(
                for: try #require(attributes("protocol=https\nhost=\(host)\n")),
                options: GitCredential.RequestOptions()
            )
            #expect(request.clientId == GitCredential.azureCLIClientId)
            #expect(request.resource == "499b84ac-1321-427f-aa17-267ca6975798")
            #expect(request.authority == "https://login.microsoftonline.com/organizations")
        }
        #expect(throws: Failure.self) {
            try GitCredential.request(
                for: try #require(attributes("protocol=https\nhost=git.example.com\n")),
                options: GitCredential.RequestOptions()
            )
        }
        var options = GitCredential.RequestOptions(clientId: "app")
        options.scopes = ["api://git/.default"]
        options.account = "ada@contoso.com"
        let request = try GitCredential.request(
            for: try #require(attributes("protocol=https\nhost=git.example.com\n")),
            options: options
        )
        #expect(request.clientId == "app" && request.scopes == ["api://git/.default"] && request.resource == nil)
        #expect(request.account?.username == "ada@contoso.com")
    }

    /// Tokens go over https, or over http to a loopback address only; an input without protocol or host is a usage
    /// error (64).
    @Test func tokensGoOnlyOverHTTPSOrToLoopback() throws {
        let options = GitCredential.RequestOptions(clientId: "app", resource: "r")
        for allowed in [
            "protocol=https\nhost=git.example.com", "protocol=http\nhost=127.0.0.1:8080",
            "protocol=http\nhost=[::1]:8080", "protocol=http\nhost=localhost",
        ] {
            _ = try GitCredential.request(for: try #require(attributes(allowed)), options: options)
        }
        for refused in ["protocol=http\nhost=git.example.com", "protocol=http\nhost=127.evil.example"] {
            #expect(throws: Failure.self, "\(refused)") {
                try GitCredential.request(for: try #require(attributes(refused)), options: options)
            }
        }
        let noProtocol = try #require(attributes("host=git.example.com"))
        do throws(Failure) {
            _ = try GitCredential.request(for: noProtocol, options: options)
            Issue.record("an input without protocol was taken")
        } catch {
            #expect(error.exitCode == ExitCode(64))
        }
    }

    @Test func answersGitWithTheTokenAsThePassword() throws {
        let without = GitCredential.answer(
            to: try #require(attributes("protocol=https\nhost=h")),
            accessToken: "AT",
            username: "",
            expiresOn: 1_800_000_000_123
        )
        #expect(without == "username=tokenbroker\npassword=AT\npassword_expiry_utc=1800000000\n")
        let with = GitCredential.answer(
            to: try #require(attributes("protocol=https\nhost=h\nusername=ada")),
            accessToken: "AT",
            username: "ada@contoso.com",
            expiresOn: 1_800_000_000_000
        )
        #expect(with == "password=AT\npassword_expiry_utc=1800000000\n")
    }

    @Test func hostsAndURLs() {
        #expect(GitCredential.withoutPort("127.0.0.1:8080") == "127.0.0.1")
        #expect(GitCredential.withoutPort("[::1]:8080") == "[::1]")
        #expect(GitCredential.withoutPort("dev.azure.com") == "dev.azure.com")
        #expect(GitCredential.url("dev.azure.com") == ("https://dev.azure.com", "dev.azure.com"))
        #expect(
            GitCredential.url("https://git.example.com:8443/") == (
                "https://git.example.com:8443", "git.example.com:8443"
            )
        )
    }

    /// kubectl's ExecCredential: the apiVersion KUBERNETES_EXEC_INFO asks for (v1 without one), the token, an RFC
    /// 3339 UTC expiry; a bad KUBERNETES_EXEC_INFO is a usage error.
    @Test func writesTheExecCredentialKubectlAsksFor() throws {
        #expect(try KubeCredential.requestedAPIVersion(execInfo: nil).get() == "client.authentication.k8s.io/v1")
        let beta = #"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","spec":{}}"#
        #expect(try KubeCredential.requestedAPIVersion(execInfo: beta).get() == "client.authentication.k8s.io/v1beta1")
        for bad in ["not json", #"{"apiVersion":"client.authentication.k8s.io/v2"}"#] {
            guard case .failure(let failure) = KubeCredential.requestedAPIVersion(execInfo: bad) else {
                Issue.record("\(bad) was taken")
                continue
            }
            #expect(failure.exitCode == ExitCode(64))
        }
        let line = KubeCredential.execCredential(
            apiVersion: "client.authentication.k8s.io/v1",
            token: "tok\"en",
            expiresAt: 1_800_000_000
        )
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])
        #expect(object["apiVersion"] as? String == "client.authentication.k8s.io/v1")
        #expect(object["kind"] as? String == "ExecCredential")
        let status = try #require(object["status"] as? [String: String])
        #expect(status == ["token": "tok\"en", "expirationTimestamp": "2027-01-15T08:00:00Z"])
        #expect(line.last == UInt8(ascii: "\n"))
    }

    @Test func readsAJWTsExpiry() {
        let payload = Data(#"{"exp":1800000000,"sub":"x"}"#.utf8).base64EncodedString()
            .replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
        #expect(KubeCredential.expiry(ofJWT: "e30.\(payload).sig") == 1_800_000_000)
        #expect(KubeCredential.expiry(ofJWT: "not a jwt") == nil)
        #expect(KubeCredential.expiry(ofJWT: "e30.e30.sig") == nil)  // no exp
    }
}

/// The start-up path's reading of the command line: the plain form of `token`, `kube-credential` and
/// `git-credential` only; anything else goes to the full CLI (nil), which says what is wrong.
struct FastPathOptionsTests {
    private func options(_ line: String, _ command: FastPath.Command) -> FastPath.Options? {
        FastPath.Options(ArraySlice(line.split(separator: " ").map(String.init)), command: command)
    }

    @Test func readsThePlainForm() throws {
        let token = try #require(
            options("--client-id app --scope a --scope b --account ada --force-refresh --min-validity 600", .token)
        )
        let request = try #require(token.tokenRequest)
        #expect(request.clientId == "app" && request.scopes == ["a", "b"] && request.forceRefresh)
        #expect(request.minimumValidity == .seconds(600) && request.account?.username == "ada")
        let git = try #require(options("--client-id app --resource r get", .gitCredential))
        #expect(git.action == "get" && git.gitOptions.resource == "r" && git.gitOptions.clientId == "app")
        let kube = try #require(options("--client-id app --scope s --token-type id", .kubeCredential))
        #expect(kube.tokenType == "id" && kube.tokenRequest?.scopes == ["s"])
        #expect(try #require(options("--client-id app", .token)).tokenRequest == nil)  // nothing asked for
    }

    @Test(arguments: [
        ("--client-id a --client-id b --scope s", FastPath.Command.token),  // an option twice
        ("--client-id a --scope s --unknown", .token),
        ("--client-id a --scope s --min-validity -1", .token),
        ("--client-id a --scope s --min-validity soon", .token),
        ("--client-id a --scope s --force-refresh", .kubeCredential),  // not kube-credential's
        ("--client-id a --scope s --token-type id", .token),
        ("--client-id a --resource r get store", .gitCredential),  // two actions
        ("--client-id", .token),  // an option without its value
    ])
    func leavesEverythingElseToTheFullCLI(line: String, command: FastPath.Command) {
        #expect(options(line, command) == nil, "\(line)")
    }
}
