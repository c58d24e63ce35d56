import CKeyStores
import Foundation

/// The key as one item of the schema `org.tokenbroker.CacheKey` in the Secret Service's default collection
/// (GNOME Keyring, KWallet, KeePassXC), through libsecret on the session bus.
///
/// A locked collection is reported as locked and waited for: the broker never prompts from the background and
/// never answers a locked keyring by making a second key.
struct SecretServiceKeyStore: KeyStore {
    /// How long one call may take before the store counts as unavailable.
    var timeoutMilliseconds: Int32 = 5_000

    var kind: KeyStoreKind { .secretService }

    func load(_ record: KeyRecord, passphrase: Passphrase?) throws(KeyStoreProblem) -> KeyMemory {
        var status = (code: TB_KEY_FAILED, message: String?.none)
        let key: KeyMemory?
        do {
            key = try KeyMemory.filled { output in
                status = withMessage { message in
                    tb_secret_service_lookup(
                        record.cacheID,
                        output.baseAddress?.assumingMemoryBound(to: UInt8.self),
                        output.count,
                        timeoutMilliseconds,
                        message
                    )
                }
                return status.code == TB_KEY_OK
            }
        } catch {
            throw .failed("cannot reserve memory for the cache key")
        }
        if let key { return key }
        if status.code == TB_KEY_NOT_FOUND {
            throw .failed(
                "the keyring holds no key for this cache (item org.tokenbroker.CacheKey, cache \(record.cacheID)): "
                    + "was it deleted, or is this another keyring? nothing was changed"
            )
        }
        throw Self.problem(status) ?? .failed("the Secret Service did not give the key")
    }

    func save(_ key: KeyMemory, into record: inout KeyRecord, passphrase: Passphrase?) throws(KeyStoreProblem) {
        let status = key.withUnsafeBytes { bytes in
            withMessage { message in
                tb_secret_service_store(
                    record.cacheID,
                    "tokenbroker cache key",
                    bytes.baseAddress?.assumingMemoryBound(to: UInt8.self),
                    bytes.count,
                    timeoutMilliseconds,
                    message
                )
            }
        }
        if let problem = Self.problem(status) { throw problem }
    }

    func discard(_ record: KeyRecord) throws(KeyStoreProblem) {
        let status = withMessage { message in tb_secret_service_clear(record.cacheID, timeoutMilliseconds, message) }
        if let problem = Self.problem(status) { throw problem }
    }

    /// Asks the service to unlock its default collection (on a desktop, the keyring's own prompt).
    func unlock() -> KeyStoreProblem? {
        Self.problem(withMessage { message in tb_secret_service_unlock(timeoutMilliseconds, message) })
    }

    /// Nil for success; the problem a status names otherwise.
    static func problem(_ status: (code: tb_key_status, message: String?)) -> KeyStoreProblem? {
        let reason = status.message ?? "the Secret Service failed"
        switch status.code {
        case TB_KEY_OK: return nil
        case TB_KEY_LOCKED: return .locked("the keyring is locked: \(reason)")
        case TB_KEY_UNAVAILABLE: return .unavailable(reason)
        default: return .failed(reason)
        }
    }
}

/// Runs a C call of CKeyStores that may set a malloc'd message; returns its status and the message.
func withMessage(
    _ call: (UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> tb_key_status
) -> (
    code: tb_key_status, message: String?
) {
    var message: UnsafeMutablePointer<CChar>?
    let code = call(&message)
    defer { free(message) }
    return (code, message.map { String(cString: $0) })
}
