import ArgumentParser
import BrokerCache
import BrokerClient
import BrokerCore
import BrokerProtocol
import Foundation
import Logging

/// A cache of `tokens` access tokens: ten client ids per account, fake JWTs of a realistic size.
enum SyntheticCache {
    static let tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"
    static let environment = "login.microsoftonline.com"
    static let scopes = "https://graph.microsoft.com/Mail.Read https://graph.microsoft.com/User.Read"

    static func oid(_ account: Int) -> String { String(format: "00000000-0000-4000-8000-%012d", account) }
    static func clientId(_ client: Int) -> String { String(format: "11111111-0000-4000-8000-%012d", client) }

    static func jwt(_ claims: [String: JSONValue], padding: Int) -> String {
        var claims = claims
        claims["pad"] = .string(String(repeating: "A", count: padding))
        let header = Base64URL.encode(Data(#"{"alg":"RS256","typ":"JWT","kid":"bench"}"#.utf8))
        let body = Base64URL.encode((try? WireEncoder().encode(JSONValue.object(claims))) ?? [])
        return "\(header).\(body).\(String(repeating: "s", count: 342))"
    }

    static func entries(tokens: Int) -> [CacheEntry] {
        let accounts = max(1, tokens / 10)
        let expires = Int64(Date().timeIntervalSince1970) + 86_400
        var entries: [CacheEntry] = []
        for account in 0..<accounts {
            let home = "\(oid(account)).\(tenant)"
            entries.append(
                .account(
                    AccountEntry(
                        homeAccountId: home,
                        environment: environment,
                        realm: tenant,
                        localAccountId: oid(account),
                        username: "user\(account)@contoso.com",
                        accountSource: "authorization_code"
                    )
                )
            )
            entries.append(
                .idToken(
                    IdToken(
                        homeAccountId: home,
                        environment: environment,
                        realm: tenant,
                        clientId: clientId(0),
                        secret: Secret(
                            jwt(
                                [
                                    "oid": .string(oid(account)), "tid": .string(tenant),
                                    "preferred_username": .string("user\(account)@contoso.com"),
                                    "name": .string("User \(account)"),
                                ],
                                padding: 300
                            )
                        )
                    )
                )
            )
        }
        for token in 0..<tokens {
            let account = token % accounts
            entries.append(
                .accessToken(
                    AccessToken(
                        homeAccountId: "\(oid(account)).\(tenant)",
                        environment: environment,
                        clientId: clientId(token / accounts),
                        realm: tenant,
                        target: scopes,
                        secret: Secret(
                            jwt(
                                ["aud": .string("https://graph.microsoft.com"), "oid": .string(oid(account))],
                                padding: 900
                            )
                        ),
                        cachedAt: expires - 86_400,
                        expiresOn: expires,
                        extendedExpiresOn: expires
                    )
                )
            )
        }
        return entries
    }

    /// The request line for the first account's first client's token.
    static func request() throws -> [UInt8] {
        let params = AcquireTokenSilentlyParams(
            authParameters: AuthParameters(
                clientId: clientId(0),
                authority: "https://login.microsoftonline.com/\(tenant)",
                requestedScopes: ["https://graph.microsoft.com/User.Read"],
                account: AccountSelector(identifier: "\(oid(0)).\(tenant)")
            ),
            correlationId: "6f1c2b9a-3d4e-4f50-8a61-7b2c3d4e5f60"
        )
        return try WireEncoder().encode(
            Request(id: .number(1), method: Methods.AcquireTokenSilently.name, params: params)
        )
    }
}

struct Seed: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Import a synthetic cache into a running broker and write the matching request line."
    )

    @Option(help: "The broker's socket.") var socket: String
    @Option(help: "How many access tokens.") var tokens: Int = 10
    @Option(help: "Where to write the acquireTokenSilently request line.") var requestFile: String

    func run() async throws {
        let document = try MSALCacheDocument.write(SyntheticCache.entries(tokens: tokens))
        let broker = try await Broker.connect(socketPath: socket)
        let imported = try await broker.importCache(Secret(String(decoding: document, as: UTF8.self)))
        await broker.close()
        try Data(try SyntheticCache.request()).write(to: URL(filePath: requestFile))
        report(["kind": "seed", "tokens": tokens, "imported": imported.imported.accessTokens])
    }
}

/// The cost of the cache lookup alone (in process, no socket): what stays flat from 10 to 10,000 tokens.
struct Lookup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Time TokenBroker.cachedToken in process.")

    @Option(help: "How many access tokens in the cache.") var tokens: Int = 10
    @Option(help: "Timed lookups.") var count: Int = 200_000
    @Option(
        help: """
            The cache's store in this state directory (created, filled, left there): the daemon's SQLite store, which \
            leaves access tokens' secrets on disk, so each lookup also reads one. Without it, memory only.
            """
    )
    var stateDirectory: String?

    func run() async throws {
        LoggingSystem.bootstrap { _ in SwiftLogNoOpLogHandler() }
        let entries = SyntheticCache.entries(tokens: tokens)
        let cache: TokenCache
        if let stateDirectory {
            let location = CacheLocation(stateDirectory: URL(filePath: stateDirectory))
            try await TokenCache(store: try location.openStore()).commit(CacheChanges(upserts: entries))
            cache = try await TokenCache(store: try location.openStore())
        } else {
            cache = try await TokenCache(store: MemoryStore(entries))
        }
        let broker = TokenBroker(cache: cache, logger: Logger(label: "bench"))
        let params = try WireDecoder().decode(
            Request<AcquireTokenSilentlyParams>.Decoded.self,
            from: try SyntheticCache.request()
        ).params
        let caller = Caller(pid: getpid(), uid: getuid(), gid: getgid(), executable: nil)
        // The first answer reads the token's secret from the store (off the caller's thread), as in the daemon.
        _ = try await broker.acquireTokenSilently(params, caller: caller)
        guard try broker.cachedToken(params, caller: caller) != nil else { throw ValidationErrorText("no token found") }
        for _ in 0..<5_000 { _ = try broker.cachedToken(params, caller: caller) }
        let start = now()
        for _ in 0..<count { _ = try broker.cachedToken(params, caller: caller) }
        let perCall = Double(now() - start) / Double(count) / 1000
        report([
            "kind": "lookup", "tokens": tokens, "store": stateDirectory == nil ? "memory" : "sqlite",
            "us_per_lookup": perCall,
        ])
    }
}

extension Request {
    /// Decoding a request line back into its params, for the in-process lookup.
    struct Decoded: Decodable {
        let params: AcquireTokenSilentlyParams
    }
}

/// Durable storage is not what the lookup benchmark measures: entries live in memory only.
final class MemoryStore: TokenStore {
    private let entries: [CacheEntry]
    private let writer = DispatchQueue(label: "MemoryStore.writer")

    init(_ entries: [CacheEntry]) {
        self.entries = entries
    }

    func loadAll() async throws -> StoredEntries {
        StoredEntries(entries: entries)
    }

    func enqueueCommit(
        preparing changes: @escaping @Sendable () -> CacheChanges,
        afterCommit: @escaping @Sendable () -> Void,
        completion: @escaping @Sendable ((any Error)?) -> Void
    ) {
        writer.async {
            afterCommit()
            completion(nil)
        }
    }
}
