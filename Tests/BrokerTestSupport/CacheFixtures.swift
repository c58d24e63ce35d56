public import BrokerProtocol
public import Foundation

/// MSAL cache documents and tokens for tests: shaped like what MSAL Python writes, with fake JWTs.
public enum CacheFixtures {
    public static let environment = "login.microsoftonline.com"
    public static let tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"
    public static let authority = "https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47"
    public static let clientId = "11111111-aaaa-4bbb-8ccc-000000000001"

    /// A person in the fixtures.
    public struct Person: Sendable {
        public let oid: String
        public let username: String
        public let name: String

        public init(oid: String, username: String, name: String) {
            self.oid = oid
            self.username = username
            self.name = name
        }

        /// `oid.tenant`.
        public var homeAccountId: String { "\(oid).\(CacheFixtures.tenant)" }
    }

    public static let ada = Person(
        oid: "00000000-0000-4000-8000-00000000ada0",
        username: "ada@contoso.com",
        name: "Ada Lovelace"
    )
    public static let alan = Person(
        oid: "00000000-0000-4000-8000-0000000a1a20",
        username: "alan@contoso.com",
        name: "Alan Turing"
    )

    /// An unsigned JWT with these claims (for id tokens and access tokens in tests).
    public static func jwt(_ claims: [String: JSONValue]) -> String {
        let header = Base64URL.encode(Data(#"{"alg":"none","typ":"JWT"}"#.utf8))
        let body = Base64URL.encode((try? WireEncoder().encode(JSONValue.object(claims))) ?? [])
        return "\(header).\(body).c2ln"
    }

    /// A recognizable access-token secret, for grepping logs and files.
    public static func accessTokenSecret(_ label: String) -> String {
        jwt(["aud": .string("https://graph.microsoft.com"), "marker": .string("AT-SECRET-\(label)")])
    }

    /// One MSAL cache document with an account, its id token, access tokens and a refresh token.
    public static func msalCache(
        people: [Person] = [ada],
        clientId: String = clientId,
        scopes: String = "https://graph.microsoft.com/Mail.Read https://graph.microsoft.com/User.Read",
        expiresOn: Int64 = Int64(Date().timeIntervalSince1970) + 3600,
        familyId: String? = nil,
        extraAccessTokenFields: [String: JSONValue] = [:],
        label: String = "1"
    ) -> JSONValue {
        var accessTokens: [String: JSONValue] = [:]
        var refreshTokens: [String: JSONValue] = [:]
        var idTokens: [String: JSONValue] = [:]
        var accounts: [String: JSONValue] = [:]
        var metadata: [String: JSONValue] = [:]
        for person in people {
            let home = person.homeAccountId
            var at: [String: JSONValue] = [
                "credential_type": .string("AccessToken"),
                "secret": .string(accessTokenSecret("\(label)-\(person.oid)")),
                "home_account_id": .string(home), "environment": .string(environment), "client_id": .string(clientId),
                "realm": .string(tenant), "target": .string(scopes), "token_type": .string("Bearer"),
                "cached_at": .string(String(expiresOn - 3600)), "expires_on": .string(String(expiresOn)),
                "extended_expires_on": .string(String(expiresOn + 3600)),
            ]
            at.merge(extraAccessTokenFields) { _, new in new }
            accessTokens["\(home)-\(environment)-accesstoken-\(clientId)-\(tenant)-\(scopes)".lowercased()] = .object(
                at
            )
            var rt: [String: JSONValue] = [
                "credential_type": .string("RefreshToken"), "secret": .string("RT-SECRET-\(label)-\(person.oid)"),
                "home_account_id": .string(home), "environment": .string(environment), "client_id": .string(clientId),
                "last_modification_time": .string(String(expiresOn - 3600)),
            ]
            if let familyId { rt["family_id"] = .string(familyId) }
            refreshTokens["\(home)-\(environment)-refreshtoken-\(clientId)--".lowercased()] = .object(rt)
            let idClaims: [String: JSONValue] = [
                "oid": .string(person.oid), "tid": .string(tenant), "preferred_username": .string(person.username),
                "name": .string(person.name), "sub": .string("sub-\(person.oid)"),
            ]
            idTokens["\(home)-\(environment)-idtoken-\(clientId)-\(tenant)-".lowercased()] = .object([
                "credential_type": .string("IdToken"), "secret": .string(jwt(idClaims)),
                "home_account_id": .string(home),
                "environment": .string(environment), "realm": .string(tenant), "client_id": .string(clientId),
            ])
            accounts["\(home)-\(environment)-\(tenant)".lowercased()] = .object([
                "home_account_id": .string(home), "environment": .string(environment), "realm": .string(tenant),
                "local_account_id": .string(person.oid), "username": .string(person.username),
                "authority_type": .string("MSSTS"), "account_source": .string("authorization_code"),
            ])
        }
        var appMetadata: [String: JSONValue] = ["client_id": .string(clientId), "environment": .string(environment)]
        if let familyId { appMetadata["family_id"] = .string(familyId) }
        metadata["appmetadata-\(environment)-\(clientId)"] = .object(appMetadata)
        return .object([
            "AccessToken": .object(accessTokens), "RefreshToken": .object(refreshTokens), "IdToken": .object(idTokens),
            "Account": .object(accounts), "AppMetadata": .object(metadata),
        ])
    }

    /// The JSON text of a value, compact.
    public static func text(_ value: JSONValue) -> String {
        String(decoding: (try? WireEncoder().encode(value)) ?? [], as: UTF8.self)
    }
}
