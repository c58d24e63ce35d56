import BrokerProtocol
import BrokerTestSupport
import Foundation
import Glibc
import Testing

/// Cached answers over the socket, as a connection that asks again and again sees them.
@Suite(.timeLimit(.minutes(1)))
struct RememberedAnswerServerTests {
    private static func request(id: Int, for person: CacheFixtures.Person) -> String {
        #"{"jsonrpc":"2.0","id":\#(id),"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"\#(CacheFixtures.clientId)","authority":"\#(CacheFixtures.authority)","requestedScopes":["https://graph.microsoft.com/User.Read"],"account":{"username":"\#(person.username)"}},"correlationId":"c-\#(person.username)"}}"#
    }

    /// One connection asking for two accounts' tokens in turn, many times over (each line the same but for its id, so
    /// that they are answered from memory), gets each request its own token, id and correlation id: what the
    /// connection keeps of its last answer never answers another request.
    @Test func aConnectionAskingInTurnGetsEachRequestItsOwnToken() async throws {
        try await withTestServer(documents: [CacheFixtures.msalCache(people: [CacheFixtures.ada, CacheFixtures.alan])])
        {
            path in
            let fd = try UnixSocket.connect(path)
            defer { close(fd) }
            let people = [CacheFixtures.ada, CacheFixtures.ada, CacheFixtures.alan, CacheFixtures.ada]
            for id in 1...24 {
                let person = people[id % people.count]
                try await UnixSocket.send(fd, Array((Self.request(id: id, for: person) + "\n").utf8))
                let line = try #require(await UnixSocket.readLines(fd, count: 1).lines.first)
                let answer = try object(line)
                #expect(answer["id"] == .integer(Int64(id)))
                let token = try #require(answer["result"]?.objectValue?["brokerTokenResponse"]?.objectValue)
                // Each person's access token carries a marker of its own (the JWT's claims, in any order).
                let accessToken = try #require(token["accessToken"]?.stringValue)
                let claims = try #require(Base64URL.decode(accessToken.split(separator: ".")[1]))
                // A Bool, so that a failed expectation prints no token.
                let ownToken = String(decoding: claims, as: UTF8.self).contains("AT-SECRET-1-\(person.oid)")
                #expect(ownToken, "\(id)")
                #expect(token["correlationId"] == .string("c-\(person.username)"))
            }
        }
    }
}
