public import Foundation

/// The sealing key's file: 32 random bytes, mode 0600, in a 0700 directory, owned by the user.
///
/// The key is never recreated over an existing database: losing it would make every sealed token unreadable,
/// so the caller decides (``TokenCache`` refuses to start and says what to do).
public enum KeyFile {
    /// The key in `url`, or nil when the file does not exist.
    ///
    /// Refuses a file others can read or that another user owns, as ssh refuses a private key.
    public static func load(_ url: URL) throws -> KeyMemory? {
        let path = url.path
        var info = stat()
        guard lstat(path, &info) == 0 else {
            if errno == ENOENT { return nil }
            throw CacheError(.io, "cannot read the cache key \(path): \(String(cString: strerror(errno)))")
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            throw CacheError(.insecure, "the cache key \(path) is not a regular file")
        }
        guard info.st_uid == getuid() else {
            throw CacheError(.insecure, "the cache key \(path) belongs to another user")
        }
        guard info.st_mode & 0o077 == 0 else {
            throw CacheError(.insecure, "the cache key \(path) is readable by others; run: chmod 600 \(path)")
        }
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else {
            throw CacheError(.io, "cannot read the cache key \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        guard let key = try KeyMemory.read(from: fd) else {
            throw CacheError(.corrupt, "the cache key \(path) is not 32 bytes long")
        }
        return key
    }

    /// Creates a new random key at `url` (and its 0700 directory); fails if the file already exists.
    public static func create(_ url: URL) throws -> KeyMemory {
        let key = try KeyMemory.random()
        try write(key, to: url)
        return key
    }

    /// Writes `key` to a new file at `url` (and its 0700 directory), synced; fails if the file already exists.
    static func write(_ key: KeyMemory, to url: URL) throws {
        try Directories.ensurePrivateDirectory(url.deletingLastPathComponent())
        let fd = open(url.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw CacheError(.io, "cannot create the cache key \(url.path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        let written = key.withUnsafeBytes { bytes in Glibc.write(fd, bytes.baseAddress, bytes.count) }
        guard written == KeyMemory.length, fsync(fd) == 0 else {
            unlink(url.path)
            throw CacheError(.io, "cannot write the cache key \(url.path): \(String(cString: strerror(errno)))")
        }
        try Directories.syncDirectory(url.deletingLastPathComponent())
    }
}

/// Private directories for the state: created 0700, refused when others can enter them.
public enum Directories {
    /// Creates `url` (and parents) with mode 0700 if missing; checks an existing one is ours and private.
    public static func ensurePrivateDirectory(_ url: URL) throws {
        let path = url.path
        var info = stat()
        if lstat(path, &info) != 0 {
            do {
                try FileManager.default.createDirectory(
                    at: url,
                    withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o700]
                )
            } catch {
                throw CacheError(.io, "cannot create \(path)", underlying: error)
            }
            guard lstat(path, &info) == 0 else { throw CacheError(.io, "cannot create \(path)") }
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else { throw CacheError(.insecure, "\(path) is not a directory") }
        guard info.st_uid == getuid() else { throw CacheError(.insecure, "\(path) belongs to another user") }
        if info.st_mode & 0o077 != 0 {
            guard chmod(path, 0o700) == 0 else {
                throw CacheError(.insecure, "\(path) is open to others and cannot be made private")
            }
        }
    }

    /// fsyncs a directory, so a file just created in it survives power loss.
    public static func syncDirectory(_ url: URL) throws {
        let fd = open(url.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw CacheError(.io, "cannot open \(url.path)") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw CacheError(.io, "cannot sync \(url.path)") }
    }
}
