import CKeyStores
import Foundation

/// The key sealed to the TPM 2.0 under the owner hierarchy's storage key (tpm2-tss): the sealed blob lives in the
/// key record, and only this machine's TPM can unseal it.
struct TPMKeyStore: KeyStore {
    /// The tpm2-tss TCTI configuration: `device:/dev/tpmrm0` unless `TOKENBROKER_TPM_TCTI` says otherwise
    /// (`swtpm:host=127.0.0.1,port=2321` for a software TPM).
    let tcti: String

    var kind: KeyStoreKind { .tpm }

    /// The TCTI `environment` names, else the kernel's resource manager.
    static func tcti(environment: [String: String]) -> String {
        environment["TOKENBROKER_TPM_TCTI"].flatMap { $0.isEmpty ? nil : $0 } ?? "device:/dev/tpmrm0"
    }

    func load(_ record: KeyRecord, passphrase: Passphrase?) throws(KeyStoreProblem) -> KeyMemory {
        guard let sealed = record.sealed else { throw .failed("the key record holds no TPM-sealed key") }
        if let problem = deviceProblem() { throw problem }
        let unsealed = sealed.withUnsafeBytes { blob in
            Result { () throws(KeyStoreProblem) in
                try StoreAnswer.key { output, count, message in
                    tb_tpm_unseal(
                        tcti,
                        blob.baseAddress?.assumingMemoryBound(to: UInt8.self),
                        blob.count,
                        output,
                        count,
                        message
                    )
                }
            }
        }
        let (key, answer) = try unsealed.get()
        if let key { return key }
        if answer.code == TB_KEY_WRONG_DEVICE {
            throw .failed(
                (answer.message ?? "this TPM cannot unseal the cache key")
                    + ": this state directory was sealed on another machine (or its TPM was cleared); nothing was changed"
            )
        }
        throw answer.problem ?? .failed("the TPM did not unseal the key")
    }

    func save(_ key: KeyMemory, into record: inout KeyRecord, passphrase: Passphrase?) throws(KeyStoreProblem) {
        if let problem = deviceProblem() { throw problem }
        var blob: UnsafeMutablePointer<UInt8>?
        var length = 0
        let answer = key.withUnsafeBytes { bytes in
            StoreAnswer { message in
                tb_tpm_seal(
                    tcti,
                    bytes.baseAddress?.assumingMemoryBound(to: UInt8.self),
                    bytes.count,
                    &blob,
                    &length,
                    message
                )
            }
        }
        defer { free(blob) }
        if let problem = answer.problem { throw problem }
        guard let blob else { throw .failed("the TPM returned no sealed key") }
        record.sealed = Data(bytes: blob, count: length)
    }

    func discard(_ record: KeyRecord) throws(KeyStoreProblem) {}

    /// Why the TPM device cannot be used by this user, for a `device:` TCTI; nil otherwise.
    private func deviceProblem() -> KeyStoreProblem? {
        guard tcti.hasPrefix("device:") else { return nil }
        let path = String(tcti.dropFirst("device:".count))
        guard access(path, F_OK) == 0 else { return .unavailable("no TPM: \(path) does not exist") }
        guard access(path, R_OK | W_OK) == 0 else {
            return .unavailable("the TPM \(path) is not usable by this user (on Debian: join the tss group)")
        }
        return nil
    }
}
