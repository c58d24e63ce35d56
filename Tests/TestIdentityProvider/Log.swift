import Foundation

/// Log lines on standard error; standard output carries only the one start-up line.
enum Log {
    /// Writes one line to standard error, prefixed with the time and the program name.
    static func info(_ message: String) {
        let stamp = Date().formatted(.iso8601)
        FileHandle.standardError.write(Data("\(stamp) tokenbroker-test-idp: \(message)\n".utf8))
    }
}
