public import Foundation

/// An exclusive `flock` on the state directory's lock file, held for the daemon's life.
///
/// Two daemons on one cache would each keep their own in-memory view and overwrite each other's tokens;
/// the second one is refused instead.
public final class StateLock: Sendable {
    private let fd: Int32

    /// Takes the lock at `url`, or throws at once if another process holds it.
    public init(_ url: URL) throws {
        let fd = open(url.path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw CacheError(.io, "cannot open the lock \(url.path): \(String(cString: strerror(errno)))")
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw CacheError(
                .io,
                "another tokenbrokerd is using the state directory \(url.deletingLastPathComponent().path)"
            )
        }
        self.fd = fd
    }

    deinit {
        close(fd)
    }
}
