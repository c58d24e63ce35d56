import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

/// The built `tokenbroker` CLI against the built `tokenbrokerd`, both as subprocesses.
@Suite(.timeLimit(.minutes(2)))
struct CLITests {
    private let directory: TemporaryDirectory

    init() throws {
        directory = try TemporaryDirectory(prefix: "int")
    }

    private func cli(_ daemon: DaemonProcess, _ arguments: [String], stdin: Data? = nil) async throws -> CommandResult {
        try await runCommand(
            try Binaries.url("tokenbroker"),
            arguments,
            environment: daemon.clientEnvironment,
            stdin: stdin
        )
    }

    private let seed = CacheFixtures.msalCache(people: [CacheFixtures.ada, CacheFixtures.alan])

    private func seeded() async throws -> DaemonProcess {
        let daemon = try await DaemonProcess.start(in: directory)
        let file = directory.path("seed.json")
        try CacheFixtures.text(seed).write(toFile: file, atomically: false, encoding: .utf8)
        let imported = try await cli(daemon, ["import", file])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(
            imported.stdout.contains(
                "imported 2 accounts, 2 access tokens, 2 refresh tokens, 2 id tokens, 1 app metadata"
            )
        )
        return daemon
    }

    private let tokenArguments = [
        "token", "--client-id", CacheFixtures.clientId, "--authority", CacheFixtures.authority,
        "--scope", "https://graph.microsoft.com/User.Read",
    ]

    /// `token` prints the token alone on stdout, or the whole result with --json.
    @Test func printsTheTokenAlone() async throws {
        let daemon = try await seeded()
        let plain = try await cli(daemon, tokenArguments + ["--account", "ada@contoso.com"])
        #expect(plain.status == 0, "\(plain.stderr)")
        let token = plain.stdout.trimmingCharacters(in: .newlines)
        #expect(!token.contains("\n") && token.hasPrefix("eyJ"))
        #expect(plain.stderr.isEmpty)
        let json = try await cli(daemon, tokenArguments + ["--account", CacheFixtures.alan.homeAccountId, "--json"])
        let result = try JSONValue.parse(Array(json.stdout.utf8)).objectValue
        #expect(result?["account"]?.objectValue?["username"] == .string("alan@contoso.com"))
        #expect(result?["tokenSource"] == .string("cache"))
        let spaced = try await cli(
            daemon,
            [
                "token", "--client-id", CacheFixtures.clientId, "--authority", CacheFixtures.authority, "--scope",
                "https://graph.microsoft.com/User.Read https://graph.microsoft.com/Mail.Read", "--account",
                "ada@contoso.com",
            ]
        )
        #expect(spaced.status == 0)
        #expect(try await daemon.stop() == 0)
    }

    /// Each failure has its own exit status and a message on stderr that says what to do.
    @Test func usesDistinctExitStatuses() async throws {
        let daemon = try await seeded()
        let several = try await cli(daemon, tokenArguments)
        #expect(several.status == 64)
        #expect(several.stderr.contains("name one"))
        // An app with no refresh token of its own and no family: only a sign-in helps.
        let otherApp = "11111111-2222-3333-4444-555555555555"
        let signIn = try await cli(
            daemon,
            [
                "token", "--client-id", otherApp, "--authority", CacheFixtures.authority, "--scope", "Files.Read",
                "--account", "ada@contoso.com",
            ]
        )
        #expect(signIn.status == 2)
        #expect(signIn.stderr.contains("tokenbroker login --client-id \(otherApp)"))
        #expect(signIn.stdout.isEmpty)
        let nobody = try await cli(daemon, ["account", "nobody@contoso.com"])
        #expect(nobody.status == 3)
        let usage = try await cli(daemon, ["token", "--client-id", "x"])
        #expect(usage.status == 64)
        let missingFile = try await cli(daemon, ["import", directory.path("nope.json")])
        #expect(missingFile.status == 66)
        let badFile = directory.path("bad.json")
        try "{\"AccessToken\": [".write(toFile: badFile, atomically: false, encoding: .utf8)
        let invalid = try await cli(daemon, ["import", badFile])
        #expect(invalid.status == 65)
        #expect(invalid.stderr.contains("not valid JSON"))
        #expect(try await daemon.stop() == 0)
        let down = try await cli(daemon, ["status"])
        #expect(down.status == 69)
        #expect(down.stderr.contains("is not running"))
        #expect(down.stderr.contains("systemctl --user start tokenbrokerd.socket"))
    }

    /// Listing, showing, exporting and removing accounts; --json on every listing.
    @Test func managesAccountsAndTheCache() async throws {
        let daemon = try await seeded()
        let table = try await cli(daemon, ["accounts"])
        #expect(
            table.stdout.contains("USERNAME") && table.stdout.contains("ada@contoso.com")
                && table.stdout.contains("alan@contoso.com")
        )
        let listed = try JSONValue.parse(Array(try await cli(daemon, ["accounts", "--json"]).stdout.utf8))
        guard case .array(let accounts) = listed else { throw TestSetupError("accounts --json is not an array") }
        #expect(accounts.count == 2)
        let shown = try await cli(daemon, ["account", CacheFixtures.ada.homeAccountId, "--json"])
        #expect(try JSONValue.parse(Array(shown.stdout.utf8)).objectValue?["username"] == .string("ada@contoso.com"))
        let status = try await cli(daemon, ["status", "--json"])
        #expect(
            try JSONValue.parse(Array(status.stdout.utf8)).objectValue?["cache"]?.objectValue?["accounts"]
                == .integer(2)
        )
        #expect(try await cli(daemon, ["status"]).stdout.contains("2 accounts"))

        let exportFile = directory.path("export.json")
        #expect(try await cli(daemon, ["export", "--output", exportFile]).status == 0)
        let mode = try FileManager.default.attributesOfItem(atPath: exportFile)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let exported = try JSONValue.parse(Array(try Data(contentsOf: URL(filePath: exportFile))))
        let sameAsImported = exported == seed
        #expect(sameAsImported, "the export differs from the imported cache")
        #expect(try await cli(daemon, ["export", "--output", exportFile]).status == 73)

        let removed = try await cli(daemon, ["remove-account", "ada@contoso.com"])
        #expect(removed.stdout.contains("removed the account and 3 tokens"))
        #expect(try await cli(daemon, tokenArguments + ["--account", "ada@contoso.com"]).status == 3)
        #expect(try await cli(daemon, tokenArguments).status == 0)
        #expect(try await daemon.stop() == 0)
    }

    /// `--help` documents the exit statuses.
    @Test func documentsExitStatusesInHelp() async throws {
        let help = try await runCommand(try Binaries.url("tokenbroker"), ["--help"])
        for status in [
            "2   sign-in required", "3   no such account", "69  the broker is not running", "75  temporary failure",
        ] {
            #expect(help.stdout.contains(status), "missing \(status)")
        }
    }
}
