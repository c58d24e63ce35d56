#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif
#if canImport(Glibc)
public import Glibc
#endif

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
        var info = stat()
        if stat(fallback, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR {
            return fallback + "/" + runtimeRelativePath
        }
        return nil
    }
}
