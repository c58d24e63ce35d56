import CArgon2
import Crypto
import Foundation

/// The key wrapped with AES-256-GCM under a key stretched from the user's passphrase by Argon2id (RFC 9106).
///
/// Only the wrap is written (in the record); the passphrase and the derived key live in memory for the moment of
/// the derivation and are wiped.
struct PassphraseKeyStore: KeyStore {
    /// Argon2id's cost: RFC 9106's second recommended option (64 MiB, 3 passes), one lane; about a quarter of a
    /// second of one core here.
    var iterations: UInt32 = 3
    var memoryKiB: UInt32 = 64 * 1024
    var parallelism: UInt32 = 1

    var kind: KeyStoreKind { .passphrase }

    func load(_ record: KeyRecord, passphrase: Passphrase?) throws(KeyStoreProblem) -> KeyMemory {
        guard let wrap = record.wrapped, wrap.algorithm == "argon2id" else {
            throw .failed("the key record holds no passphrase wrap")
        }
        guard let passphrase else {
            throw .locked("the cache key is wrapped with a passphrase that has not been given since the broker started")
        }
        let derived = try derive(
            passphrase,
            salt: wrap.salt,
            iterations: wrap.iterations,
            memoryKiB: wrap.memoryKiB,
            parallelism: wrap.parallelism
        )
        do {
            let box = try AES.GCM.SealedBox(combined: wrap.sealedKey)
            // The unwrapped key goes straight into the key's own page; its one heap copy is wiped (not a
            // copy-on-write copy of it, as wiping a second variable holding it would).
            var opened = try derived.withKey { key in
                try AES.GCM.open(box, using: key, authenticating: Data("tokenbroker key \(record.cacheID)".utf8))
            }
            defer {
                opened.withUnsafeMutableBytes { if let start = $0.baseAddress { explicit_bzero(start, $0.count) } }
            }
            guard opened.count == KeyMemory.length,
                let key = try KeyMemory.filled({ target in
                    opened.copyBytes(to: target)
                    return true
                })
            else {
                throw KeyStoreProblem.failed("the wrapped key has the wrong length")
            }
            return key
        } catch let problem as KeyStoreProblem {
            throw problem
        } catch {
            throw .wrongPassphrase
        }
    }

    func save(_ key: KeyMemory, into record: inout KeyRecord, passphrase: Passphrase?) throws(KeyStoreProblem) {
        guard let passphrase, !passphrase.isEmpty else { throw .locked("a passphrase is needed to wrap the cache key") }
        let salt = Data(SymmetricKey(size: .bits128).withUnsafeBytes { Array($0) })
        let derived = try derive(
            passphrase,
            salt: salt,
            iterations: iterations,
            memoryKiB: memoryKiB,
            parallelism: parallelism
        )
        do {
            let box = try derived.withKey { wrapping in
                try key.withKey { key in
                    try key.withUnsafeBytes { bytes in
                        try AES.GCM.seal(
                            bytes,
                            using: wrapping,
                            authenticating: Data("tokenbroker key \(record.cacheID)".utf8)
                        )
                    }
                }
            }
            guard let combined = box.combined else { throw KeyStoreProblem.failed("AES-GCM produced no combined box") }
            record.wrapped = PassphraseWrap(
                iterations: iterations,
                memoryKiB: memoryKiB,
                parallelism: parallelism,
                salt: salt,
                sealedKey: combined
            )
        } catch let problem as KeyStoreProblem {
            throw problem
        } catch {
            throw .failed("cannot wrap the cache key: \(error)")
        }
    }

    func discard(_ record: KeyRecord) throws(KeyStoreProblem) {}

    /// Argon2id of `passphrase` and `salt`, straight into a key page.
    private func derive(
        _ passphrase: Passphrase,
        salt: Data,
        iterations: UInt32,
        memoryKiB: UInt32,
        parallelism: UInt32
    ) throws(KeyStoreProblem) -> KeyMemory {
        // Refuses costs a damaged or hostile record could set to exhaust memory or time.
        guard (1...10).contains(iterations), (8 * 1024...1024 * 1024).contains(memoryKiB),
            (1...4).contains(parallelism),
            salt.count >= 16
        else {
            throw .failed("the passphrase wrap asks for Argon2id costs outside the accepted range")
        }
        var status = ARGON2_OK.rawValue
        let memory: KeyMemory?
        do {
            memory = try KeyMemory.filled { output in
                status = passphrase.withBytes { password in
                    salt.withUnsafeBytes { salt in
                        argon2id_hash_raw(
                            iterations,
                            memoryKiB,
                            parallelism,
                            password.baseAddress,
                            password.count,
                            salt.baseAddress,
                            salt.count,
                            output.baseAddress,
                            output.count
                        )
                    }
                }
                return status == ARGON2_OK.rawValue
            }
        } catch {
            throw .failed("cannot reserve memory for the derived key")
        }
        guard let memory else {
            throw .failed("Argon2id failed: \(String(cString: argon2_error_message(status)))")
        }
        return memory
    }
}
