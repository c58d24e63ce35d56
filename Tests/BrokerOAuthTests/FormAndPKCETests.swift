import BrokerOAuth
import BrokerProtocol
import Foundation
import Testing

@Suite struct FormAndPKCETests {
    @Test func encodesEverythingButUnreservedCharacters() {
        var form = FormBody()
        form.add("scope", "openid https://graph.microsoft.com/User.Read")
        form.add("weird", "a+b&c=d é~._-")
        form.add("skipped", nil as String?)
        #expect(
            form.encodedString()
                == "scope=openid%20https%3A%2F%2Fgraph.microsoft.com%2FUser.Read&weird=a%2Bb%26c%3Dd%20%C3%A9~._-"
        )
        let parsed = FormBody.parse(form.encodedString())
        #expect(parsed?.map(\.value) == ["openid https://graph.microsoft.com/User.Read", "a+b&c=d é~._-"])
    }

    /// Each of the 128 ASCII characters, and a few beyond, as Foundation escapes them for the same unreserved set:
    /// alone, and at every offset of the first three of the sixteen-byte runs the encoder copies whole, among
    /// unreserved characters of every kind.
    @Test func encodesEachCharacterAsFoundationDoes() {
        var unreserved = CharacterSet(charactersIn: "-._~")
        unreserved.insert(charactersIn: "a"..."z")
        unreserved.insert(charactersIn: "A"..."Z")
        unreserved.insert(charactersIn: "0"..."9")
        let characters = (0..<128).map { String(UnicodeScalar(UInt8($0))) } + ["é", "€", "𝄞"]
        let plain = Array(String(repeating: "azAZ09-._~", count: 6))
        var texts = characters + [String(repeating: "a b", count: 50)]
        for offset in 0..<48 {
            texts += characters.map { String(plain[..<offset]) + $0 + String(plain[offset..<56]) }
        }
        for text in texts {
            var form = FormBody()
            form.add("v", text)
            #expect(
                form.encodedString() == "v=" + (text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? "")
            )
        }
    }

    @Test func describesFieldNamesOnly() {
        var form = FormBody()
        form.add("refresh_token", secret: Secret("rt-secret-value"))
        #expect("\(form)" == "FormBody(refresh_token)")
        #expect(!String(reflecting: form).contains("rt-secret-value"))
    }

    @Test func parsesQueriesAndRefusesBrokenEscapes() {
        #expect(FormBody.parse("code=abc&state=x+y%21")?.map(\.value) == ["abc", "x y!"])
        #expect(FormBody.parse("code=%zz") == nil)
        #expect(FormBody.parse("")?.isEmpty == true)
    }

    /// RFC 7636 appendix B.
    @Test func derivesTheRFCChallenge() {
        let pkce = PKCE(verifier: Secret("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"))
        #expect(pkce.challenge == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
    }

    @Test func makesFreshUnguessableValues() {
        let values = (0..<100).map { _ in RandomToken.make() }
        #expect(Set(values).count == 100)
        #expect(values.allSatisfy { $0.count == 43 })
        let pkce = PKCE()
        #expect(pkce.verifier.reveal().count == 43)
        #expect(PKCE(verifier: pkce.verifier).challenge == pkce.challenge)
    }
}
