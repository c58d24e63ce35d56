import Glibc

#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// The user's configuration file, `tokenbrokerd.conf`: `key = value` lines, `#` comments.
///
/// The daemon reads it at start, on SIGHUP, and for each interactive sign-in (the browser profiles); the CLI adds
/// browser profiles to it. Every key is optional. Unknown keys and bad values are reported, never fatal: a typo
/// must not keep the broker from starting.
///
///     log-level = debug
///     browser.firefox-private = firefox --private-window
///     system-browser = chromium --new-window
///     key-stores = secret-service tpm file
///     broker1 = off
///
/// Only this file names programs the broker runs: a client of the broker names a profile, never a command.
public struct ConfigurationFile: Sendable {
    /// The file.
    public let url: URL

    /// What the file says.
    public struct Contents: Sendable, Hashable {
        /// `log-level`: `trace`, `debug`, `info`, `notice`, `warning`, `error` or `critical`.
        public var logLevel: String?
        /// `browser.<name> = <command line>`: the programs `customBrowser` may run, by profile name.
        public var browserProfiles: [String: [String]] = [:]
        /// `system-browser = <command line>`: what `systemBrowser` runs, before `$BROWSER` and `xdg-open`.
        public var systemBrowser: [String]?
        /// `key-stores = <names>`: where a new cache key is kept, in the order tried (`secret-service`, `tpm`,
        /// `passphrase`, `file`); a plain key file moves to the first of them ahead of `file` that takes it.
        public var keyStores: [String]?
        /// `broker1 = on|off`: whether the daemon answers Microsoft's Broker1 interface on the session bus (on by
        /// default; `tokenbrokerd --no-bus` turns it off too).
        public var broker1: Bool?
        /// What could not be read, line by line, for the log.
        public var problems: [String] = []

        /// An empty configuration: every setting at its default.
        public init() {}
    }

    /// The names `key-stores` takes.
    public static let keyStoreNames = ["secret-service", "tpm", "passphrase", "file"]

    /// The levels `log-level` takes.
    public static let logLevels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]

    /// `path`, else `$XDG_CONFIG_HOME/tokenbroker/tokenbrokerd.conf`, else `~/.config/tokenbroker/tokenbrokerd.conf`.
    public init(path: String? = nil, environment: [String: String] = ProcessInfo.processInfo.environment) {
        if let path {
            url = URL(filePath: path)
        } else if let config = environment["XDG_CONFIG_HOME"], config.hasPrefix("/") {
            url = URL(filePath: config).appending(path: "tokenbroker/tokenbrokerd.conf")
        } else {
            url = URL(filePath: environment["HOME"] ?? "/").appending(path: ".config/tokenbroker/tokenbrokerd.conf")
        }
    }

    /// Reads the file; a missing file is an empty configuration.
    public func read() -> Contents {
        guard let data = FileManager.default.contents(atPath: url.path) else { return Contents() }
        guard data.count <= 64 * 1024, let text = String(data: data, encoding: .utf8) else {
            var contents = Contents()
            contents.problems.append("not a UTF-8 text file of at most 64 KiB; ignored")
            return contents
        }
        return Self.parse(text)
    }

    /// The settings `text` holds.
    public static func parse(_ text: String) -> Contents {
        var contents = Contents()
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = "line \(index + 1)"
            guard let (key, value) = assignment(raw) else {
                if !isBlank(raw) { contents.problems.append("\(line): expected key = value") }
                continue
            }
            switch key {
            case "log-level":
                if logLevels.contains(value) {
                    contents.logLevel = value
                } else {
                    contents.problems.append("\(line): log-level must be one of \(logLevels.joined(separator: ", "))")
                }
            case "system-browser":
                guard let command = ShellWords.split(value), !command.isEmpty else {
                    contents.problems.append("\(line): system-browser needs a command (an unclosed quote?)")
                    continue
                }
                contents.systemBrowser = command
            case "key-stores":
                let names = value.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "\t" }).map(String.init)
                guard !names.isEmpty, names.allSatisfy(keyStoreNames.contains), Set(names).count == names.count else {
                    contents.problems.append(
                        "\(line): key-stores lists each of \(keyStoreNames.joined(separator: ", ")) at most once"
                    )
                    continue
                }
                contents.keyStores = names
            case "broker1":
                switch value {
                case "on", "yes", "true": contents.broker1 = true
                case "off", "no", "false": contents.broker1 = false
                default: contents.problems.append("\(line): broker1 is on or off")
                }
            case _ where key.hasPrefix("browser."):
                let name = String(key.dropFirst("browser.".count))
                guard isProfileName(name) else {
                    contents.problems.append("\(line): a browser profile name is letters, digits, - and _")
                    continue
                }
                guard let command = ShellWords.split(value), !command.isEmpty else {
                    contents.problems.append("\(line): browser.\(name) needs a command (an unclosed quote?)")
                    continue
                }
                contents.browserProfiles[name] = command
            default:
                contents.problems.append("\(line): unknown key \(key)")
            }
        }
        return contents
    }

    /// Whether `name` can name a browser profile: 1 to 64 letters, digits, `-` and `_`.
    public static func isProfileName(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count)
            && name.unicodeScalars.allSatisfy {
                $0.isASCII && ($0.properties.isAlphabetic || "0123456789-_".unicodeScalars.contains($0))
            }
    }

    /// Sets `browser.<name> = <command>` in the file, replacing that profile's line or adding one, keeping every
    /// other line as it was; the file and its directory are created private when missing.
    ///
    /// The write is atomic (a new file renamed over the old one), so the daemon never reads half a file.
    public func saveBrowserProfile(_ name: String, command: [String]) throws {
        precondition(Self.isProfileName(name), "a checked profile name")
        try set("browser.\(name)", to: command.map(ShellWords.quote).joined(separator: " "))
    }

    /// Sets `system-browser = <command>` in the file, as ``saveBrowserProfile(_:command:)`` does a profile.
    public func saveSystemBrowser(_ command: [String]) throws {
        try set("system-browser", to: command.map(ShellWords.quote).joined(separator: " "))
    }

    /// Sets `key = value`, replacing the key's line or adding one, keeping every other line as it was.
    private func set(_ key: String, to value: String) throws {
        let line = "\(key) = \(value)"
        let existing = FileManager.default.contents(atPath: url.path).flatMap { String(data: $0, encoding: .utf8) }
        var lines = existing.map { $0.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) } ?? []
        if lines.last == "" { lines.removeLast() }
        if let index = lines.firstIndex(where: { Self.assignment(Substring($0))?.key == key }) {
            lines[index] = line
        } else {
            lines.append(line)
        }
        let directory = url.deletingLastPathComponent()
        try FileManager.default.createDirectory(
            at: directory,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        let temporary = directory.appending(path: ".\(url.lastPathComponent).\(getpid()).new")
        guard
            FileManager.default.createFile(
                atPath: temporary.path,
                contents: Data((lines.joined(separator: "\n") + "\n").utf8),
                attributes: [.posixPermissions: 0o600]
            )
        else { throw CocoaError(.fileWriteUnknown) }
        guard rename(temporary.path, url.path) == 0 else {
            unlink(temporary.path)
            throw CocoaError(.fileWriteUnknown)
        }
    }

    private static func assignment(_ raw: Substring) -> (key: String, value: String)? {
        let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        let parts = line.split(separator: "=", maxSplits: 1).map { Self.trimmed($0) }
        guard parts.count == 2, !parts[0].isEmpty else { return nil }
        return (parts[0], parts[1])
    }

    /// `text` without the spaces and tabs around it.
    private static func trimmed(_ text: Substring) -> String {
        let isBlank: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = text.firstIndex(where: { !isBlank($0) }), let last = text.lastIndex(where: { !isBlank($0) })
        else { return "" }
        return String(text[first...last])
    }

    private static func isBlank(_ raw: Substring) -> Bool {
        (raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
            .allSatisfy { $0 == " " || $0 == "\t" || $0 == "\r" }
    }
}
