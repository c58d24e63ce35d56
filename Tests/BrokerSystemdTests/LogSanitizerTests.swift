import BrokerTestSupport
import Logging
import Testing

@testable import BrokerSystemd

/// Log values that come from clients (a correlation id, a scope, an executable's path) cannot forge a log line or
/// flood the log: the audit's finding was a correlation id with a newline that printed as a second, made-up entry.
struct LogSanitizerTests {
    @Test(arguments: [
        ("a\nb", "a\\u{a}b"), ("a\r\nb", "a\\u{d}\\u{a}b"), ("tab\there", "tab\\u{9}here"), ("del\u{7F}", "del\\u{7f}"),
        ("c1\u{85}", "c1\\u{85}"), ("ls\u{2028}ps\u{2029}", "ls\\u{2028}ps\\u{2029}"), ("plain é ✓", "plain é ✓"),
    ])
    func controlCharactersAreEscaped(text: String, cleaned: String) {
        #expect(LogSanitizer.clean(text) == cleaned)
    }

    @Test func longValuesAreCut() {
        let cleaned = LogSanitizer.clean(String(repeating: "x", count: 10_000))
        #expect(cleaned == String(repeating: "x", count: LogSanitizer.maximumLength) + "…")
    }

    /// Everything the wrapped handler prints is clean: the message, the event's metadata, and the logger's own
    /// metadata however it was set (the token endpoint sets the client's correlation id on its logger).
    @Test func levelControlledCleansMessageAndEveryMetadata() {
        let capture = LogCapture()
        var logger = Logger(label: "test") { label in
            LevelControlled(capture.handler(label: label), control: LogLevelControl(.debug))
        }
        logger[metadataKey: "correlation_id"] = "id\nforged=1"
        logger.debug(
            "refreshed\nlevel=critical forged line",
            metadata: ["scope": "User.Read\r\nforged=2", "list": ["a\nb"], "nested": ["key": "v\n"]]
        )
        logger.handler.metadata = ["set_whole": "x\ny"]
        logger.info("second")
        let lines = capture.lines(containing: "")
        #expect(lines.count == 2)
        #expect(lines.allSatisfy { !$0.contains("\n") && !$0.contains("\r") }, "\(lines)")
        #expect(lines.first?.contains("correlation_id=id\\u{a}forged=1") == true, "\(lines)")
        #expect(lines.first?.contains("refreshed\\u{a}level=critical") == true, "\(lines)")
        #expect(lines.first?.contains("scope=User.Read\\u{d}\\u{a}forged=2") == true, "\(lines)")
        #expect(lines.last?.contains("set_whole=x\\u{a}y") == true, "\(lines)")
    }

    /// The journal's fields: a field is one `NAME=value` string, and a value with a newline would be taken by
    /// `sd_journal_send` as is, so it is cleaned the same way.
    @Test func journalFieldsAreClean() {
        var handler = JournaldLogHandler(label: "test", identifier: "tokenbrokerd")
        handler[metadataKey: "correlation_id"] = "id\nMESSAGE=forged"
        let fields = handler.fields(
            for: LogEvent(
                level: .info,
                message: "token issued\nPRIORITY=0",
                metadata: ["scope": "a\u{2028}b"],
                source: nil,
                file: #fileID,
                function: #function,
                line: #line
            )
        )
        #expect(fields.allSatisfy { !$0.contains("\n") && !$0.contains("\u{2028}") }, "\(fields)")
        #expect(fields.contains("MESSAGE=token issued\\u{a}PRIORITY=0"))
        #expect(fields.contains("CORRELATION_ID=id\\u{a}MESSAGE=forged"))
    }
}
