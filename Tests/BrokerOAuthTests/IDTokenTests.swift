import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

@testable import BrokerOAuth

@Suite struct IDTokenTests {
    let now: Int64 = 1_800_000_000

    func claims(_ changes: [String: Any] = [:]) -> [String: Any] {
        var claims: [String: Any] = [
            "iss": "https://idp.example", "aud": "client-x", "sub": "s-1", "exp": now + 3600, "iat": now,
            "nonce": "n-1",
        ]
        for (key, value) in changes { claims[key] = value }
        return claims
    }

    /// A directory whose JWKS endpoint serves `signers`' keys.
    func keys(_ signers: [TestSigner], metadata: ProviderMetadata) async -> (SigningKeys?, ScriptedTransport) {
        let transport = ScriptedTransport([ScriptedTransport.json(200, ["keys": signers.map(\.jwk)])])
        let directory = ProviderDirectory(transport: transport)
        return (directory.signingKeys(for: metadata), transport)
    }

    func validate(
        _ token: String,
        signers: [TestSigner],
        metadata: ProviderMetadata = .test(),
        nonce: String? = "n-1"
    ) async throws -> JSONWebToken {
        let (keys, _) = await keys(signers, metadata: metadata)
        return try await IDTokenValidator(metadata: metadata, clientId: "client-x")
            .validate(Secret(token), nonce: nonce, now: now, keys: keys)
    }

    @Test(arguments: ["RS256", "ES256"])
    func acceptsAGoodToken(algorithm: String) async throws {
        let signer = algorithm == "RS256" ? try TestSigner.rsa() : TestSigner.p256()
        let token = try await validate(try signer.sign(claims()), signers: [signer])
        #expect(token.string("sub") == "s-1")
    }

    @Test func refusesTokensThatFailAnyCheck() async throws {
        let signer = try TestSigner.rsa()
        let cases: [(String, [String: Any])] = [
            ("issuer", ["iss": "https://evil.example"]),
            ("not for client", ["aud": "someone-else"]),
            ("azp", ["aud": ["client-x", "other"]]),
            ("expired", ["exp": now - 121]),
            ("not valid yet", ["nbf": now + 121]),
            ("nonce", ["nonce": "n-2"]),
            ("no exp", ["exp": NSNull()]),
        ]
        for (reason, change) in cases {
            await #expect("\(reason)") {
                _ = try await validate(try signer.sign(claims(change)), signers: [signer])
            } throws: { error in
                "\(error)".contains(reason)
            }
        }
    }

    @Test func allowsTwoMinutesOfSkew() async throws {
        let signer = try TestSigner.rsa()
        _ = try await validate(try signer.sign(claims(["exp": now - 119, "nbf": now + 119])), signers: [signer])
        _ = try await validate(
            try signer.sign(claims(["aud": ["client-x", "api"], "azp": "client-x"])),
            signers: [signer]
        )
    }

    @Test func refusesForgedAndUnsignedTokens() async throws {
        let signer = try TestSigner.rsa()
        let impostor = try TestSigner.rsa(keyId: signer.keyId)
        await #expect { _ = try await validate(try impostor.sign(claims()), signers: [signer]) } throws: { error in
            "\(error)".contains("signature does not verify")
        }
        let unsigned = try signer.sign(claims(), header: ["alg": "none"])
        await #expect { _ = try await validate(unsigned, signers: [signer]) } throws: { error in
            "\(error)".contains("not accepted")
        }
        let hmac = try signer.sign(claims(), header: ["alg": "HS256", "kid": signer.keyId])
        await #expect { _ = try await validate(hmac, signers: [signer]) } throws: { error in
            "\(error)".contains("not accepted")
        }
        var parts = try signer.sign(claims()).split(separator: ".").map(String.init)
        parts[1] = Base64URL.encode(Array(#"{"iss":"https://idp.example","aud":"client-x","exp":9999999999}"#.utf8))
        await #expect { _ = try await validate(parts.joined(separator: "."), signers: [signer]) } throws: { error in
            "\(error)".contains("signature does not verify")
        }
        await #expect { _ = try await validate("not-a-jwt", signers: [signer]) } throws: { error in
            "\(error)".contains("three parts")
        }
    }

    /// A refresh's token naming its account (`oid`, else `sub`) is not checked against the keys; any other is, and
    /// the other checks hold for both.
    @Test func trustsARefreshsTokenOnlyForItsOwnAccount() async throws {
        let signer = try TestSigner.rsa()
        let impostor = try TestSigner.rsa(keyId: signer.keyId)
        let (keys, transport) = await keys([signer], metadata: .test())
        let validator = IDTokenValidator(metadata: .test(), clientId: "client-x")
        func validate(
            _ claims: [String: Any],
            knownSubject: String?,
            header: [String: Any]? = nil
        ) async throws
            -> JSONWebToken
        {
            try await validator.validate(
                Secret(try impostor.sign(claims, header: header)),
                nonce: nil,
                now: now,
                keys: keys,
                knownSubject: knownSubject
            )
        }
        #expect(try await validate(claims(), knownSubject: "s-1").string("sub") == "s-1")
        #expect(try await validate(claims(["oid": "o-1"]), knownSubject: "o-1").string("oid") == "o-1")
        #expect(transport.sent.isEmpty, "the keys were fetched for a token that needed none")
        let refused: [(String, [String: Any], String?, [String: Any]?)] = [
            ("signature does not verify", claims(), "s-2", nil),
            ("signature does not verify", claims(), nil, nil),
            ("signature does not verify", claims(), "", nil),
            ("signature does not verify", claims(["sub": ""]), "", nil),
            ("signature does not verify", claims(["oid": "o-1"]), "s-1", nil),
            ("not accepted", claims(), "s-1", ["alg": "none"]),
            ("not accepted", claims(), "s-1", ["alg": "HS256", "kid": signer.keyId]),
            ("issuer", claims(["iss": "https://evil.example"]), "s-1", nil),
            ("not for client", claims(["aud": "someone-else"]), "s-1", nil),
            ("expired", claims(["exp": now - 121]), "s-1", nil),
            ("not valid yet", claims(["nbf": now + 121]), "s-1", nil),
            ("azp", claims(["aud": ["client-x", "other"]]), "s-1", nil),
        ]
        for (reason, claims, subject, header) in refused {
            await #expect("\(reason), \(String(describing: subject))") {
                _ = try await validate(claims, knownSubject: subject, header: header)
            } throws: { error in
                "\(error)".contains(reason)
            }
        }
    }

    @Test func fetchesRolledKeysOnceForAnUnknownKid() async throws {
        let old = try TestSigner.rsa(keyId: "old")
        let new = try TestSigner.rsa(keyId: "new")
        let metadata = ProviderMetadata.test()
        let transport = ScriptedTransport([
            ScriptedTransport.json(200, ["keys": [old.jwk]]),
            ScriptedTransport.json(200, ["keys": [old.jwk, new.jwk]]),
        ])
        let keys = ProviderDirectory(transport: transport).signingKeys(for: metadata)
        let validator = IDTokenValidator(metadata: metadata, clientId: "client-x")
        _ = try await validator.validate(Secret(try old.sign(claims())), nonce: nil, now: now, keys: keys)
        #expect(transport.sent.count == 1)
        _ = try await validator.validate(Secret(try new.sign(claims())), nonce: nil, now: now, keys: keys)
        #expect(transport.sent.count == 2)
        // Within the minute, an unknown kid does not make the broker fetch again.
        let stranger = try TestSigner.rsa(keyId: "stranger")
        await #expect(throws: IDTokenError.self) {
            _ = try await validator.validate(Secret(try stranger.sign(claims())), nonce: nil, now: now, keys: keys)
        }
        #expect(transport.sent.count == 2)
    }

    /// Sign-ins and refreshes that validate id tokens at once, before the keys are known, share one JWKS fetch.
    @Test func concurrentValidationsShareOneKeyFetch() async throws {
        let signer = try TestSigner.rsa()
        let metadata = ProviderMetadata.test()
        let (keys, transport) = await keys([signer], metadata: metadata)
        let validator = IDTokenValidator(metadata: metadata, clientId: "client-x")
        let token = Secret(try signer.sign(claims()))
        let now = self.now
        // The first fetch is answered once the other 19 validations have joined it: none finds the keys fetched.
        let shared = try #require(keys)
        transport.holdAnswers { shared.fetchCounts.joined == 19 }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<20 {
                group.addTask { _ = try await validator.validate(token, nonce: nil, now: now, keys: keys) }
            }
            try await group.waitForAll()
        }
        #expect(transport.sent.count == 1)
        #expect(shared.fetchCounts == (started: 1, joined: 19))
    }

    @Test func trustsTheConnectionWhenTheProviderPublishesNoKeys() async throws {
        let signer = try TestSigner.rsa()
        let metadata = ProviderMetadata.test(jwks: false)
        let validator = IDTokenValidator(metadata: metadata, clientId: "client-x")
        let token = try await validator.validate(Secret(try signer.sign(claims())), nonce: "n-1", now: now, keys: nil)
        #expect(token.string("sub") == "s-1")
    }

    @Test func fillsInEntrasTenantTemplate() async throws {
        let signer = try TestSigner.rsa()
        let metadata = ProviderMetadata.test(issuer: "https://login.microsoftonline.com/{tenantid}/v2.0")
        let tenant = "7d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a"
        let good = claims(["iss": "https://login.microsoftonline.com/\(tenant)/v2.0", "tid": tenant])
        _ = try await validate(try signer.sign(good), signers: [signer], metadata: metadata)
        let mismatched = claims(["iss": "https://login.microsoftonline.com/\(tenant)/v2.0", "tid": "other"])
        await #expect(throws: IDTokenError.self) {
            _ = try await validate(try signer.sign(mismatched), signers: [signer], metadata: metadata)
        }
    }
}

@Suite struct AuthorityTests {
    /// Plain http is for loopback only.
    ///
    /// That is an IP literal in 127.0.0.0/8, ::1, or exactly localhost; a name that merely starts with 127. is anyone's.
    @Test(arguments: [
        ("http://127.0.0.1:8080/tenant", true), ("http://127.8.9.10/tenant", true), ("http://[::1]:9/tenant", true),
        ("http://localhost/tenant", true), ("http://LOCALHOST/tenant", true), ("http://127.evil.example/tenant", false),
        ("http://127.0.0.1.evil.example/tenant", false), ("http://localhost.evil.example/tenant", false),
        ("http://[::2]/tenant", false), ("http://128.0.0.1/tenant", false), ("http://0x7f000001/tenant", false),
    ])
    func allowsPlainHTTPOnLoopbackOnly(url: String, allowed: Bool) {
        #expect(((try? Authority(parsing: url)) != nil) == allowed, "\(url)")
    }
}

@Suite struct DiscoveryTests {
    @Test func findsTheDocumentOfEachKindOfAuthority() throws {
        let entra = try Authority(parsing: "https://login.microsoftonline.com/common")
        #expect(
            ProviderMetadata.discoveryURL(for: entra).absoluteString
                == "https://login.microsoftonline.com/common/v2.0/.well-known/openid-configuration"
        )
        let oidc = try Authority(parsing: "https://accounts.example.com/realms/dev/")
        #expect(
            ProviderMetadata.discoveryURL(for: oidc).absoluteString
                == "https://accounts.example.com/realms/dev/.well-known/openid-configuration"
        )
    }

    /// Every `{tenantid}` is the tenant's id; an issuer without one, or no tenant id, leaves the issuer as it is.
    @Test(arguments: [
        ("https://login.microsoftonline.com/{tenantid}/v2.0", "t-1", "https://login.microsoftonline.com/t-1/v2.0"),
        ("https://sts.windows.net/{tenantid}/", "t-1", "https://sts.windows.net/t-1/"),
        ("{tenantid}", "t-1", "t-1"), ("{tenantid}{tenantid}", "t", "tt"), ("a{tenantid}b{tenantid}", "é", "aébé"),
        ("https://idp.example/{tenant}/{tenantid", "t-1", "https://idp.example/{tenant}/{tenantid"),
        ("https://idp.example/{TENANTID}", "t-1", "https://idp.example/{TENANTID}"),
        ("https://idp.example/7d3c2b1a", "t-1", "https://idp.example/7d3c2b1a"), ("", "t-1", ""),
        ("https://idp.é.example/{{tenantid}}", "t-1", "https://idp.é.example/{t-1}"),
    ])
    func fillsInTheTenantTemplate(issuer: String, tenantId: String, expected: String) {
        let metadata = ProviderMetadata.test(issuer: issuer)
        #expect(metadata.expectedIssuer(tenantId: tenantId) == expected)
        #expect(metadata.expectedIssuer(tenantId: tenantId) == issuer.replacing("{tenantid}", with: tenantId))
        #expect(metadata.expectedIssuer(tenantId: nil) == issuer)
    }

    @Test func checksTheIssuerAndTheEndpoints() throws {
        let oidc = try Authority(parsing: "https://idp.example")
        try ProviderMetadata.test().validate(for: oidc)
        try ProviderMetadata.test(issuer: "https://idp.example/").validate(for: oidc)
        #expect(throws: DiscoveryError.self) {
            try ProviderMetadata.test(issuer: "https://other.example").validate(for: oidc)
        }
        var plain = ProviderMetadata.test()
        plain.tokenEndpoint = testURL("http://idp.example/token")
        #expect(throws: DiscoveryError.self) { try plain.validate(for: oidc) }

        let entra = try Authority(parsing: "https://login.microsoftonline.com/organizations")
        var document = ProviderMetadata.test(issuer: "https://login.microsoftonline.com/{tenantid}/v2.0")
        try document.validate(for: entra)
        document.issuer = "https://sts.windows.net/{tenantid}/"
        try document.validate(for: entra)  // an alias of the same cloud
        document.issuer = "https://login.microsoftonline.us/{tenantid}/v2.0"
        #expect(throws: DiscoveryError.self) { try document.validate(for: entra) }
    }

    @Test func fetchesADocumentOnceForConcurrentCallers() async throws {
        let document: [String: Any] = [
            "issuer": "https://idp.example", "authorization_endpoint": "https://idp.example/a",
            "token_endpoint": "https://idp.example/t", "jwks_uri": "https://idp.example/k",
        ]
        let transport = ScriptedTransport([ScriptedTransport.json(200, document)])
        let directory = ProviderDirectory(transport: transport)
        let authority = try Authority(parsing: "https://idp.example")
        let endpoints = try await withThrowingTaskGroup(of: URL.self) { group in
            for _ in 0..<20 { group.addTask { try await directory.metadata(for: authority).tokenEndpoint } }
            return try await group.reduce(into: Set<URL>()) { $0.insert($1) }
        }
        #expect(endpoints == [testURL("https://idp.example/t")])
        #expect(transport.sent.count == 1)
    }

    @Test func doesNotRememberFailures() async throws {
        let document: [String: Any] = [
            "issuer": "https://idp.example", "authorization_endpoint": "https://idp.example/a",
            "token_endpoint": "https://idp.example/t",
        ]
        let transport = ScriptedTransport([
            .response(HTTPResponse(status: 404)), ScriptedTransport.json(200, ["issuer": "x"]),
            ScriptedTransport.json(200, document),
        ])
        let directory = ProviderDirectory(transport: transport)
        let authority = try Authority(parsing: "https://idp.example")
        await #expect { _ = try await directory.metadata(for: authority) } throws: { error in
            "\(error)".contains("HTTP 404")
        }
        await #expect { _ = try await directory.metadata(for: authority) } throws: { error in
            "\(error)".contains("lacks issuer")
        }
        #expect(try await directory.metadata(for: authority).jwksURI == nil)
    }
}

/// The one-entry memo's users: `client_info` and the id token's header, decoded for each input in turn.
@Suite struct LastDecodedUsersTests {
    /// Two accounts' `client_info` in turn, and one that is not client info between them: each decodes to its own.
    @Test func clientInfoOfAccountsInTurnDecodesToEachOnesOwn() {
        let ada = Base64URL.encode(Data(#"{"uid":"ada","utid":"t1"}"#.utf8))
        let alan = Base64URL.encode(Data(#"{"uid":"alan","utid":"t2"}"#.utf8))
        for _ in 0..<2 {
            #expect(ClientInfo(encoded: ada)?.homeAccountId == "ada.t1")
            #expect(ClientInfo(encoded: alan)?.homeAccountId == "alan.t2")
            #expect(ClientInfo(encoded: Base64URL.encode(Data(#"{"uid":""}"#.utf8))) == nil)
            #expect(ClientInfo(encoded: "not base64!") == nil)
            #expect(ClientInfo(encoded: alan)?.homeAccountId == "alan.t2")
        }
    }

    /// Tokens with different headers in turn each read their own; a header that is not JSON is refused each time.
    @Test func tokensInTurnReadTheirOwnHeaders() throws {
        func token(header: String) -> String {
            Base64URL.encode(Data(header.utf8)) + "." + Base64URL.encode(Data(#"{"sub":"s"}"#.utf8)) + ".c2ln"
        }
        for _ in 0..<2 {
            #expect(try JSONWebToken(compact: token(header: #"{"alg":"RS256","kid":"k1"}"#)).keyId == "k1")
            #expect(try JSONWebToken(compact: token(header: #"{"alg":"RS256","kid":"k2"}"#)).keyId == "k2")
            #expect(throws: IDTokenError("the id_token's header is not a JSON object")) {
                try JSONWebToken(compact: token(header: "[1]"))
            }
            #expect(throws: IDTokenError("the id_token is not base64url")) {
                try JSONWebToken(compact: "e30!." + Base64URL.encode(Data("{}".utf8)) + ".c2ln")
            }
            #expect(try JSONWebToken(compact: token(header: #"{"alg":"RS256","kid":"k2"}"#)).keyId == "k2")
        }
    }
}
