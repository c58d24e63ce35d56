import CKeyStores
import Foundation

/// What a C call of CKeyStores answered: its status, and the sentence saying why when it failed.
struct StoreAnswer {
    let code: tb_key_status
    let message: String?

    /// Runs `call`, which may set a malloc'd message (freed here).
    init(_ call: (UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> tb_key_status) {
        var message: UnsafeMutablePointer<CChar>?
        code = call(&message)
        defer { free(message) }
        self.message = message.map { String(cString: $0) }
    }

    /// Nil for success; the problem the status names otherwise.
    var problem: KeyStoreProblem? {
        let reason = message ?? "the key store failed"
        switch code {
        case TB_KEY_OK: return nil
        case TB_KEY_LOCKED: return .locked(reason)
        case TB_KEY_UNAVAILABLE: return .unavailable(reason)
        default: return .failed(reason)
        }
    }

    /// The key a C call writes straight into key memory (its buffer and length given), with the call's answer;
    /// no key when the call did not succeed.
    static func key(
        _ call: (UnsafeMutablePointer<UInt8>?, Int, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> tb_key_status
    ) throws(KeyStoreProblem) -> (key: KeyMemory?, answer: StoreAnswer) {
        var answer: StoreAnswer?
        do {
            let key = try KeyMemory.filled { output in
                let made = StoreAnswer { message in
                    call(output.baseAddress?.assumingMemoryBound(to: UInt8.self), output.count, message)
                }
                answer = made
                return made.code == TB_KEY_OK
            }
            return (key, answer ?? StoreAnswer { _ in TB_KEY_FAILED })
        } catch {
            throw .failed("cannot reserve memory for the cache key")
        }
    }
}
