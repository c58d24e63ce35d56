import BrokerCache
import BrokerOAuth
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

@testable import BrokerCore

/// What a token response becomes in the cache, one builder per kind of entry, without a provider or a store.
struct IssuedTokensTests {
    private static let now: Int64 = 1_800_000_000
    private static let tenant = CacheFixtures.tenant
    private static let oid = CacheFixtures.ada.oid

    private func entra() throws -> Authority {
        try Authority(parsing: "https://login.microsoftonline.com/organizations")
    }

    private func clientInfo(uid: String = oid, utid: String = tenant) -> String {
        Base64URL.encode(Data(#"{"uid":"\#(uid)","utid":"\#(utid)"}"#.utf8))
    }

    private func claims(_ values: [String: String]) -> [String: JSONValue] {
        values.mapValues { JSONValue.string($0) }
    }

    private func issue(
        _ response: TokenResponse,
        authority: Authority,
        scopes: [String] = ["User.Read"],
        account: AccountEntry? = nil,
        claims: [String: JSONValue]?,
        redeemed: RefreshToken? = nil,
        in entries: [CacheEntry] = []
    ) throws(BrokerFailure) -> IssuedTokens {
        let context = IssueContext(
            clientId: CacheFixtures.clientId,
            authority: authority,
            requestedScopes: ScopeSet(scopes),
            account: account
        )
        let contents = CacheContents(entries)
        return try IssuedTokens(
            response,
            for: context,
            claims: claims,
            redeemed: redeemed.map { CachedRefreshToken(id: $0.id, token: $0) },
            in: contents,
            now: Self.now
        )
    }

    /// An Entra sign-in: the account is `uid.utid` of client_info, in the tenant the id token names, with the
    /// username and names of its claims; the access token has the granted scopes and a proactive refresh at half its
    /// life; the refresh token holds the grant's scopes with the reserved ones; the app's metadata has its family.
    @Test func anEntraSignInBecomesAccountTokensAndMetadata() throws {
        let response = TokenResponse(
            accessToken: Secret("AT"),
            expiresIn: 10_000,
            extendedExpiresIn: 20_000,
            refreshToken: Secret("RT"),
            idToken: Secret("ID"),
            clientInfo: clientInfo(),
            familyId: "1"
        )
        let idClaims = claims([
            "oid": Self.oid, "tid": Self.tenant, "preferred_username": "ada@contoso.com", "name": "Ada",
        ])
        let issued = try issue(response, authority: try entra(), claims: idClaims)
        let home = "\(Self.oid).\(Self.tenant)"
        #expect(issued.account.homeAccountId == home)
        #expect(issued.account.realm == Self.tenant)
        #expect(issued.account.username == "ada@contoso.com" && issued.account.name == "Ada")
        #expect(issued.account.localAccountId == Self.oid)
        #expect(issued.account.authorityType == "MSSTS")
        #expect(issued.accessToken.target == "User.Read")
        #expect(issued.accessToken.expiresOn == Self.now + 10_000)
        #expect(issued.accessToken.extendedExpiresOn == Self.now + 20_000)
        #expect(issued.accessToken.refreshOn == Self.now + 5_000)
        #expect(issued.idToken?.secret == Secret("ID"))
        // The checked claims go with the change set, so the cache indexes them without decoding the token again.
        #expect(issued.changes.idTokenClaims == [try #require(issued.idToken).id.key: idClaims])
        let refresh = issued.changes.upserts.compactMap { entry -> RefreshToken? in
            if case .refreshToken(let token) = entry { return token }
            return nil
        }
        #expect(refresh.map(\.target) == ["User.Read offline_access openid profile"])
        #expect(refresh.first?.familyId == "1")
        #expect(
            issued.changes.upserts.contains(
                .appMetadata(
                    AppMetadata(
                        clientId: CacheFixtures.clientId,
                        environment: "login.microsoftonline.com",
                        familyId: "1"
                    )
                )
            )
        )
        #expect(issued.changes.deletions.isEmpty)
    }

    /// A refresh that rotated the refresh token: the redeemed one goes (also when it was the family's, under another
    /// client id), the app's access token of overlapping scopes goes, one of other scopes stays.
    @Test func aRefreshReplacesWhatItSupersedes() throws {
        let home = "\(Self.oid).\(Self.tenant)"
        let environment = "login.microsoftonline.com"
        let account = AccountEntry(
            homeAccountId: home,
            environment: environment,
            realm: Self.tenant,
            localAccountId: Self.oid,
            username: "ada@contoso.com"
        )
        let family = RefreshToken(
            homeAccountId: home,
            environment: environment,
            clientId: "family-sibling",
            target: "User.Read openid",
            secret: Secret("RT-family"),
            familyId: "1"
        )
        func accessToken(_ target: String) -> AccessToken {
            AccessToken(
                homeAccountId: home,
                environment: environment,
                clientId: CacheFixtures.clientId,
                realm: Self.tenant,
                target: target,
                secret: Secret("AT-\(target)"),
                cachedAt: Self.now - 100,
                expiresOn: Self.now + 100
            )
        }
        let overlapping = accessToken("User.Read Mail.Read")
        let other = accessToken("Files.Read")
        let issued = try issue(
            TokenResponse(
                accessToken: Secret("AT-new"),
                expiresIn: 3_600,
                refreshToken: Secret("RT-rotated"),
                scope: "User.Read",
                clientInfo: clientInfo(),
                familyId: "1"
            ),
            authority: try Authority(parsing: CacheFixtures.authority),
            account: account,
            claims: nil,
            redeemed: family,
            in: [.account(account), .refreshToken(family), .accessToken(overlapping), .accessToken(other)]
        )
        #expect(Set(issued.changes.deletions) == [family.id, overlapping.id])
        #expect(issued.accessToken.refreshOn == nil)  // an hour: no proactive refresh
        let refresh = issued.changes.upserts.compactMap { entry -> RefreshToken? in
            if case .refreshToken(let token) = entry { return token }
            return nil
        }
        #expect(refresh.map(\.target) == ["User.Read openid"])  // the grant's scopes, kept across refreshes
        // Without claims the account was known and stays as it is: nothing to write.
        #expect(!issued.changes.upserts.contains { if case .account = $0 { true } else { false } })
    }

    /// A generic OpenID Connect provider: the account is the id token's `sub`, its realm the issuer's path, of the
    /// generic kind.
    @Test func aGenericProvidersAccountIsItsSubject() throws {
        let issued = try issue(
            TokenResponse(accessToken: Secret("AT"), expiresIn: 300, idToken: Secret("ID"), scope: "openid profile"),
            authority: try Authority(parsing: "https://idp.example/realms/dev"),
            scopes: ["openid", "profile"],
            claims: claims(["sub": "user-42", "email": "grace@example.com"])
        )
        #expect(issued.account.homeAccountId == "user-42")
        #expect(issued.account.realm == "realms/dev")
        #expect(issued.account.authorityType == "Generic")
        #expect(issued.account.username == "grace@example.com")
        #expect(issued.accessToken.target == "openid profile")
    }

    /// Answers granting different scopes in turn (a token's refreshes repeat theirs, which is parsed once) each store
    /// their own: the access token's target, sorted, and the scopes the answer reports.
    @Test func answersGrantingDifferentScopesInTurnStoreTheirOwn() throws {
        let grants = [
            ("User.Read openid profile offline_access", "User.Read offline_access openid profile"),
            ("Mail.Read User.Read", "Mail.Read User.Read"),
            ("User.Read openid profile offline_access", "User.Read offline_access openid profile"),
            ("openid profile", "openid profile"),
        ]
        for _ in 0..<2 {
            for (scope, target) in grants {
                let issued = try issue(
                    TokenResponse(accessToken: Secret("AT"), expiresIn: 300, idToken: Secret("ID"), scope: scope),
                    authority: try Authority(parsing: "https://idp.example/realms/dev"),
                    scopes: ["openid", "profile"],
                    claims: claims(["sub": "user-42"])
                )
                #expect(issued.accessToken.target == target, "\(scope)")
                #expect(issued.grantedScopes == target.split(separator: " ").map(String.init), "\(scope)")
            }
        }
    }

    /// An answer that names nobody (no client_info, no id token, no account asked for) is refused, storing nothing.
    @Test func anAnswerThatNamesNoAccountIsRefused() throws {
        #expect(throws: BrokerFailure.self) {
            _ = try issue(
                TokenResponse(accessToken: Secret("AT"), expiresIn: 300),
                authority: try Authority(parsing: "https://idp.example"),
                claims: nil
            )
        }
    }
}
