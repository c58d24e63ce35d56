public import Foundation

/// Where the broker's socket lives: the one rule the daemon, the CLI and every client share.
public enum SocketLocation {
    /// The environment variable that overrides the socket path.
    public static let overrideVariable = "TOKENBROKER_SOCKET"

    /// The socket's path relative to `$XDG_RUNTIME_DIR`.
    public static let runtimeRelativePath = "tokenbroker/broker.sock"

    /// The path to use: `$TOKENBROKER_SOCKET`, else `$XDG_RUNTIME_DIR/tokenbroker/broker.sock`, else the same under
    /// `/run/user/<uid>` when that directory exists.
    ///
    /// Nil when none applies.
    public static func resolve(
        environment: [String: String] = ProcessInfo.processInfo.environment,
        uid: UInt32 = getuid()
    ) -> String? {
        if let path = environment[overrideVariable], !path.isEmpty {
            return path
        }
        if let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") {
            return runtime + "/" + runtimeRelativePath
        }
        let fallback = "/run/user/\(uid)"
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: fallback, isDirectory: &isDirectory), isDirectory.boolValue {
            return fallback + "/" + runtimeRelativePath
        }
        return nil
    }
}
