public import Foundation

/// A fresh directory under the system temp directory, removed when the value goes away.
///
/// Kept short (socket paths are limited to 107 bytes).
public final class TemporaryDirectory: Sendable {
    /// The directory.
    public let url: URL

    /// Creates the directory (mode 0700).
    public init(prefix: String = "tb") throws {
        let name = "\(prefix)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        url = URL(filePath: NSTemporaryDirectory()).appending(path: name)
        try FileManager.default.createDirectory(
            at: url,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
    }

    /// A path inside the directory.
    public func path(_ component: String) -> String {
        url.appending(path: component).path
    }

    deinit {
        try? FileManager.default.removeItem(at: url)
    }
}
