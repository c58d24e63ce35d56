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
        let (key, answer) = try StoreAnswer.key { output, count, message in
            tb_secret_service_lookup(record.cacheID, output, count, timeoutMilliseconds, message)
        }
        if let key { return key }
        if answer.code == TB_KEY_NOT_FOUND {
            throw .failed(
                "the keyring holds no key for this cache (item org.tokenbroker.CacheKey, cache \(record.cacheID)): "
                    + "was it deleted, or is this another keyring? nothing was changed"
            )
        }
        throw answer.problem ?? .failed("the Secret Service did not give the key")
    }

    func save(_ key: KeyMemory, into record: inout KeyRecord, passphrase: Passphrase?) throws(KeyStoreProblem) {
        let answer = key.withUnsafeBytes { bytes in
            StoreAnswer { message in
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
        if let problem = answer.problem { throw problem }
    }

    func discard(_ record: KeyRecord) throws(KeyStoreProblem) {
        let answer = StoreAnswer { message in tb_secret_service_clear(record.cacheID, timeoutMilliseconds, message) }
        if let problem = answer.problem { throw problem }
    }

    /// Asks the service to unlock its default collection (on a desktop, the keyring's own prompt).
    func unlock() -> KeyStoreProblem? {
        StoreAnswer { message in tb_secret_service_unlock(timeoutMilliseconds, message) }.problem
    }
}
