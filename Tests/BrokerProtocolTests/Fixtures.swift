import BrokerProtocol
import Foundation

enum Fixtures {
    static let account = Account(
        identifier: "uid-1.tenant-1",
        username: "ada@contoso.com",
        environment: "login.microsoftonline.com",
        realm: "tenant-1",
        localAccountId: "uid-1",
        name: "Ada",
        accountSource: "authorization_code",
        accountClaims: [
            "name": .string("Ada"), "groups": .array([.string("a"), .integer(2)]), "exp": .integer(1_700_000_000),
        ]
    )

    static let tokenResult = TokenResult(
        accessToken: Secret("at-secret-value"),
        accessTokenType: "Bearer",
        expiresOn: 1_700_003_600_000,
        extendedExpiresOn: 1_700_007_200_000,
        grantedScopes: ["User.Read", "Mail.Read"],
        idToken: Secret("id-token-value"),
        clientInfo: "eyJ1aWQiOiJ1aWQtMSJ9",
        account: account,
        tokenSource: .cache,
        correlationId: "c0ffee00-0000-4000-8000-000000000001"
    )

    /// JSON parsed into Foundation objects, for comparing two encodings regardless of key order.
    static func parse(_ data: Data) throws -> NSObject {
        try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]) as? NSObject ?? NSNull()
    }
}
