import BrokerSystemd
import Foundation
import Logging

/// The daemon's configuration file: `key = value` lines, `#` comments.
///
/// Read at start and on SIGHUP.
///
/// The key read is `log-level`; the command line still wins over it. Unknown keys and bad values are reported,
/// never fatal: a typo must not keep the broker from starting.
struct ConfigurationFile: Sendable {
    /// The file.
    let url: URL

    /// What the file says.
    struct Contents: Sendable {
        var logLevel: String?
        var problems: [String] = []
    }

    /// `path`, else `$XDG_CONFIG_HOME/tokenbroker/tokenbrokerd.conf`, else `~/.config/tokenbroker/tokenbrokerd.conf`.
    init(path: String?, environment: [String: String]) {
        if let path {
            url = URL(filePath: path)
        } else if let config = environment["XDG_CONFIG_HOME"], config.hasPrefix("/") {
            url = URL(filePath: config).appending(path: "tokenbroker/tokenbrokerd.conf")
        } else {
            url = URL(filePath: environment["HOME"] ?? "/").appending(path: ".config/tokenbroker/tokenbrokerd.conf")
        }
    }

    /// Reads the file; a missing file is an empty configuration.
    func read() -> Contents {
        var contents = Contents()
        guard let data = FileManager.default.contents(atPath: url.path) else { return contents }
        guard data.count <= 64 * 1024, let text = String(data: data, encoding: .utf8) else {
            contents.problems.append("not a UTF-8 text file of at most 64 KiB; ignored")
            return contents
        }
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty else { continue }
            let parts = trimmed.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, !parts[0].isEmpty else {
                contents.problems.append("line \(index + 1): expected key = value")
                continue
            }
            switch parts[0] {
            case "log-level":
                if Logger.Level(rawValue: parts[1]) != nil {
                    contents.logLevel = parts[1]
                } else {
                    contents.problems.append(
                        "line \(index + 1): log-level must be trace, debug, info, notice, warning, error or critical"
                    )
                }
            default:
                contents.problems.append("line \(index + 1): unknown key \(parts[0])")
            }
        }
        return contents
    }
}

/// A log handler whose level follows a shared ``LogLevelControl`` (so a reload changes it everywhere).
struct LevelControlled<Handler: LogHandler>: LogHandler {
    var handler: Handler
    let control: LogLevelControl

    init(_ handler: Handler, control: LogLevelControl) {
        self.handler = handler
        self.control = control
    }

    var logLevel: Logger.Level {
        get { control.level }
        set { control.level = newValue }
    }

    var metadata: Logger.Metadata {
        get { handler.metadata }
        set { handler.metadata = newValue }
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { handler.metadataProvider }
        set { handler.metadataProvider = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { handler[metadataKey: key] }
        set { handler[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        handler.log(event: event)
    }
}
