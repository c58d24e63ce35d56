import BrokerCache
import BrokerProtocol
import Testing

@testable import BrokerCore

/// What a caller reads when the cache cannot be opened now.
struct BrokerFailureTests {
    @Test func wrongPassphrasesAreThrottledWithTheWait() {
        let failure = BrokerFailure.locked(
            KeyUnavailable(store: .passphrase, problem: .wrongPassphrase, hint: "wait", retryAfter: 4)
        )
        #expect(failure.code == .throttled)
        #expect(failure.message == "too many wrong passphrases: try again in 4 s")
        #expect(failure.details.retryAfterSeconds == 4)
    }

    /// A passphrase sent while another is tried is not a wrong one: the caller is told what is going on.
    @Test func aPassphraseSentWhileAnotherIsTriedSaysSo() {
        let failure = BrokerFailure.locked(
            KeyUnavailable(
                store: .passphrase,
                problem: .locked("another passphrase is being tried"),
                hint: "try again in a second",
                retryAfter: 1
            )
        )
        #expect(failure.code == .throttled)
        #expect(failure.message == "another passphrase is being tried: try again in 1 s")
        #expect(failure.details.retryAfterSeconds == 1)
    }

    @Test func aLockedCacheSaysWhyAndWhatToDo() {
        let failure = BrokerFailure.locked(
            KeyUnavailable(store: .secretService, problem: .locked("the login keyring is locked"), hint: "unlock it")
        )
        #expect(failure.code == .cacheLocked)
        #expect(failure.message.contains("the login keyring is locked"), "\(failure.message)")
        #expect(BrokerFailure.locked(nil).message == "the cache is locked")
    }
}
