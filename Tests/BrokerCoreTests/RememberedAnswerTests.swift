import BrokerCache
import BrokerCore
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

/// The encoded answers the socket's fast path splices: the same bytes as the general path, and never one that no
/// longer holds.
struct RememberedAnswerTests {
    private func params(
        scopes: [String] = ["https://graph.microsoft.com/User.Read"],
        correlationId: String? = "corr-2",
        minimumValiditySeconds: Int? = nil
    ) -> AcquireTokenSilentlyParams {
        AcquireTokenSilentlyParams(
            authParameters: AuthParameters(
                clientId: CacheFixtures.clientId,
                authority: CacheFixtures.authority,
                requestedScopes: scopes,
                account: AccountSelector(username: "ada@contoso.com"),
                minimumValiditySeconds: minimumValiditySeconds
            ),
            correlationId: correlationId
        )
    }

    /// The bytes the general path writes for `params`: the broker's answer, through the wire encoder.
    private func generalAnswer(
        _ fixture: BrokerFixture,
        _ params: AcquireTokenSilentlyParams,
        id: RequestID
    ) async throws -> [UInt8] {
        let result = try await fixture.broker.acquireTokenSilently(params, caller: fixture.caller)
        return try WireEncoder().encode(Response(id: id, result: result)) + Array("\n".utf8)
    }

    /// Nothing is remembered before a request was answered; after it, the same request gets the general path's
    /// bytes with its own id and correlation id, and its audit line is counted like any other.
    @Test func answersTheSameBytesAsTheGeneralPath() async throws {
        let fixture = try await BrokerFixture()
        #expect(fixture.broker.rememberedAnswer(params(), id: .number(1), caller: fixture.caller) == nil)
        _ = try await generalAnswer(fixture, params(), id: .number(1))
        for (id, correlationId) in [(RequestID.number(7), "corr-7"), (.string("x\"y"), "é\n")] {
            let asked = params(correlationId: correlationId)
            let remembered = try #require(fixture.broker.rememberedAnswer(asked, id: id, caller: fixture.caller))
            #expect(remembered.bytes == (try await generalAnswer(fixture, asked, id: id)))
        }
        // Without a correlation id the broker makes one, as the general path does.
        let made = try #require(
            fixture.broker.rememberedAnswer(params(correlationId: nil), id: .number(3), caller: fixture.caller)
        )
        let answer = try #require(try JSONSerialization.jsonObject(with: Data(made.bytes)) as? [String: Any])
        let result = try #require(answer["result"] as? [String: Any])
        let token = try #require(result["brokerTokenResponse"] as? [String: Any])
        #expect(UUID(uuidString: try #require(token["correlationId"] as? String)) != nil)
        // A different request (another scope) has nothing remembered.
        #expect(
            fixture.broker.rememberedAnswer(
                params(scopes: ["https://graph.microsoft.com/Mail.Read"]),
                id: .number(1),
                caller: fixture.caller
            ) == nil
        )
        await fixture.broker.audit.written()
        fixture.broker.audit.flush()
        await fixture.broker.audit.written()
        // The first issuance is written at once; the five repeats (three remembered) in one summary line.
        #expect(fixture.logs.lines(containing: "token issued").count == 2)
        #expect(fixture.logs.lines(containing: "repeats=5").count == 1)
    }

    /// A change to the cache, the token nearing its expiry, and a clock that went back each end what was remembered.
    @Test func forgetsWhatNoLongerHolds() async throws {
        let fixture = try await BrokerFixture()
        _ = try await generalAnswer(fixture, params(), id: .number(1))
        #expect(fixture.broker.rememberedAnswer(params(), id: .number(1), caller: fixture.caller) != nil)

        // A write to the cache (here: another app's token) changes its generation.
        let other = try MSALCacheDocument.read(
            Data(CacheFixtures.text(CacheFixtures.msalCache(clientId: "another-app")).utf8)
        ).entries
        try await #require(fixture.broker.vault.cache).commit(CacheChanges(upserts: other))
        #expect(fixture.broker.rememberedAnswer(params(), id: .number(1), caller: fixture.caller) == nil)
        _ = try await generalAnswer(fixture, params(), id: .number(1))
        #expect(fixture.broker.rememberedAnswer(params(), id: .number(1), caller: fixture.caller) != nil)

        // The clock going back by a second: worked out again.
        fixture.clock.advance(by: .seconds(-1))
        #expect(fixture.broker.rememberedAnswer(params(), id: .number(1), caller: fixture.caller) == nil)
        fixture.clock.advance(by: .seconds(1))

        // 3600 s of life, 300 of them the buffer: still remembered at 3290 s, not from 3300 s on, where the
        // general path refuses it too.
        fixture.clock.advance(by: .seconds(3290))
        #expect(fixture.broker.rememberedAnswer(params(), id: .number(1), caller: fixture.caller) != nil)
        fixture.clock.advance(by: .seconds(10))
        #expect(fixture.broker.rememberedAnswer(params(), id: .number(1), caller: fixture.caller) == nil)
        await expectFailure(.interactionRequired) {
            _ = try await fixture.broker.acquireTokenSilently(params(), caller: fixture.caller)
        }
    }

    /// An answer its caller held on to is given again only while the table would give it: a change to the cache and
    /// the end of its seconds let it go, as they end the table's.
    @Test func aHeldAnswerHoldsOnlyWhileTheTableWould() async throws {
        let fixture = try await BrokerFixture()
        let key = HashedAuthParameters(params().authParameters)
        var held: HeldAnswer?
        func ask() -> ResponseLine? {
            fixture.broker.rememberedAnswer(
                for: key,
                correlationId: "c",
                id: .number(1),
                caller: fixture.caller,
                held: &held
            )
        }
        #expect(ask() == nil)
        #expect(held == nil)
        _ = try await generalAnswer(fixture, params(), id: .number(1))
        let first = try #require(ask())
        #expect(held != nil)
        #expect(try #require(ask()).bytes == first.bytes)

        let other = try MSALCacheDocument.read(
            Data(CacheFixtures.text(CacheFixtures.msalCache(clientId: "another-app")).utf8)
        ).entries
        try await #require(fixture.broker.vault.cache).commit(CacheChanges(upserts: other))
        #expect(ask() == nil)
        #expect(held == nil)

        _ = try await generalAnswer(fixture, params(), id: .number(1))
        #expect(ask() != nil)
        fixture.clock.advance(by: .seconds(3300))
        #expect(ask() == nil)
        #expect(held == nil)
    }

    /// A caller's minimum validity is part of the request: the answer ends when the token no longer gives it.
    @Test func holdsOnlyWhileTheMinimumValidityIsMet() async throws {
        let fixture = try await BrokerFixture()
        let asked = params(minimumValiditySeconds: 1800)
        _ = try await generalAnswer(fixture, asked, id: .number(1))
        fixture.clock.advance(by: .seconds(1790))
        #expect(fixture.broker.rememberedAnswer(asked, id: .number(1), caller: fixture.caller) != nil)
        fixture.clock.advance(by: .seconds(10))
        #expect(fixture.broker.rememberedAnswer(asked, id: .number(1), caller: fixture.caller) == nil)
        #expect(fixture.broker.rememberedAnswer(params(), id: .number(1), caller: fixture.caller) == nil)
    }
}

extension TokenBroker {
    /// The remembered answer for `params`, asked for with a key of its own and nothing held, as a first request is.
    fileprivate func rememberedAnswer(
        _ params: AcquireTokenSilentlyParams,
        id: RequestID,
        caller: Caller
    ) -> ResponseLine? {
        var held: HeldAnswer?
        return rememberedAnswer(
            for: HashedAuthParameters(params.authParameters),
            correlationId: params.correlationId,
            id: id,
            caller: caller,
            held: &held
        )
    }
}
