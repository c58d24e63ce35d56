import BrokerClient
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

/// The client library against the real daemon, run as a subprocess.
@Suite(.timeLimit(.minutes(2)))
struct BrokerClientTests {
    static let modes: [Broker.ConnectionMode] = [.concurrent, .blocking]

    private func withDaemon(
        mode: Broker.ConnectionMode = .concurrent,
        _ body: (Broker, DaemonProcess) async throws -> Void
    ) async throws {
        let directory = try TemporaryDirectory(prefix: "cli")
        let daemon = try await DaemonProcess.start(in: directory)
        let broker = try await Broker.connect(socketPath: daemon.socketPath, mode: mode)
        _ = try await broker.importCache(
            Secret(CacheFixtures.text(CacheFixtures.msalCache(people: [CacheFixtures.ada, CacheFixtures.alan])))
        )
        try await body(broker, daemon)
        await broker.close()
        #expect(try await daemon.stop() == 0)
    }

    private func request(
        account: String = "ada@contoso.com",
        scopes: [String] = ["https://graph.microsoft.com/User.Read"]
    ) -> TokenRequest {
        TokenRequest(
            clientId: CacheFixtures.clientId,
            scopes: scopes,
            authority: CacheFixtures.authority,
            account: AccountSelector(username: account)
        )
    }

    /// The MSAL-shaped API finds accounts and tokens, over either connection mode.
    @Test(arguments: modes)
    func findsAccountsAndTokens(mode: Broker.ConnectionMode) async throws {
        try await withDaemon(mode: mode) { broker, _ in
            #expect(try await broker.accounts().map(\.username) == ["ada@contoso.com", "alan@contoso.com"])
            let ada = try await broker.account(forUsername: "ada@contoso.com")
            #expect(try await broker.account(forIdentifier: ada.identifier).username == "ada@contoso.com")
            let token = try await broker.acquireTokenSilent(
                TokenRequest(
                    clientId: CacheFixtures.clientId,
                    scopes: ["https://graph.microsoft.com/User.Read"],
                    authority: CacheFixtures.authority,
                    account: AccountSelector(identifier: ada.identifier)
                )
            )
            #expect(token.tokenSource == .cache)
            #expect(token.account.identifier == ada.identifier)
            #expect(try await broker.version().protocolVersion == WireProtocol.version)
        }
    }

    /// Fifty concurrent calls share one connection and each gets its own answer (queued, in blocking mode).
    @Test(arguments: modes)
    func multiplexesConcurrentCalls(mode: Broker.ConnectionMode) async throws {
        try await withDaemon(mode: mode) { broker, _ in
            try await withThrowingTaskGroup { group in
                for index in 0..<50 {
                    group.addTask {
                        let account = index.isMultiple(of: 2) ? "ada@contoso.com" : "alan@contoso.com"
                        let token = try await broker.acquireTokenSilent(request(account: account))
                        #expect(token.account.username == account)
                    }
                }
                try await group.waitForAll()
            }
        }
    }

    /// Each failure arrives as the one public error type with the code that says what to do.
    @Test(arguments: modes)
    func mapsFailuresToActionableCodes(mode: Broker.ConnectionMode) async throws {
        try await withDaemon(mode: mode) { broker, _ in
            // An app with no refresh token of its own and no family: only a sign-in helps.
            var otherApp = request()
            otherApp.clientId = "11111111-2222-3333-4444-555555555555"
            await expectCode(.interactionRequired) { _ = try await broker.acquireTokenSilent(otherApp) }
            await expectCode(.noAccount) { _ = try await broker.account(forUsername: "nobody@contoso.com") }
            await expectCode(.invalidRequest) { _ = try await broker.acquireTokenSilent(request(scopes: ["openid"])) }
            await expectCode(.invalidCache) { _ = try await broker.importCache(Secret("not json")) }
            do {
                _ = try await broker.account(forUsername: "nobody@contoso.com")
            } catch let error as BrokerError {
                #expect(error.details?.correlationId != nil)
                #expect(!error.description.contains("AT-SECRET"))
            }
        }
    }

    /// Without a daemon the error says so and how to start one.
    @Test(arguments: modes)
    func explainsAMissingDaemon(mode: Broker.ConnectionMode) async throws {
        let directory = try TemporaryDirectory()
        do {
            _ = try await Broker.connect(socketPath: directory.path("none.sock"), mode: mode)
            Issue.record("connected to nothing")
        } catch {
            #expect(error.code == .brokerUnavailable)
            #expect(error.message.contains("systemctl --user start tokenbrokerd.socket"))
        }
    }

    /// A cancelled call does not take the connection, or other calls, down with it.
    @Test func survivesACancelledCall() async throws {
        try await withDaemon { broker, _ in
            let big = CacheFixtures.text(CacheFixtures.msalCache(people: (0..<300).map(Self.person)))
            let cancelled = Task { try await broker.importCache(Secret(big)) }
            cancelled.cancel()
            _ = try? await cancelled.value
            for _ in 0..<5 { _ = try await broker.status() }
            #expect(try await broker.acquireTokenSilent(request()).tokenSource == .cache)
        }
    }

    /// A cache larger than one request may be is imported in parts, and all of it arrives.
    @Test func importsDocumentsLargerThanOneRequest() async throws {
        try await withDaemon(mode: .blocking) { broker, _ in
            let people = (0..<600).map(Self.person)
            let document = CacheFixtures.text(CacheFixtures.msalCache(people: people, label: "big"))
            #expect(document.utf8.count > WireProtocol.maximumFrameBytes)
            let report = try await broker.importCache(Secret(document))
            #expect(report.imported.accounts == 600)
            #expect(report.imported.accessTokens == 600)
            #expect(report.skipped.isEmpty)
            let export = try await broker.exportCache()
            #expect(export.counts.accounts == 602)
            #expect(export.data.reveal().utf8.count > WireProtocol.maximumFrameBytes)
        }
    }

    /// An ADAL list larger than one request goes in parts too, and skipped entries keep their place in the whole
    /// list, not in their part.
    @Test func importsLargeADALListsAndReportsPositionsInTheWholeList() async throws {
        try await withDaemon(mode: .blocking) { broker, _ in
            let localTime = DateFormatter()
            localTime.locale = Locale(identifier: "en_US_POSIX")
            localTime.dateFormat = "yyyy-MM-dd HH:mm:ss.SSSSSS"  // ADAL Python's str(datetime), local time
            let expiresOn = localTime.string(from: Date().addingTimeInterval(3600))
            var entries: [JSONValue] = (0..<2500).map { index in
                let person = Self.person(index)
                return .object([
                    "_authority": .string(CacheFixtures.authority), "_clientId": .string(CacheFixtures.clientId),
                    "userId": .string(person.username), "oid": .string(person.oid),
                    "tenantId": .string(CacheFixtures.tenant), "resource": .string("https://graph.microsoft.com"),
                    "accessToken": .string(CacheFixtures.accessTokenSecret("adal-\(index)")),
                    "refreshToken": .string("RT-ADAL-\(index)"), "expiresOn": .string(expiresOn),
                    "expiresIn": .integer(3600), "isMRRT": .bool(true), "tokenType": .string("Bearer"),
                ])
            }
            entries[3] = .string("not an entry")
            entries[2400] = .array([])
            let document = CacheFixtures.text(.array(entries))
            #expect(document.utf8.count > WireProtocol.maximumFrameBytes)
            let report = try await broker.importCache(Secret(document), format: .adal)
            #expect(report.skipped.map(\.entry) == ["[3]", "[2400]"])
            #expect(report.imported.accessTokens == 2498)
            #expect(report.imported.refreshTokens == 2498)
            #expect(try await broker.accounts().count == 2498 + 2)
        }
    }

    /// A daemon that dies fails the waiting and later calls with connection_lost, not a hang.
    @Test(arguments: modes)
    func reportsALostConnection(mode: Broker.ConnectionMode) async throws {
        let directory = try TemporaryDirectory(prefix: "cli")
        let daemon = try await DaemonProcess.start(in: directory)
        let broker = try await Broker.connect(socketPath: daemon.socketPath, mode: mode)
        _ = try await broker.status()
        try await daemon.stop(signal: SIGKILL)
        await expectCode(.connectionLost) { _ = try await broker.status() }
    }

    static func person(_ index: Int) -> CacheFixtures.Person {
        CacheFixtures.Person(
            oid: String(format: "00000000-0000-4000-8000-%012d", index),
            username: "user\(index)@contoso.com",
            name: "User \(index)"
        )
    }
}

func expectCode(
    _ code: BrokerError.Code,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("expected \(code), but it succeeded", sourceLocation: sourceLocation)
    } catch let error as BrokerError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
    }
}
