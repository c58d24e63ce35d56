import BrokerProtocol
import Foundation
import Testing

struct RequestDecoderTests {
    private func decode(_ text: String) -> Result<IncomingRequest, RequestRejection> {
        RequestDecoder().decode(Array(text.utf8))
    }

    /// Every way a message can fail to be a request gets the JSON-RPC error it calls for, with the id when
    /// one could be read.
    @Test(arguments: [
        ("not json", ErrorCode.parseError, nil as RequestID?),
        ("\u{00}\u{FF}binary", .parseError, nil),
        ("[1,2]", .invalidRequest, nil),
        ("42", .invalidRequest, nil),
        (#"{"id":1,"method":"getStatus"}"#, .invalidRequest, .number(1)),
        (#"{"method":"getStatus"}"#, .invalidRequest, nil),
        (#"{"jsonrpc":"1.0","id":1,"method":"getStatus"}"#, .invalidRequest, .number(1)),
        (#"{"jsonrpc":"2.0","id":{},"method":"getStatus"}"#, .invalidRequest, nil),
        (#"{"jsonrpc":"2.0","id":2,"method":7}"#, .invalidRequest, .number(2)),
        (#"{"jsonrpc":"2.0","id":"x","method":"nope"}"#, .methodNotFound, .string("x")),
        (#"{"jsonrpc":"2.0","id":3,"method":"getAccount"}"#, .invalidParams, .number(3)),
        (#"{"jsonrpc":"2.0","id":4,"method":"acquireTokenSilently","params":[]}"#, .invalidParams, .number(4)),
        (
            #"{"jsonrpc":"2.0","id":5,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":9}}}"#,
            .invalidParams, .number(5)
        ),
        (#"{"jsonrpc":"2.0","id":6,"method":"getStatus","id":7}"#, .parseError, nil),
    ])
    func classifiesBadMessages(text: String, code: ErrorCode, id: RequestID?) throws {
        guard case .failure(let rejection) = decode(text) else {
            Issue.record("accepted \(text)")
            return
        }
        #expect(rejection.error.errorCode == code)
        #expect(rejection.error.code == code.rpcCode)
        #expect(rejection.id == id)
    }

    /// A params error names the field, and never echoes the value sent (it could be a misplaced token).
    @Test func invalidParamsNameTheFieldNotTheValue() throws {
        let text =
            #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"app","requestedScopes":"secret-looking-value"}}}"#
        guard case .failure(let rejection) = decode(text) else {
            Issue.record("accepted")
            return
        }
        #expect(rejection.error.data?.field == "params.authParameters.requestedScopes")
        #expect(rejection.error.message.contains("params.authParameters.requestedScopes"))
        #expect(!rejection.error.message.contains("secret-looking-value"))
    }

    /// A missing required field is named with its full path.
    @Test func missingFieldsAreNamed() throws {
        guard
            case .failure(let rejection) = decode(
                #"{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{}}}"#
            )
        else {
            Issue.record("accepted")
            return
        }
        #expect(rejection.error.data?.field == "params.authParameters.clientId")
    }

    /// Methods whose params are all optional may omit them; a request without id is a notification.
    @Test func acceptsOmittedOptionalParamsAndNotifications() throws {
        guard case .success(let status) = decode(#"{"jsonrpc":"2.0","id":1,"method":"getStatus"}"#),
            status.params(of: Methods.GetStatus.self) != nil
        else {
            Issue.record("getStatus refused")
            return
        }
        guard case .success(let notification) = decode(#"{"jsonrpc":"2.0","method":"getAccounts","params":null}"#)
        else {
            Issue.record("notification refused")
            return
        }
        #expect(notification.id == nil)
        guard case .failure(let rejection) = decode(#"{"jsonrpc":"2.0","method":"nope"}"#) else {
            Issue.record("accepted")
            return
        }
        #expect(rejection.isNotification)
    }

    /// Ids are integers or strings: `"id": null` is refused as invalid_request with id null (an id-less error
    /// must mean the connection, never a request), and a malformed message without an id is answered too.
    @Test func nullIdsAreRefusedAndMalformedNotificationsAnswered() throws {
        guard case .failure(let refusal) = decode(#"{"jsonrpc":"2.0","id":null,"method":"getStatus"}"#) else {
            Issue.record("a null id was accepted")
            return
        }
        #expect(refusal.error.errorCode == .invalidRequest)
        #expect(refusal.id == nil)
        #expect(!refusal.isNotification)
        guard case .failure(let rejection) = decode(#"{"method":"getStatus"}"#) else {
            Issue.record("accepted")
            return
        }
        #expect(!rejection.isNotification)
    }

    /// A call without a correlation id gets one made up, once; one that has one keeps it.
    @Test func correlationIdsAreFilledInOnce() throws {
        guard case .success(var request) = decode(#"{"jsonrpc":"2.0","id":1,"method":"getAccounts"}"#) else {
            Issue.record("refused")
            return
        }
        let made = request.call.ensureCorrelationId()
        #expect(UUID(uuidString: made) != nil)
        #expect(request.call.correlationId == made)
        #expect(request.call.ensureCorrelationId() == made)
        guard
            case .success(var given) = decode(
                #"{"jsonrpc":"2.0","id":1,"method":"getStatus","params":{"correlationId":"mine"}}"#
            )
        else {
            Issue.record("refused")
            return
        }
        #expect(given.call.ensureCorrelationId() == "mine")
    }

    /// A parse error says what is wrong with the text, and where.
    @Test(arguments: [
        (#"{"jsonrpc":"2.0","id":6,"method":"getStatus","id":7}"#, "duplicate key \"id\""),
        ("\u{FEFF}{}", "byte-order mark"),
        (String(repeating: "[", count: 200) + String(repeating: "]", count: 200), "nested deeper than 128"),
        ("{\"a\":\"\u{01}\"}", "control character"),
        ("{\"a\":1,}", "expected a quoted key"),
        ("", "unexpected end"),
    ])
    func parseErrorsSayWhatIsWrong(text: String, detail: String) throws {
        guard case .failure(let rejection) = decode(text) else {
            Issue.record("accepted \(text)")
            return
        }
        #expect(rejection.error.errorCode == .parseError)
        #expect(rejection.error.message.hasPrefix("not valid JSON: "), "\(rejection.error.message)")
        #expect(rejection.error.message.contains(detail), "\(rejection.error.message)")
        #expect(rejection.error.message.contains(" at byte "), "\(rejection.error.message)")
    }

    /// A value outside a closed set lists the values allowed, a number that is not an integer says so, and neither
    /// repeats the value sent.
    @Test(arguments: [
        (
            #"{"acquireTokenInteractively":{"authParameters":{"clientId":"a"},"webviewType":"firefox-secret"}}"#,
            "params.webviewType: expected one of default, systemBrowser, customBrowser, embedded, deviceCode"
        ),
        (
            #"{"exportCache":{"format":"xml-secret"}}"#,
            "params.format: expected one of msal, adal"
        ),
        (
            #"{"acquireTokenInteractively":{"authParameters":{"clientId":"a"},"timeoutSeconds":30.0}}"#,
            "params.timeoutSeconds: expected an integer, written without a fraction or an exponent"
        ),
        (
            #"{"acquireTokenInteractively":{"authParameters":{"clientId":"a"},"timeoutSeconds":3e1}}"#,
            "params.timeoutSeconds: expected an integer, written without a fraction or an exponent"
        ),
        (
            #"{"acquireTokenInteractively":{"authParameters":{"clientId":"a"},"timeoutSeconds":99999999999999999999}}"#,
            "params.timeoutSeconds: expected an integer from"
        ),
    ])
    func valueErrorsNameTheRule(call: String, message: String) throws {
        // {"<method>": params} → a request
        let object = try #require(try JSONValue.parse(Array(call.utf8)).objectValue)
        let (method, _) = try #require(object.first)
        let params = String(call.dropFirst(method.count + 4).dropLast())
        let text = #"{"jsonrpc":"2.0","id":1,"method":""# + method + #"","params":"# + params + "}"
        guard case .failure(let rejection) = decode(text) else {
            Issue.record("accepted \(text)")
            return
        }
        #expect(rejection.error.errorCode == .invalidParams)
        #expect(rejection.error.message.hasPrefix(message), "\(rejection.error.message)")
        #expect(!rejection.error.message.contains("secret"))
        #expect(!rejection.error.message.contains("30.0") && !rejection.error.message.contains("3e1"))
    }

    /// A correlation id goes into an HTTP header and log lines: no control character, else invalid_params, also on
    /// the silent request's own reader.
    @Test(arguments: [#"a\nb"#, #"tab\there"#, "nel\u{85}", #"x\u2028y"#, #"del\u007f"#, "raw\u{7F}"])
    func correlationIdsHoldNoControlCharacter(correlationId: String) throws {
        for method in ["getStatus", "acquireTokenSilently"] {
            let params =
                method == "getStatus"
                ? #"{"correlationId":""# + correlationId + #""}"#
                : #"{"authParameters":{"clientId":"c","requestedScopes":["s"]},"correlationId":""# + correlationId
                    + #""}"#
            let line = #"{"jsonrpc":"2.0","id":1,"method":""# + method + #"","params":"# + params + "}"
            guard case .failure(let refused) = decode(line) else {
                Issue.record("\(method) took the correlation id \(correlationId)")
                continue
            }
            #expect(refused.error.errorCode == .invalidParams)
            #expect(refused.error.data?.field == "params.correlationId")
            #expect(SilentRequestReader.read(Array(line.utf8)) == nil)
        }
    }

    /// Strings the broker echoes are bounded: a correlation id over 256 bytes is invalid_params, a string id over
    /// 256 bytes invalid_request (with id null); 256 bytes pass.
    @Test func echoedStringsAreBounded() throws {
        let long = String(repeating: "c", count: 257)
        let fits = String(repeating: "c", count: 256)
        guard
            case .failure(let tooLong) = decode(
                #"{"jsonrpc":"2.0","id":1,"method":"getStatus","params":{"correlationId":""# + long + #""}}"#
            )
        else {
            Issue.record("a 257-byte correlation id was accepted")
            return
        }
        #expect(tooLong.error.errorCode == .invalidParams)
        #expect(tooLong.error.data?.field == "params.correlationId")
        #expect(!tooLong.error.message.contains(long))
        guard
            case .success = decode(
                #"{"jsonrpc":"2.0","id":1,"method":"getStatus","params":{"correlationId":""# + fits + #""}}"#
            )
        else {
            Issue.record("a 256-byte correlation id was refused")
            return
        }
        guard case .failure(let longID) = decode(#"{"jsonrpc":"2.0","id":""# + long + #"","method":"getStatus"}"#)
        else {
            Issue.record("a 257-byte string id was accepted")
            return
        }
        #expect(longID.error.errorCode == .invalidRequest)
        #expect(longID.id == nil)
    }

    /// Unknown members are ignored: a newer client's extra fields do not break an older broker.
    @Test func ignoresUnknownMembers() throws {
        let text =
            #"{"jsonrpc":"2.0","id":1,"method":"getAccount","params":{"username":"ada@contoso.com","future":{"x":1}},"extra":true}"#
        guard case .success(let request) = decode(text), let params = request.params(of: Methods.GetAccount.self) else {
            Issue.record("refused")
            return
        }
        #expect(params.username == "ada@contoso.com")
    }
}
