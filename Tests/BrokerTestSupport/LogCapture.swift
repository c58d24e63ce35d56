public import Logging
import Synchronization

/// Collects log lines in memory, at every level, so tests can read (and grep) what was logged.
public final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])

    /// An empty capture.
    public init() {}

    /// A logger that writes here, at trace level.
    public func logger(label: String = "test") -> Logger {
        Logger(label: label) { label in Handler(label: label, capture: self) }
    }

    /// A handler that writes here, for a test that wraps it (the level and sanitizing wrapper of the daemon).
    public func handler(label: String = "test") -> Handler {
        Handler(label: label, capture: self)
    }

    /// Everything logged so far, one rendered line per event: level, label, message, metadata.
    public var text: String {
        lines.withLock { $0.joined(separator: "\n") }
    }

    /// The events whose message contains `fragment`.
    public func lines(containing fragment: String) -> [String] {
        lines.withLock { $0.filter { $0.contains(fragment) } }
    }

    fileprivate func append(_ line: String) {
        lines.withLock { $0.append(line) }
    }
}

extension LogCapture {
    /// Renders each event as one entry of the capture.
    public struct Handler: LogHandler {
        let label: String
        let capture: LogCapture
        public var metadata: Logger.Metadata = [:]
        public var logLevel: Logger.Level = .trace

        public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        public func log(event: LogEvent) {
            var merged = metadata
            if let extra = event.metadata { merged.merge(extra) { _, new in new } }
            let fields = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            capture.append("\(event.level) \(label): \(event.message) \(fields)")
        }
    }
}
