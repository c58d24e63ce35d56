public import BrokerProtocol
import BrokerTime
import Crypto
import Synchronization

/// Identifies a request for the throttle: what makes two requests identical (endpoint, client, scopes, the refresh
/// token's value), digested only when the throttle has a failure to compare it with, so the throttle never holds a
/// secret.
///
/// The digest waits because nearly every request meets an empty throttle: a SHA-256 of the parts and a refresh token
/// on every refresh cost 20,000 instructions, 2 % of the refresh's event loop (callgrind), to look up nothing.
public struct ThrottleKey: Sendable {
    private let parts: @Sendable () -> [String]
    private let secret: Secret?

    /// A key of `parts` and `secret`; the parts are worked out, and the secret hashed, only when needed, never kept
    /// by the throttle.
    public init(_ parts: @autoclosure @escaping @Sendable () -> [String], secret: Secret? = nil) {
        self.parts = parts
        self.secret = secret
    }

    /// The SHA-256 of the parts, each ended by a zero byte, then of the secret.
    fileprivate var digest: Digest {
        var hasher = SHA256()
        for part in parts() {
            hasher.update(data: Array(part.utf8))
            hasher.update(data: [0])
        }
        if let secret { hasher.update(data: Array(secret.reveal().utf8)) }
        return Digest(bytes: Array(hasher.finalize()))
    }

    /// What the throttle keeps of a key.
    fileprivate struct Digest: Hashable {
        let bytes: [UInt8]
    }
}

/// Remembers recent failures of identical requests and answers them again until their window passes.
final class Throttle: Sendable {
    private struct Entry {
        let error: OAuthError
        let until: Duration
    }

    private let entries = Mutex<[ThrottleKey.Digest: Entry]>([:])
    private let clock: any BrokerClock
    /// Entries kept at most; the oldest are dropped beyond it.
    static let capacity = 4096

    /// A throttle that reads the time from `clock`.
    init(clock: any BrokerClock) {
        self.clock = clock
    }

    /// Throws the remembered failure of `key` while its window lasts.
    func check(_ key: ThrottleKey) throws(OAuthError) {
        let now = clock.elapsed
        let remembered: Entry? = entries.withLock { entries in
            guard !entries.isEmpty else { return nil }
            let digest = key.digest
            guard let entry = entries[digest] else { return nil }
            guard entry.until > now else {
                entries[digest] = nil
                return nil
            }
            return entry
        }
        guard let remembered else { return }
        var error = remembered.error
        let remaining = remembered.until - now
        error.retryAfter = remaining
        error.message += " (the same request failed moments ago; not asking again for \(remaining.roundedUpSeconds) s)"
        throw error
    }

    /// Remembers `error` for `key` during `window`.
    func record(_ error: OAuthError, for key: ThrottleKey, _ window: Duration) {
        let until = clock.elapsed + window
        let digest = key.digest
        entries.withLock { entries in
            if entries.count >= Self.capacity {
                let now = clock.elapsed
                entries = entries.filter { $0.value.until > now }
                if entries.count >= Self.capacity, let oldest = entries.min(by: { $0.value.until < $1.value.until }) {
                    entries[oldest.key] = nil
                }
            }
            entries[digest] = Entry(error: error, until: until)
        }
    }
}

extension Duration {
    /// Whole seconds, rounded up: what a `retryAfterSeconds` says.
    public var roundedUpSeconds: Int {
        let (seconds, attoseconds) = components
        return Int(seconds) + (attoseconds > 0 ? 1 : 0)
    }
}
