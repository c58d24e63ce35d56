import BrokerCache
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

/// ADAL Python's `expiresOn`, a local time without a zone.
struct LocalTimeTests {
    private let budapest = TimeZone(identifier: "Europe/Budapest") ?? .gmt

    @Test func readsPythonsStrOfADatetimeInTheGivenZone() {
        // 2020-11-13 14:44:42 in Budapest (UTC+1 in November) is 13:44:42 UTC.
        #expect(LocalTime.epochSeconds("2020-11-13 14:44:42.492318", timeZone: budapest) == 1_605_275_082)
        #expect(LocalTime.epochSeconds("2020-11-13 14:44:42", timeZone: budapest) == 1_605_275_082)
        // Summer time: UTC+2.
        #expect(LocalTime.epochSeconds("2021-07-01 12:00:00", timeZone: budapest) == 1_625_133_600)
    }

    @Test func honoursAnExplicitZone() {
        #expect(LocalTime.epochSeconds("2020-11-13T13:44:42Z", timeZone: budapest) == 1_605_275_082)
        #expect(LocalTime.epochSeconds("2020-11-13T13:44:42.5Z", timeZone: budapest) == 1_605_275_082)
        #expect(LocalTime.epochSeconds("2020-11-13 15:44:42+02:00", timeZone: budapest) == 1_605_275_082)
        #expect(LocalTime.epochSeconds("2020-11-13 08:44:42-0500", timeZone: budapest) == 1_605_275_082)
    }

    @Test func refusesWhatIsNotSuchATime() {
        for text in [
            "", "garbage", "2020-11-13", "2020-02-30 10:00:00", "2020-13-01 00:00:00", "2020-11-13 24:00:00",
            "2020-11-13 14:44:42.", "2020-11-13 14:44:42 extra", "2020-11-13 14:44:42+25:00", "1605275082",
            "1969-12-31 23:59:59", "２０２０-11-13 14:44:42",
        ] {
            #expect(LocalTime.epochSeconds(text, timeZone: budapest) == nil, "\(text)")
        }
    }

    @Test func writesWhatItReads() {
        let text = LocalTime.text(1_605_275_082, timeZone: budapest)
        #expect(text == "2020-11-13 14:44:42.000000")
        #expect(LocalTime.epochSeconds(text, timeZone: budapest) == 1_605_275_082)
    }
}

struct ADALCacheDocumentTests {
    private let now = Int64(Date().timeIntervalSince1970)
    private let zone = TimeZone(identifier: "America/New_York") ?? .gmt
    private static let client = "04b07795-8ddb-461a-bbee-02f9e1bf7b46"
    private static let management = "https://management.core.windows.net/"

    /// One entry as ADAL Python writes it after a sign-in with an id token.
    private func entry(
        person: CacheFixtures.Person = CacheFixtures.ada,
        resource: String = management,
        expiresOn: Int64? = nil,
        accessToken: String = "AT-ADAL",
        refreshToken: String? = "RT-ADAL",
        overrides: [String: JSONValue] = [:]
    ) -> JSONValue {
        let expiry = expiresOn ?? now + 3000
        var fields: [String: JSONValue] = [
            "tokenType": .string("Bearer"), "expiresIn": .integer(3599),
            "expiresOn": .string(
                LocalTime.text(expiry, timeZone: zone).replacingOccurrences(of: ".000000", with: ".492318")
            ),
            "resource": .string(resource), "accessToken": .string(accessToken),
            "userId": .string(person.username), "isUserIdDisplayable": .bool(true),
            "tenantId": .string(CacheFixtures.tenant), "oid": .string(person.oid), "givenName": .string("Ada"),
            "familyName": .string("Lovelace"), "_clientId": .string(Self.client),
            "_authority": .string("https://login.microsoftonline.com/\(CacheFixtures.tenant)"), "isMRRT": .bool(true),
        ]
        if let refreshToken { fields["refreshToken"] = .string(refreshToken) }
        fields.merge(overrides) { _, new in new }
        return .object(fields.filter { $0.value != .null })
    }

    private func read(_ entries: [JSONValue]) throws -> (entries: [CacheEntry], skipped: [SkippedEntry]) {
        try ADALCacheDocument.read(Data(CacheFixtures.text(.array(entries)).utf8), timeZone: zone, now: now)
    }

    /// The account is ADAL's user under MSAL's names, the resource a `.default` scope, and the multi-resource
    /// refresh token one without a target.
    @Test func mapsAnEntryToTheUnifiedCache() throws {
        let contents = CacheContents(try read([entry()]).entries)
        let account = try #require(contents.accounts.values.first)
        #expect(contents.accounts.count == 1)
        #expect(account.homeAccountId == CacheFixtures.ada.homeAccountId)
        #expect(account.username == "ada@contoso.com")
        #expect(account.realm == CacheFixtures.tenant)
        #expect(account.localAccountId == CacheFixtures.ada.oid)
        #expect(account.environment == "login.microsoftonline.com")
        #expect(account.givenName == "Ada")
        #expect(contents.accounts(username: "ADA@contoso.com").count == 1)

        let accessToken = try #require(contents.accessTokens.values.first)
        #expect(accessToken.target == "https://management.core.windows.net//.default")
        #expect(accessToken.secret.reveal() == "AT-ADAL")
        #expect(accessToken.expiresOn == now + 3000)
        #expect(accessToken.cachedAt == now + 3000 - 3599)
        #expect(accessToken.clientId == Self.client)

        let refreshToken = try #require(contents.refreshTokens.values.first)
        #expect(refreshToken.target == nil)
        #expect(refreshToken.secret.reveal() == "RT-ADAL")
        #expect(refreshToken.familyId == nil)
    }

    /// The old Azure CLI file has no id-token fields: its access token names the account.
    @Test func findsTheAccountInTheAccessTokenWhenTheEntryLacksIt() throws {
        let token = CacheFixtures.jwt(["oid": .string(CacheFixtures.alan.oid), "tid": .string(CacheFixtures.tenant)])
        let bare = entry(
            person: CacheFixtures.alan,
            accessToken: token,
            overrides: ["oid": .null, "tenantId": .null, "givenName": .null, "familyName": .null]
        )
        let contents = CacheContents(try read([bare]).entries)
        #expect(contents.accounts.values.map(\.homeAccountId) == [CacheFixtures.alan.homeAccountId])
        #expect(contents.accounts.values.map(\.username) == ["alan@contoso.com"])
    }

    /// ADAL repeats the account and refresh token in every entry: one account, the newest refresh token.
    @Test func mergesEntriesOfOneUser() throws {
        let older = entry(expiresOn: now + 600, accessToken: "AT-1", refreshToken: "RT-OLD")
        let newer = entry(
            resource: "https://graph.microsoft.com",
            expiresOn: now + 3000,
            accessToken: "AT-2",
            refreshToken: "RT-NEW"
        )
        let read = try read([newer, older])
        let contents = CacheContents(read.entries)
        #expect(read.skipped.isEmpty)
        #expect(contents.accounts.count == 1)
        #expect(contents.accessTokens.count == 2)
        #expect(contents.refreshTokens.values.map { $0.secret.reveal() } == ["RT-NEW"])
        #expect(
            Set(contents.accessTokens.values.map(\.target)) == [
                "https://management.core.windows.net//.default", "https://graph.microsoft.com/.default",
            ]
        )
    }

    /// Every bad entry is skipped with its position and reason; the good ones are taken.
    @Test func reportsWhatItSkipsAndWhy() throws {
        let bad: [(JSONValue, String)] = [
            (.string("not an entry"), "the entry is not a JSON object"),
            (
                entry(overrides: ["_authority": .string("http://login.example.com/tenant")]),
                "_authority is not an https URL"
            ),
            (entry(overrides: ["_authority": .string("ftp://login.example.com/t")]), "_authority is not an https URL"),
            (
                entry(overrides: ["_authority": .string("https://login.microsoftonline.com")]),
                "_authority is not an Entra ID authority (https://host/tenant)"
            ),
            (
                entry(overrides: ["_authority": .string("https://adfs.contoso.com/adfs")]),
                "AD FS authorities are not supported"
            ),
            (entry(overrides: ["_authority": .integer(7)]), "_authority is not an absolute URL"),
            (entry(overrides: ["_clientId": .null]), "_clientId is missing"),
            (entry(overrides: ["userId": .array([])]), "userId must be a string"),
            (entry(overrides: ["isMRRT": .string("yes")]), "isMRRT must be true or false"),
            (
                entry(overrides: ["expiresOn": .string("next tuesday")]),
                "expiresOn is not a time like 2020-11-13 14:44:42.492318"
            ),
            (entry(overrides: ["expiresIn": .string("-5")]), "expiresIn must be a number of seconds"),
            (
                entry(overrides: ["oid": .null, "accessToken": .string("opaque")]),
                "the entry names no account: oid and tenantId are missing, and no access token has them"
            ),
            (entry(overrides: ["accessToken": .null, "refreshToken": .null]), "the entry holds no token"),
        ]
        let read = try read(bad.map(\.0) + [entry()])
        #expect(read.skipped.map(\.entry) == bad.indices.map { "[\($0)]" })
        #expect(read.skipped.map(\.reason) == bad.map(\.1))
        #expect(CacheContents(read.entries).count.accessTokens == 1)
    }

    /// An expired access token is left out, but its refresh token still comes in; without one, nothing does.
    @Test func leavesOutExpiredAccessTokens() throws {
        let expired = try read([entry(expiresOn: now - 60)])
        #expect(expired.skipped.map(\.reason) == ["the access token has expired"])
        #expect(CacheContents(expired.entries).count.refreshTokens == 1)
        #expect(CacheContents(expired.entries).count.accounts == 1)

        let nothing = try read([entry(expiresOn: now - 60, refreshToken: nil)])
        #expect(nothing.entries.isEmpty)
    }

    /// What is not an ADAL list at all is refused as a whole.
    @Test func refusesDocumentsThatAreNoList() {
        for text in [#"{"AccessToken":{}}"#, "[", #"[{"userId":"a","userId":"b"}]"#, "\u{FEFF}[]", ""] {
            #expect(throws: CacheError.self, "\(text)") {
                try ADALCacheDocument.read(Data(text.utf8), timeZone: zone, now: now)
            }
        }
    }

    /// Writing gives an entry per access token with its app's refresh token, and one for a refresh token with
    /// no access token; reading it back gives the same tokens.
    @Test func writesWhatItReads() throws {
        let msal = try MSALCacheDocument.read(
            Data(CacheFixtures.text(CacheFixtures.msalCache(people: [CacheFixtures.ada, CacheFixtures.alan])).utf8)
        )
        let contents = CacheContents(msal.entries)
        let (data, counts) = try ADALCacheDocument.write(contents, clientId: nil, timeZone: zone)
        #expect(counts.accounts == 2)
        #expect(counts.accessTokens == 2)
        #expect(counts.refreshTokens == 2)
        guard case .array(let list) = try JSONValue.parse(Array(data)) else {
            Issue.record("not a list")
            return
        }
        #expect(list.count == 2)
        let first = try #require(list.first?.objectValue)
        #expect(first["resource"] == .string("https://graph.microsoft.com"))
        #expect(first["_authority"] == .string("https://login.microsoftonline.com/\(CacheFixtures.tenant)"))
        #expect(first["isMRRT"] == .bool(true))
        #expect(first["userId"] == .string("ada@contoso.com"))

        let back = CacheContents(try ADALCacheDocument.read(data, timeZone: zone, now: now).entries)
        #expect(
            Set(back.refreshTokens.values.map { $0.secret.reveal() })
                == Set(contents.refreshTokens.values.map { $0.secret.reveal() })
        )
        #expect(
            Set(back.accessTokens.values.map { $0.secret.reveal() })
                == Set(contents.accessTokens.values.map { $0.secret.reveal() })
        )
        #expect(Set(back.accessTokens.values.map(\.expiresOn)) == Set(contents.accessTokens.values.map(\.expiresOn)))
        #expect(Set(back.accounts.keys) == Set(contents.accounts.keys))
    }

    /// A refresh token without an access token still goes out, so that ADAL can redeem it for any resource.
    @Test func writesRefreshTokensThatHaveNoAccessToken() throws {
        let msal = try MSALCacheDocument.read(Data(CacheFixtures.text(CacheFixtures.msalCache()).utf8))
        let withoutAccessTokens = msal.entries.filter {
            if case .accessToken = $0 { return false }
            return true
        }
        let (data, counts) = try ADALCacheDocument.write(
            CacheContents(withoutAccessTokens),
            clientId: nil,
            timeZone: zone
        )
        #expect(counts.accessTokens == 0)
        #expect(counts.refreshTokens == 1)
        guard case .array(let list) = try JSONValue.parse(Array(data)), let only = list.first?.objectValue else {
            Issue.record("not a list of one entry")
            return
        }
        #expect(list.count == 1)
        #expect(only["resource"] == .null)
        #expect(only["accessToken"] == .string(""))
        #expect(only["refreshToken"] == .string("RT-SECRET-1-\(CacheFixtures.ada.oid)"))
        #expect(only["isMRRT"] == .bool(true))

        let (other, otherCounts) = try ADALCacheDocument.write(
            CacheContents(withoutAccessTokens),
            clientId: "someone-else",
            timeZone: zone
        )
        #expect(otherCounts.refreshTokens == 0)
        #expect(String(decoding: other, as: UTF8.self) == "[]")
    }
}

struct ScopeResourceTests {
    @Test func mapsResourcesToScopesAndBack() {
        #expect(
            ScopeSet.defaultScope(forResource: "https://management.core.windows.net/")
                == "https://management.core.windows.net//.default"
        )
        #expect(
            ScopeSet.defaultScope(forResource: "https://graph.microsoft.com") == "https://graph.microsoft.com/.default"
        )
        #expect(
            ScopeSet(target: "https://management.core.windows.net//.default").resource
                == "https://management.core.windows.net/"
        )
        #expect(
            ScopeSet(target: "https://graph.microsoft.com/User.Read https://graph.microsoft.com/Mail.Read openid")
                .resource == "https://graph.microsoft.com"
        )
        #expect(ScopeSet(target: "User.Read offline_access").resource == "https://graph.microsoft.com")
        #expect(ScopeSet(target: "api://0000-1111/access_as_user").resource == "api://0000-1111")
        #expect(
            ScopeSet(target: "https://graph.microsoft.com/User.Read https://vault.azure.net/.default").resource == nil
        )
        #expect(ScopeSet(target: "api://bare").resource == nil)
        #expect(ScopeSet(target: "openid profile").resource == nil)
    }
}
