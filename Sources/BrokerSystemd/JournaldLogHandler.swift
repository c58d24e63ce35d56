public import Logging
import Synchronization

/// A swift-log handler that writes structured journal entries (`sd_journal_sendv`): the message, `PRIORITY`, the
/// code location, the logger's label, and every metadata key as a field of its own (`correlation_id` becomes
/// `CORRELATION_ID=`), so `journalctl CORRELATION_ID=…` finds everything a request did.
///
/// Use it when stderr is the journal (``Systemd/stderrIsJournal()``). It never formats a secret: what reaches
/// it is what the broker logs, and the broker logs none.
public struct JournaldLogHandler: LogHandler {
    /// Metadata of this handler.
    public var metadata: Logger.Metadata = [:]
    /// Metadata added to every entry.
    public var metadataProvider: Logger.MetadataProvider?
    /// The lowest level written; a shared ``LogLevelControl`` when one is given.
    public var logLevel: Logger.Level {
        get { control?.level ?? ownLevel }
        set { ownLevel = newValue }
    }

    private var ownLevel: Logger.Level = .info
    private let control: LogLevelControl?
    private let label: String
    private let identifier: String

    /// Creates a handler for a logger labelled `label`, entries tagged `SYSLOG_IDENTIFIER=identifier`; the level
    /// follows `control` when given.
    public init(label: String, identifier: String, control: LogLevelControl? = nil) {
        self.label = label
        self.identifier = identifier
        self.control = control
    }

    /// A metadata value.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// syslog's priorities: debug 7 … critical 2.
    public static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// A journal field name for a metadata key: `[A-Z0-9_]`, at most 64 characters, not starting with `_` or a
    /// digit, and not one of the journal's own fields (those get a `TB_` prefix).
    public static func fieldName(_ key: String) -> String {
        var name = String(key.uppercased().map { $0.isASCII && ($0.isLetter || $0.isNumber) ? $0 : "_" })
        while let first = name.first, first == "_" || first.isNumber { name.removeFirst() }
        if name.isEmpty { name = "FIELD" }
        if reserved.contains(name) { name = "TB_" + name }
        return String(name.prefix(64))
    }

    private static let reserved: Set<String> = [
        "MESSAGE", "MESSAGE_ID", "PRIORITY", "CODE_FILE", "CODE_LINE", "CODE_FUNC", "ERRNO", "SYSLOG_FACILITY",
        "SYSLOG_IDENTIFIER", "SYSLOG_PID", "SYSLOG_TIMESTAMP", "DOCUMENTATION", "TID", "INVOCATION_ID",
        "USER_INVOCATION_ID", "UNIT", "USER_UNIT", "LOGGER",
    ]

    /// The fields of one entry.
    public func fields(for event: LogEvent) -> [String] {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        var fields = [
            "MESSAGE=\(LogSanitizer.clean(event.message.description))", "PRIORITY=\(Self.priority(event.level))",
            "SYSLOG_IDENTIFIER=\(identifier)",
            "CODE_FILE=\(event.file)", "CODE_LINE=\(event.line)", "CODE_FUNC=\(event.function)", "LOGGER=\(label)",
        ]
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) {
            fields.append("\(Self.fieldName(key))=\(LogSanitizer.clean(value))")
        }
        return fields
    }

    /// Writes the entry.
    public func log(event: LogEvent) {
        Systemd.journalSend(fields(for: event))
    }
}

/// A log level shared by every handler and changed at run time (a reload).
public final class LogLevelControl: Sendable {
    private let value: Mutex<Logger.Level>

    /// Starts at `level`.
    public init(_ level: Logger.Level) {
        value = Mutex(level)
    }

    /// The level now.
    public var level: Logger.Level {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}
