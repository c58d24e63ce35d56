import BrokerCache
import BrokerCore
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Logging
import Testing

@testable import BrokerDBus

/// The Broker1 translation over a real broker (in-memory store, the cache fixtures).
///
/// The shapes MSALRuntime requires, and a Broker1 error object for every bad input. The real clients run in
/// Tests/broker1.
@Suite struct Broker1TranslatorTests {
    let translator: Broker1Translator
    let caller = Caller(pid: 4242, uid: getuid(), gid: getgid(), executable: "/usr/bin/msal-app", via: .bus)

    init() async throws {
        let entries = try MSALCacheDocument.read(Data(CacheFixtures.text(CacheFixtures.msalCache()).utf8)).entries
        let broker = TokenBroker(
            cache: try await TokenCache(store: InMemoryTokenStore(entries)),
            configuration: BrokerConfiguration(),
            logger: Logger(label: "test"),
            audit: AuditLog(logger: Logger(label: "audit"), window: .zero, clock: TestClock(start: Date())),
            transport: ScriptedTransport.refusingProvider(),
            clock: TestClock(start: Date())
        )
        translator = Broker1Translator(
            handlers: broker.handlers(status: nil),
            owner: .none,
            releaseVersion: TokenBroker.version
        )
    }

    func answer(_ method: String, _ request: String, display: [String: String]? = nil) async throws -> [String: Any] {
        let text: String
        switch translator.answer(
            method: method,
            correlationId: "c",
            request: request,
            caller: caller,
            display: { display }
        ) {
        case .now(let json): text = json
        case .later(let work): text = await work()
        }
        return try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    func status(_ answer: [String: Any]) -> Int? {
        (answer["error"] as? [String: Any])?["status"] as? Int
    }

    static let scope = "https://graph.microsoft.com/User.Read"

    /// A cached token answers in MSALRuntime's shape: milliseconds, the requested scopes as one string, the
    /// 14-member account, client info and an id token, and no refresh token.
    @Test func silentAnswerHasTheShapeMSALRuntimeRequires() async throws {
        let request = """
            {"authParameters":{"clientId":"\(CacheFixtures.clientId)","authority":"\(CacheFixtures.authority)",
             "requestedScopes":["\(Self.scope)"],"username":"ada@contoso.com","decodedClaims":"","popParams":null,
             "isSignIn":false,"accessTokenToRenew":""}}
            """
        let answer = try await answer("acquireTokenSilently", request)
        let response = try #require(answer["brokerTokenResponse"] as? [String: Any])
        #expect(response["refreshToken"] == nil)
        #expect(response["grantedScopes"] as? String == Self.scope)
        #expect(response["accessTokenType"] as? Int == 0)
        let expiresOn = try #require(response["expiresOn"] as? Int64)
        #expect(expiresOn > Int64(Date().timeIntervalSince1970 * 1000), "expiresOn is not in milliseconds")
        #expect((response["clientInfo"] as? String)?.isEmpty == false)
        #expect((response["idToken"] as? String)?.split(separator: ".", omittingEmptySubsequences: false).count == 3)
        let account = try #require(response["account"] as? [String: Any])
        #expect(account.count == 14)
        #expect(account["username"] as? String == "ada@contoso.com")
        #expect(account["passwordExpiry"] as? Int == 0)
    }

    /// A client asking the same again gets the broker's answer again (the request read and the answer written as
    /// the call before's were); another account's request gets its own, and so does the first one's after it.
    @Test func askingAgainGetsTheBrokersAnswerAgain() async throws {
        let document = CacheFixtures.msalCache(people: [CacheFixtures.ada, CacheFixtures.alan])
        let broker = TokenBroker(
            cache: try await TokenCache(
                store: InMemoryTokenStore(try MSALCacheDocument.read(Data(CacheFixtures.text(document).utf8)).entries)
            ),
            configuration: BrokerConfiguration(),
            logger: Logger(label: "test"),
            audit: AuditLog(logger: Logger(label: "audit"), window: .zero, clock: TestClock(start: Date())),
            transport: ScriptedTransport.refusingProvider(),
            clock: TestClock(start: Date())
        )
        let translator = Broker1Translator(
            handlers: broker.handlers(status: nil),
            owner: .none,
            releaseVersion: TokenBroker.version
        )
        func ask(_ method: String, _ request: String) async -> String {
            let reply = translator.answer(
                method: method,
                correlationId: "",
                request: request,
                caller: caller,
                display: { nil }
            )
            switch reply {
            case .now(let json): return json
            case .later(let work): return await work()
            }
        }
        func silent(_ username: String) -> String {
            """
            {"authParameters":{"clientId":"\(CacheFixtures.clientId)","authority":"\(CacheFixtures.authority)",
             "requestedScopes":["\(Self.scope)"],"username":"\(username)"}}
            """
        }
        // Answers are compared by their account and a hash of their text: a failed expectation prints no token.
        struct Seen: Equatable {
            let username: String?
            let hash: Int
        }
        func seen(_ username: String) async -> Seen {
            let text = await ask("acquireTokenSilently", silent(username))
            let answer = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
            let response = answer?["brokerTokenResponse"] as? [String: Any]
            return Seen(
                username: (response?["account"] as? [String: Any])?["username"] as? String,
                hash: text.hashValue
            )
        }
        let ada = await seen("ada@contoso.com")
        #expect(ada.username == "ada@contoso.com")
        #expect(await seen("ada@contoso.com") == ada)
        let alan = await seen("alan@contoso.com")
        #expect(alan.username == "alan@contoso.com")
        #expect(await seen("alan@contoso.com") == alan)
        #expect(await seen("ada@contoso.com") == ada)
        // Ada's sign-in removed: the broker's answer says so, not the one written for her before.
        let removal = #"{"clientId":"\#(CacheFixtures.clientId)","account":{"username":"ada@contoso.com"}}"#
        _ = await ask("removeAccount", removal)
        let after = try #require(
            try JSONSerialization.jsonObject(
                with: Data(await ask("acquireTokenSilently", silent("ada@contoso.com")).utf8)
            )
                as? [String: Any]
        )
        #expect(status(after) == 2)
        #expect(await seen("alan@contoso.com") == alan)
    }

    /// The accounts of a client come as 14-member objects; an unknown client sees none.
    @Test func accountsOfAClient() async throws {
        let known = try await answer("getAccounts", #"{"clientId":"\#(CacheFixtures.clientId)","redirectUri":"x"}"#)
        let accounts = try #require(known["accounts"] as? [[String: Any]])
        #expect(!accounts.isEmpty)
        #expect(accounts.allSatisfy { $0.count == 14 && ($0["homeAccountId"] as? String)?.contains(".") == true })
        let unknown = try await answer("getAccounts", #"{"clientId":"00000000-0000-0000-0000-000000000000"}"#)
        #expect((unknown["accounts"] as? [Any])?.isEmpty == true)
    }

    /// No account, or an unknown one: InteractionRequired (2), the status that makes MSAL sign in interactively.
    @Test func noAccountIsInteractionRequired() async throws {
        let request = """
            {"authParameters":{"clientId":"\(CacheFixtures.clientId)","authority":"\(CacheFixtures.authority)",
             "requestedScopes":["\(Self.scope)"],"username":"nobody@contoso.com"}}
            """
        #expect(status(try await answer("acquireTokenSilently", request)) == 2)
    }

    /// Without a display, an interactive sign-in cannot be shown: the error tells the user what to run.
    @Test func interactiveWithoutADisplaySaysWhatToRun() async throws {
        let request = """
            {"authParameters":{"clientId":"11111111-2222-3333-4444-555555555555","authority":"\(CacheFixtures.authority)",
             "requestedScopes":["\(Self.scope)"]}}
            """
        let answer = try await answer("acquireTokenInteractively", request, display: nil)
        #expect(status(answer) == 2)
        #expect(((answer["error"] as? [String: Any])?["context"] as? String)?.contains("tokenbroker login") == true)
    }

    /// Every bad input is a Broker1 error object with status, errorCode, tag and context; none echoes a value.
    @Test(arguments: [
        ("acquireTokenSilently", "not json", 6),
        ("acquireTokenSilently", #"{"authParameters":{"clientId":7}}"#, 6),
        ("acquireTokenSilently", #"{"authParameters":{}}"#, 6),
        ("acquireTokenSilently", #"{"authParameters":{"clientId":"a","popParams":{"x":1}}}"#, 6),
        ("getAccounts", "{}", 6),
        ("removeAccount", #"{"clientId":"a"}"#, 6),
        ("noSuchMethod", "{}", 6),
        ("acquirePrtSsoCookie", "{}", 9),
        ("generateSignedHttpRequest", "{}", 9),
    ])
    func badInputIsAnErrorObject(method: String, request: String, expected: Int) async throws {
        let answer = try await answer(method, request)
        let error = try #require(answer["error"] as? [String: Any])
        #expect(error["status"] as? Int == expected)
        #expect(error["errorCode"] is Int && error["tag"] is Int && error["subStatus"] is Int)
        #expect((error["context"] as? String)?.isEmpty == false)
    }

    /// A request over 1 MiB is refused unread.
    @Test func oversizedRequestIsRefused() async throws {
        let request = #"{"clientId":""# + String(repeating: "x", count: 1 << 20) + #""}"#
        #expect(status(try await answer("getAccounts", request)) == 6)
    }

    /// Failures map to the statuses MSAL acts on.
    @Test func statusMapping() {
        let cases: [(BrokerFailure, Broker1.Status)] = [
            (BrokerFailure(.interactionRequired, "x"), .interactionRequired),
            (BrokerFailure(.noAccount, "x"), .interactionRequired),
            (BrokerFailure(.invalidParams, "x"), .apiContractViolation),
            (BrokerFailure(.userCanceled, "x"), .userCanceled),
            (BrokerFailure(.serverError, "x"), .serverTemporarilyUnavailable),
            (BrokerFailure(.throttled, "x"), .transientError),
            (BrokerFailure(.brokerBusy, "x"), .transientError),
            (BrokerFailure(.unauthorizedClient, "x"), .incorrectConfiguration),
            // The user's configured browser could not start: the user's to fix, not a bad request of the app's.
            (
                BrokerFailure(.invalidParams, "x", details: .init(field: "params.webviewType")),
                .incorrectConfiguration
            ),
            (BrokerFailure(.cacheLocked, "x"), .transientError),
            (BrokerFailure(.internalError, "x"), .unexpected),
        ]
        for (failure, status) in cases {
            #expect(Broker1Translator.status(of: failure) == status, "\(failure.code)")
        }
    }

    /// The provider's description joins the context once, also when the message quotes it already.
    @Test func theProvidersDescriptionIsSaidOnce() throws {
        let description = "AADSTS50076: multi-factor authentication is required"
        for message in ["the identity provider refused the request", "refused (interaction_required): \(description)"] {
            let failure = BrokerFailure(.interactionRequired, message, details: .init(errorDescription: description))
            let object = try JSONSerialization.jsonObject(with: Data(Broker1Translator.error(failure).utf8))
            let context = try #require(((object as? [String: Any])?["error"] as? [String: Any])?["context"] as? String)
            #expect(context.components(separatedBy: description).count == 2, "\(context)")
        }
    }
}
