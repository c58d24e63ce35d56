public import Logging

/// Makes log values safe to print one entry per line: control characters escaped, long values cut.
///
/// Some values come from clients (a correlation id, a scope, an executable's path): a newline in one must not
/// start what looks like another log line (a forged audit entry), and a megabyte in one must not flood the log.
public enum LogSanitizer {
    /// The longest value kept, in characters; longer ones are cut and marked with `…`.
    public static let maximumLength = 512

    /// `text` with every control character (C0, DEL, C1, and the Unicode line and paragraph separators) written as
    /// `\u{…}`, and at most ``maximumLength`` characters.
    public static func clean(_ text: String) -> String {
        let needsWork =
            text.utf8.count > maximumLength
            || text.unicodeScalars.contains { isControl($0) }
        guard needsWork else { return text }
        var out = String.UnicodeScalarView()
        var count = 0
        for scalar in text.unicodeScalars {
            guard count < maximumLength else {
                out.append("…")
                break
            }
            if isControl(scalar) {
                out.append(contentsOf: "\\u{\(String(scalar.value, radix: 16))}".unicodeScalars)
            } else {
                out.append(scalar)
            }
            count += 1
        }
        return String(out)
    }

    /// A metadata value with every string in it cleaned.
    public static func clean(_ value: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch value {
        case .string(let text): .string(clean(text))
        case .stringConvertible(let convertible): .string(clean(convertible.description))
        case .array(let values): .array(values.prefix(64).map(clean))
        case .dictionary(let values): .dictionary(values.mapValues(clean))
        }
    }

    /// Every value of `metadata` cleaned.
    public static func clean(_ metadata: Logger.Metadata) -> Logger.Metadata {
        metadata.mapValues(clean)
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar.value == 0x2028 || scalar.value == 0x2029
    }
}

/// A log handler whose level follows a shared ``LogLevelControl`` (so a reload changes it everywhere), and whose
/// messages and metadata are made safe by ``LogSanitizer`` before the wrapped handler prints them.
public struct LevelControlled<Handler: LogHandler>: LogHandler {
    /// The handler that prints.
    public var handler: Handler
    private let control: LogLevelControl

    /// Wraps `handler`; its level follows `control`.
    public init(_ handler: Handler, control: LogLevelControl) {
        self.handler = handler
        self.control = control
    }

    /// The shared level.
    public var logLevel: Logger.Level {
        get { control.level }
        set { control.level = newValue }
    }

    /// The wrapped handler's metadata, cleaned as it is set (a logger's metadata may hold a client's value too).
    public var metadata: Logger.Metadata {
        get { handler.metadata }
        set { handler.metadata = LogSanitizer.clean(newValue) }
    }

    /// The wrapped handler's metadata provider.
    public var metadataProvider: Logger.MetadataProvider? {
        get { handler.metadataProvider }
        set { handler.metadataProvider = newValue }
    }

    /// A metadata value of the wrapped handler, cleaned as it is set.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { handler[metadataKey: key] }
        set { handler[metadataKey: key] = newValue.map(LogSanitizer.clean) }
    }

    /// Cleans the message and the event's metadata, then hands the event on.
    public func log(event: LogEvent) {
        var event = event
        event.message = "\(LogSanitizer.clean(event.message.description))"
        event.metadata = event.metadata.map(LogSanitizer.clean)
        handler.log(event: event)
    }
}
