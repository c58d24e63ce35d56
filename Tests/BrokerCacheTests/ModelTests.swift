import BrokerCache
import BrokerProtocol
import BrokerTestSupport
import Foundation
import Testing

struct ModelTests {
    /// Every section's entry reads and writes back to the same fields, unknown ones included.
    @Test func entriesRoundTripWithUnknownFields() throws {
        let document = CacheFixtures.msalCache(
            people: [CacheFixtures.ada],
            familyId: "1",
            extraAccessTokenFields: ["requested_claims": .string("{}"), "future_field": .object(["x": .integer(1)])]
        )
        let (entries, skipped) = try MSALCacheDocument.read(Data(CacheFixtures.text(document).utf8))
        #expect(skipped.isEmpty)
        #expect(entries.count == 5)
        let written = try MSALCacheDocument.write(entries)
        #expect(try JSONValue.parse(Array(written)) == document)
    }

    /// Keys are rebuilt from fields the way MSAL Python builds them (never parsed).
    @Test func keysAreMSALPythonKeys() throws {
        let (entries, _) = try MSALCacheDocument.read(Data(CacheFixtures.text(CacheFixtures.msalCache()).utf8))
        let keys = Set(entries.map(\.id.key))
        let home = CacheFixtures.ada.homeAccountId
        #expect(keys.contains("\(home)-login.microsoftonline.com-refreshtoken-\(CacheFixtures.clientId)--"))
        #expect(keys.contains("appmetadata-login.microsoftonline.com-\(CacheFixtures.clientId)"))
        #expect(keys.contains("\(home)-login.microsoftonline.com-\(CacheFixtures.tenant)"))
    }

    /// One bad entry is skipped with its reason; the rest of the document is taken.
    @Test func readsAroundBadEntries() throws {
        let text = """
            {"AccessToken": {"a": {"secret": "x", "home_account_id": "h", "environment": "e", "client_id": "c"},
                             "b": "not an object",
                             "c": {"secret": "x", "home_account_id": "h", "environment": "e", "client_id": "c", "expires_on": "soon"}},
             "Account": {"ok": {"home_account_id": "h", "environment": "e", "realm": "r", "username": "u"}},
             "AppMetadata": [],
             "SomethingNew": {"k": {"v": 1}}}
            """
        let (entries, skipped) = try MSALCacheDocument.read(Data(text.utf8))
        #expect(entries.count == 2)
        #expect(Set(skipped.map(\.entry)) == ["AccessToken/a", "AccessToken/b", "AccessToken/c", "AppMetadata"])
        #expect(skipped.first { $0.entry == "AccessToken/a" }?.reason == "expires_on is missing")
        #expect(skipped.first { $0.entry == "AccessToken/c" }?.reason == "expires_on is not a time in epoch seconds")
        let written = try JSONValue.parse(Array(try MSALCacheDocument.write(entries)))
        #expect(written.objectValue?["SomethingNew"] == .object(["k": .object(["v": .integer(1)])]))
    }

    /// An unknown section's entry with an empty key is skipped: the empty key stands for an unknown section that is
    /// no object, and writing the entry back replaced its whole section (what the fuzzer found).
    @Test func anUnknownSectionsEmptyKeyIsSkippedAndTheRoundTripHolds() throws {
        let text = #"{"SomethingNew": {"": {"a": 1, "b": 2}, "k": {"v": 1}}, "Scalar": 7}"#
        let (entries, skipped) = try MSALCacheDocument.read(Data(text.utf8))
        #expect(skipped.map(\.entry) == ["SomethingNew/"])
        let again = try MSALCacheDocument.read(try MSALCacheDocument.write(entries))
        #expect(Set(again.entries) == Set(entries))
        let written = try JSONValue.parse(Array(try MSALCacheDocument.write(entries)))
        #expect(written.objectValue?["SomethingNew"] == .object(["k": .object(["v": .integer(1)])]))
        #expect(written.objectValue?["Scalar"] == .integer(7))
    }

    /// Times are decimal epoch seconds; other spellings a lenient number parser would take are unreadable, not
    /// "expired".
    @Test(arguments: [
        ("1700000000", 1_700_000_000 as Int64?), ("1700000000.75", 1_700_000_000), ("-5", -5), ("0x10", nil),
        ("1e9", nil), ("inf", nil), ("nan", nil), ("+5", nil), ("1700000000.", nil), (".5", nil), ("", nil),
    ])
    func readsTimesAsDecimalSeconds(text: String, seconds: Int64?) {
        let fields: [String: JSONValue] = [
            "secret": .string("x"), "home_account_id": .string("h"), "environment": .string("e"),
            "client_id": .string("c"), "expires_on": .string(text),
        ]
        let read = try? AccessToken(fields: fields)
        if let seconds {
            #expect(read?.expiresOn == seconds, "\(text)")
        } else if !text.isEmpty {
            #expect(read == nil, "\(text)")
        }
    }

    /// Documents that are not JSON, or not objects of sections, are refused as a whole.
    @Test(arguments: ["", "[]", "{\"AccessToken\": {}, \"AccessToken\": {}}", "{\"a\": 1", "\"text\""])
    func refusesDocumentsThatAreNotCaches(text: String) {
        #expect(throws: CacheError.self) { try MSALCacheDocument.read(Data(text.utf8)) }
    }
}
