import BrokerProtocol
import Foundation
import Testing

/// The method table: every method's params and result survive the wire, and the table is the protocol's.
struct MethodTableTests {
    /// One type per method of the protocol, each named once: the table's methods are exactly those Protocol/ has a
    /// params schema for (a method type left out of ``Methods/all`` fails here).
    @Test func listsEveryMethodOnce() throws {
        let names = MethodName.allCases.map(\.rawValue)
        #expect(Set(names).count == names.count)
        for name in MethodName.allCases {
            #expect(Methods.named(name.rawValue)?.name == name)
        }
        #expect(Methods.named("acquireTokenSilentlyX") == nil)
        let schemas = try FileManager.default.contentsOfDirectory(atPath: Self.schemas.path)
            .filter { $0.hasSuffix(".params.json") }
            .map { String($0.dropLast(".params.json".count)) }
            .filter { !$0.contains(".") }  // the notifications' (webAuth.didFail, deviceCode.prompt)
        #expect(Set(names) == Set(schemas))
        #expect(
            Methods.all.filter { $0.answersFromMemory }.map { $0.name } == [
                "getLinuxBrokerVersion", "getAccounts", "getAccount", "acquireTokenSilently", "getStatus",
                "getKeyStatus",
            ]
        )
    }

    private static let schemas = URL(filePath: #filePath).deletingLastPathComponent()
        .appending(path: "../../Protocol/schemas").standardized

    /// A request of every method, with every member of its params set, decodes to the params it was encoded from; its
    /// result, likewise, comes back equal from the bytes the broker would send.
    @Test(arguments: MethodName.allCases)
    func roundTripsParamsAndResult(_ name: MethodName) throws {
        let method = try #require(Methods.named(name.rawValue))
        try roundTrip(method)
    }

    private func roundTrip<Method: BrokerMethod>(_ method: Method.Type) throws {
        let params = try #require(Samples.params(of: method), "no sample params for \(Method.name)")
        let request = try WireEncoder().encode(Request(id: .number(7), method: Method.name, params: params))
        guard case .success(let decoded) = RequestDecoder().decode(request) else {
            Issue.record("\(Method.name): the request was refused")
            return
        }
        #expect(decoded.id == .number(7))
        #expect(decoded.call.method == Method.name)
        let back = try #require(decoded.params(of: method))
        #expect(same(back, params), "\(Method.name): params differ")

        let result = try #require(Samples.result(of: method), "no sample result for \(Method.name)")
        let response = try WireEncoder().encode(Response(id: .number(7), result: result))
        let message = try ServerMessageDecoder { $0 == .number(7) ? Method.Result.self : nil }.decode(response)
        guard case .result(.number(7), let value) = message, let typed = value as? Method.Result else {
            Issue.record("\(Method.name): the result did not decode as \(Method.Result.self)")
            return
        }
        #expect(same(typed, result), "\(Method.name): result differs")
    }

    /// Whether two values are equal, members of nested objects included (every protocol type is `Hashable`).
    private func same(_ first: Any, _ second: Any) -> Bool {
        guard let first = first as? AnyHashable, let second = second as? AnyHashable else { return false }
        return first == second
    }

    /// Every member of the sample params is on the wire: a coding key left out of a params type would drop it.
    @Test(arguments: MethodName.allCases)
    func samplesSetEveryMember(_ name: MethodName) throws {
        let method = try #require(Methods.named(name.rawValue))
        let (members, properties) = try members(method)
        #expect(!members.values.contains(.null))
        #expect(members.count == properties, "\(name): \(members.count) members on the wire of \(properties)")
    }

    private func members<Method: BrokerMethod>(
        _ method: Method.Type
    ) throws -> (members: [String: JSONValue], properties: Int) {
        let params = try #require(Samples.params(of: method))
        let members = try JSONValue.parse(try WireEncoder().encode(params)).objectValue ?? [:]
        return (members, Mirror(reflecting: params).children.count)
    }

    /// A call without a correlation id gets one; one with an id keeps it; a flow's id is its own.
    @Test func defaultsTheCorrelationIdFromTheParamsType() {
        var silent = Call<Methods.AcquireTokenSilently>(
            AcquireTokenSilentlyParams(authParameters: AuthParameters(clientId: "app"))
        )
        #expect(silent.correlationId == nil)
        let made = silent.ensureCorrelationId()
        #expect(UUID(uuidString: made) != nil)
        #expect(silent.params.correlationId == made)
        #expect(silent.ensureCorrelationId() == made)

        var cancel = Call<Methods.CancelInteractiveFlow>(CancelInteractiveFlowParams(correlationId: "flow-1"))
        #expect(cancel.ensureCorrelationId() == "flow-1")
    }

    /// Methods whose params are all optional may leave them out; the others must send them.
    @Test func knowsWhichParamsMayBeLeftOut() {
        let optional = Methods.all.filter { hasDefaults($0) }.map { $0.name }
        #expect(
            optional == [
                "getLinuxBrokerVersion", "getAccounts", "exportCache", "getStatus", "listGrants", "getKeyStatus",
                "unlockCache",
            ]
        )
    }

    private func hasDefaults<Method: BrokerMethod>(_ method: Method.Type) -> Bool {
        Method.Params.whenOmitted != nil
    }
}

/// A value of every params and result type with every member set.
private enum Samples {
    static func params<Method: BrokerMethod>(of method: Method.Type) -> Method.Params? {
        allParams.lazy.compactMap { $0 as? Method.Params }.first
    }

    static func result<Method: BrokerMethod>(of method: Method.Type) -> Method.Result? {
        allResults.lazy.compactMap { $0 as? Method.Result }.first
    }

    static let authParameters = AuthParameters(
        clientId: "app",
        authority: "https://login.microsoftonline.com/common",
        requestedScopes: ["User.Read"],
        resource: "https://graph.microsoft.com",
        account: AccountSelector(identifier: "uid-1.tenant-1", username: "ada@contoso.com"),
        username: "ada@contoso.com",
        redirectUri: "http://localhost/callback",
        decodedClaims: #"{"access_token":{"acrs":{"essential":true}}}"#,
        forceRefresh: true,
        minimumValiditySeconds: 600,
        authorizationType: 1,
        prompt: "login",
        loginHint: "ada@contoso.com",
        domainHint: "contoso.com",
        additionalQueryParametersForAuthorization: ["x": "y"]
    )

    static let allParams: [any Sendable] = [
        GetVersionParams(protocolVersion: "1.1", msalCppVersion: "1.2.3", correlationId: "c-1"),
        GetAccountsParams(clientId: "app", authority: "https://login.microsoftonline.com/common", correlationId: "c-2"),
        GetAccountParams(
            AccountSelector(identifier: "uid-1.tenant-1", username: "ada@contoso.com"),
            correlationId: "c"
        ),
        AcquireTokenSilentlyParams(authParameters: authParameters, correlationId: "c-3"),
        AcquireTokenInteractivelyParams(
            authParameters: authParameters,
            webviewType: .customBrowser,
            browserProfile: "private",
            browserCommand: ["firefox"],
            environment: ["DISPLAY": ":0"],
            timeoutSeconds: 60,
            correlationId: "c-4"
        ),
        CompleteInteractiveFlowParams(correlationId: "c-5", responseUrl: Secret("http://localhost/callback?code=x")),
        CancelInteractiveFlowParams(correlationId: "c-6"),
        RemoveAccountParams(
            account: AccountSelector(username: "ada@contoso.com"),
            clientId: "app",
            correlationId: "c-7"
        ),
        ImportCacheParams(format: .adal, data: Secret("[]"), correlationId: "c-8"),
        ExportCacheParams(format: .adal, clientId: "app", correlationId: "c-9"),
        GetStatusParams(correlationId: "c-10"),
        CreateGrantParams(
            clientId: "app",
            authority: "https://login.microsoftonline.com/common",
            resources: ["https://vault.azure.net"],
            scopes: ["api://app/read"],
            account: AccountSelector(username: "ada@contoso.com"),
            lifetimeSeconds: 3600,
            label: "devcontainer",
            listen: "172.17.0.1:0",
            correlationId: "c-11"
        ),
        ListGrantsParams(correlationId: "c-12"),
        RevokeGrantParams(grant: "g0123456789ab", correlationId: "c-13"),
        DiscardAccessTokenParams(accessToken: Secret("at"), correlationId: "c-14"),
        GetKeyStatusParams(correlationId: "c-15"),
        UnlockCacheParams(passphrase: Secret("passphrase"), correlationId: "c-16"),
        MoveCacheKeyParams(to: "passphrase", passphrase: Secret("passphrase"), correlationId: "c-17"),
    ]

    static let grant = EndpointGrant(
        id: "g0123456789ab",
        label: "devcontainer",
        clientId: "app",
        authority: "https://login.microsoftonline.com/common",
        resources: ["https://vault.azure.net"],
        scopes: ["api://app/read"],
        accountIdentifier: "uid-1.tenant-1",
        username: "ada@contoso.com",
        createdAt: 1_700_000_000,
        expiresAt: 1_700_028_800,
        endpoint: "http://172.17.0.1:41234/msi/token",
        listening: false,
        problem: "the address is gone",
        tokensServed: 3
    )

    static let counts = EntryCounts(accounts: 1, accessTokens: 2, refreshTokens: 3, idTokens: 4, appMetadata: 5)

    static let allResults: [any Sendable] = [
        VersionResult(linuxBrokerVersion: "0.4.0", protocolVersion: "1.1", methods: ["getStatus"]),
        AccountsResult(accounts: [Fixtures.account]),
        CreateGrantResult(grant: grant, identityHeader: Secret("secret")),
        ListGrantsResult(grants: [grant]),
        RevokeGrantResult(grant: grant),
        DiscardAccessTokenResult(discarded: true),
        AccountResult(account: Fixtures.account),
        AcquireTokenResult(brokerTokenResponse: Fixtures.tokenResult),
        FlowControlResult(accepted: true),
        RemoveAccountResult(removedCredentials: 3, accountRemoved: true),
        ImportCacheResult(format: .msal, imported: counts, skipped: [SkippedEntry(entry: "[3]", reason: "no token")]),
        ExportCacheResult(format: .msal, data: Secret("{}"), counts: counts),
        StatusResult(
            version: "0.4.0",
            protocolVersion: "1.1",
            pid: 42,
            startedAt: 1_700_000_000_000,
            uptimeSeconds: 5,
            socketPath: "/run/user/1000/tokenbroker/broker.sock",
            activation: "socket",
            stateDirectory: "/home/ada/.local/state/tokenbroker",
            cache: counts,
            connections: .init(open: 1, accepted: 2, refused: 0),
            requests: .init(succeeded: 3, failed: 1, inFlight: 0),
            recentErrors: [
                .init(at: 1, method: "getAccount", errorCode: .noAccount, message: "no account", correlationId: "c")
            ],
            store: .init(damagedEntries: 0, failedWrites: 1, lastWriteError: "disk full", databaseWasMissing: false),
            keyStore: keyStore
        ),
        keyStore,
    ]

    static let keyStore = KeyStoreStatus(
        store: "secret-service",
        protection: "in the keyring",
        chosen: true,
        order: ["secret-service", "tpm", "file"],
        locked: true,
        problem: "the keyring is locked",
        hint: "unlock it",
        warning: "a plain file"
    )
}
