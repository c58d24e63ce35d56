import BrokerCache
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

@testable import BrokerCore

struct InterchangeTests {
    /// What one import brings in, an export gives back, and the token is served from it.
    @Test func importsAndExportsThroughTheBroker() async throws {
        let fixture = try await BrokerFixture(documents: [])
        let document = CacheFixtures.msalCache(people: [CacheFixtures.ada, CacheFixtures.alan])
        let report = try await fixture.broker.importCache(
            ImportCacheParams(format: .msal, data: Secret(CacheFixtures.text(document))),
            caller: fixture.caller
        )
        #expect(
            report.imported == EntryCounts(accounts: 2, accessTokens: 2, refreshTokens: 2, idTokens: 2, appMetadata: 1)
        )
        #expect(report.skipped.isEmpty)
        _ = try await fixture.silent()
        let export = try await fixture.broker.exportCache(ExportCacheParams(format: .msal), caller: fixture.caller)
        #expect(try JSONValue.parse(Array(export.data.reveal().utf8)) == document)
        #expect(export.counts.total == 9)
        let narrow = try await fixture.broker.exportCache(
            ExportCacheParams(clientId: "someone-else"),
            caller: fixture.caller
        )
        #expect(narrow.counts.total == 0)
    }

    /// A document that is not a cache is refused whole and changes nothing.
    @Test func refusesInvalidDocumentsWithoutChangingAnything() async throws {
        let fixture = try await BrokerFixture()
        await expectFailure(.invalidCache) {
            _ = try await fixture.broker.importCache(
                ImportCacheParams(data: Secret("{\"AccessToken\": [")),
                caller: fixture.caller
            )
        }
        #expect(fixture.broker.cacheCounts.total == 5)
    }
}

struct AuditTests {
    /// Every token handed out is audited with caller, client, scopes, account and source; never the token.
    @Test func auditsIssuanceWithoutTheToken() async throws {
        let fixture = try await BrokerFixture(auditWindow: .zero)
        let first = try await fixture.silent()
        _ = try await fixture.silent()
        await fixture.broker.audit.written()
        let lines = fixture.logs.lines(containing: "token issued")
        #expect(lines.count == 2)
        let line = try #require(lines.first)
        for fragment in [
            "caller_pid=4242", "caller_exe=/usr/bin/test-app", "client_id=\(CacheFixtures.clientId)",
            "account=ada@contoso.com", "source=cache", "https://graph.microsoft.com/User.Read",
        ] {
            #expect(line.contains(fragment), "missing \(fragment)")
        }
        #expect(!fixture.logs.text.contains(first.accessToken.reveal()))
        #expect(!fixture.logs.text.contains("AT-SECRET"))
        #expect(!fixture.logs.text.contains("RT-SECRET"))
    }

    /// Repeats within the audit window become one summary line with a count.
    @Test func coalescesRepeatsWithinTheWindow() async throws {
        let fixture = try await BrokerFixture()
        for _ in 0..<5 { _ = try await fixture.silent() }
        await fixture.broker.audit.written()
        #expect(fixture.logs.lines(containing: "token issued").count == 1)
        fixture.broker.audit.flush()
        await fixture.broker.audit.written()
        let summaries = fixture.logs.lines(containing: "token issued again")
        #expect(summaries.count == 1)
        #expect(summaries.first?.contains("repeats=4") == true)
    }

    /// Callers that differ only in what the audit does not hash (the executable, the door) or only in a grant are
    /// still told apart: each one's first issuance is written, and a repeat counts for its own caller.
    @Test func tellsApartCallersWithTheSameProcessNumbers() async throws {
        let fixture = try await BrokerFixture()
        var other = fixture.caller
        other.executable = "/usr/bin/other-app"
        var granted = fixture.caller
        granted.grant = "build-agent"
        var bus = fixture.caller
        bus.via = .bus
        for caller in [fixture.caller, other, granted, bus, other] { _ = try await fixture.silent(caller: caller) }
        await fixture.broker.audit.written()
        let firsts = fixture.logs.lines(containing: "token issued").filter { !$0.contains("again") }
        #expect(firsts.count == 4)
        #expect(firsts.contains { $0.contains("caller_via=bus") })
        #expect(firsts.contains { $0.contains("caller_exe=/usr/bin/other-app") })
        #expect(firsts.contains { $0.contains("caller_grant=build-agent") })
        fixture.broker.audit.flush()
        await fixture.broker.audit.written()
        let summaries = fixture.logs.lines(containing: "token issued again")
        #expect(summaries.count == 1)
        #expect(summaries.first?.contains("caller_exe=/usr/bin/other-app") == true)
        #expect(summaries.first?.contains("repeats=1") == true)
    }

    /// The endpoint's callers have no process numbers: their grant and address tell them apart, in the count of
    /// repeats and in its hash (unhashed, a hundred containers' callers made one chain searched end to end).
    @Test func tellsApartEndpointCallersByGrantAndAddress() async throws {
        let fixture = try await BrokerFixture()
        let callers = (0..<100).map { index in
            Caller(
                pid: 0,
                uid: .max,
                gid: .max,
                executable: nil,
                via: .endpoint,
                grant: index.isMultiple(of: 2) ? "build-agent" : "devcontainer",
                address: "10.0.0.\(index / 2)"
            )
        }
        for caller in callers + callers.prefix(10) { _ = try await fixture.silent(caller: caller) }
        await fixture.broker.audit.written()
        let firsts = fixture.logs.lines(containing: "token issued").filter { !$0.contains("again") }
        #expect(firsts.count == 100)
        #expect(firsts.contains { $0.contains("caller_grant=devcontainer") && $0.contains("caller_address=10.0.0.49") })
        fixture.broker.audit.flush()
        await fixture.broker.audit.written()
        #expect(fixture.logs.lines(containing: "token issued again").count == 10)

        let issue = AuditLog.TokenIssue(
            clientId: CacheFixtures.clientId,
            scopes: ["https://graph.microsoft.com/User.Read"],
            account: Account(
                identifier: "uid.utid",
                username: "ada@contoso.com",
                environment: "login.microsoftonline.com",
                realm: "utid",
                localAccountId: "uid"
            ),
            source: .cache
        )
        let hashes = Set(callers.map { AuditLog.Issuance(caller: $0, issue: issue).hashValue })
        #expect(hashes.count == callers.count)
    }

    /// When the window ends on the clock, the next issuance writes the window's summary and is written itself.
    @Test func aNewWindowStartsWhenTheClockSaysSo() async throws {
        let fixture = try await BrokerFixture(auditWindow: .seconds(60))
        for _ in 0..<3 { _ = try await fixture.silent() }
        fixture.clock.advance(by: .seconds(59))
        _ = try await fixture.silent()
        await fixture.broker.audit.written()
        #expect(fixture.logs.lines(containing: "token issued").count == 1)
        fixture.clock.advance(by: .seconds(1))
        _ = try await fixture.silent()
        await fixture.broker.audit.written()
        #expect(fixture.logs.lines(containing: "token issued again").first?.contains("repeats=3") == true)
        #expect(fixture.logs.lines(containing: "token issued").filter { !$0.contains("again") }.count == 2)
    }
}
