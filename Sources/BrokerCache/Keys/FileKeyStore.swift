import Foundation

/// The plain key file, `<state>/cache.key` (0600): the fallback, said as a warning.
struct FileKeyStore: KeyStore {
    /// The key file.
    let url: URL

    var kind: KeyStoreKind { .file }

    func load(_ record: KeyRecord, passphrase: Passphrase?) throws(KeyStoreProblem) -> KeyMemory {
        do {
            guard let key = try KeyFile.load(url) else {
                throw KeyStoreProblem.failed(
                    "the cache key \(url.path) is missing: restore it from a backup (nothing was deleted)"
                )
            }
            return key
        } catch let problem as KeyStoreProblem {
            throw problem
        } catch {
            throw .failed(String(describing: error))
        }
    }

    func save(_ key: KeyMemory, into record: inout KeyRecord, passphrase: Passphrase?) throws(KeyStoreProblem) {
        do {
            if let existing = try KeyFile.load(url) {
                guard existing.matches(key) else {
                    throw KeyStoreProblem.failed(
                        "\(url.path) holds another key: move it away first (it may belong to another cache)"
                    )
                }
                return
            }
            try KeyFile.write(key, to: url)
        } catch let problem as KeyStoreProblem {
            throw problem
        } catch {
            throw .failed(String(describing: error))
        }
    }

    func discard(_ record: KeyRecord) throws(KeyStoreProblem) {
        guard unlink(url.path) == 0 || errno == ENOENT else {
            throw .failed("cannot remove \(url.path): \(String(cString: strerror(errno)))")
        }
        do {
            try Directories.syncDirectory(url.deletingLastPathComponent())
        } catch {
            throw .failed(String(describing: error))
        }
    }
}
