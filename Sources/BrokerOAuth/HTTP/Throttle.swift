public import BrokerProtocol
import BrokerTime
import Crypto
import Synchronization

/// Identifies a request for the throttle: a digest of what makes two requests identical (endpoint, client,
/// scopes, the refresh token's value), so the throttle never holds a secret.
public struct ThrottleKey: Sendable, Hashable {
    private let digest: [UInt8]

    /// Digests the parts; secrets among them are hashed, never kept.
    public init(_ parts: [String], secret: Secret? = nil) {
        var hasher = SHA256()
        for part in parts {
            hasher.update(data: Array(part.utf8))
            hasher.update(data: [0])
        }
        if let secret { hasher.update(data: Array(secret.reveal().utf8)) }
        digest = Array(hasher.finalize())
    }
}

/// Remembers recent failures of identical requests and answers them again until their window passes.
final class Throttle: Sendable {
    private struct Entry {
        let error: OAuthError
        let until: Duration
    }

    private let entries = Mutex<[ThrottleKey: Entry]>([:])
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
            guard let entry = entries[key] else { return nil }
            guard entry.until > now else {
                entries[key] = nil
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
        entries.withLock { entries in
            if entries.count >= Self.capacity {
                let now = clock.elapsed
                entries = entries.filter { $0.value.until > now }
                if entries.count >= Self.capacity, let oldest = entries.min(by: { $0.value.until < $1.value.until }) {
                    entries[oldest.key] = nil
                }
            }
            entries[key] = Entry(error: error, until: until)
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
