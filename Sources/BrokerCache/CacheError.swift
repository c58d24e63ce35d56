/// Why the cache could not be opened, read or written.
///
/// `description` says what happened and what to do, never a token; `debugDescription` adds the cause.
public struct CacheError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// What kind of failure.
    public enum Kind: Sendable, Hashable {
        /// A file or the database could not be read or written.
        case io
        /// Stored data failed a check (a wrong key, a damaged entry).
        case corrupt
        /// A file or directory is open to other users.
        case insecure
        /// The database and the key do not belong together.
        case keyMismatch
        /// An imported document could not be read as a whole.
        case invalidDocument
    }

    /// What kind of failure.
    public let kind: Kind
    /// What happened, for people.
    public let message: String
    /// The underlying error, for `debugDescription` only.
    public let underlying: (any Error)?

    /// Creates an error.
    public init(_ kind: Kind, _ message: String, underlying: (any Error)? = nil) {
        self.kind = kind
        self.message = message
        self.underlying = underlying
    }

    /// The message.
    public var description: String {
        message
    }

    /// The message and the underlying error.
    public var debugDescription: String {
        guard let underlying else { return message }
        return "\(message) (\(String(reflecting: underlying)))"
    }
}
