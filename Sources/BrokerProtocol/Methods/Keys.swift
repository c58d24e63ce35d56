/// Where the cache's data key is kept, what that protects against, and why the cache is locked (Protocol/ §9.13).
public struct KeyStoreStatus: Sendable, Hashable, Codable {
    /// The store that keeps the key: `secret-service`, `tpm`, `passphrase` or `file`; null when none does yet.
    public var store: String?
    /// What that store protects against, for people.
    public var protection: String?
    /// Whether the user chose the store (`moveCacheKey`); a plain key file not chosen moves to a better store at
    /// the next start.
    public var chosen: Bool
    /// The stores a new key is offered to, in order (`key-stores` in tokenbrokerd.conf).
    public var order: [String]
    /// Whether the cache is locked: its key cannot be had now, and nothing sealed is served.
    public var locked: Bool
    /// Why it is locked.
    public var problem: String?
    /// What to do about it.
    public var hint: String?
    /// Said while the key is a plain file in the state directory.
    public var warning: String?

    /// Creates a status.
    public init(
        store: String?,
        protection: String?,
        chosen: Bool = false,
        order: [String],
        locked: Bool = false,
        problem: String? = nil,
        hint: String? = nil,
        warning: String? = nil
    ) {
        self.store = store
        self.protection = protection
        self.chosen = chosen
        self.order = order
        self.locked = locked
        self.problem = problem
        self.hint = hint
        self.warning = warning
    }
}

/// Params of `getKeyStatus`: none but the correlation id.
public struct GetKeyStatusParams: Sendable, Hashable, Codable {
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    /// Creates the params.
    public init(correlationId: String? = nil) {
        self.correlationId = correlationId
    }
}

/// Params of `unlockCache`: the passphrase of a cache locked by one; none to try a locked keyring again.
public struct UnlockCacheParams: Sendable, Hashable, Codable {
    /// The passphrase (never logged, never echoed).
    public var passphrase: Secret?
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    package enum CodingKeys: String, CodingKey {
        case passphrase, correlationId
    }

    /// Creates the params.
    public init(passphrase: Secret? = nil, correlationId: String? = nil) {
        self.passphrase = passphrase
        self.correlationId = correlationId
    }
}

/// Params of `moveCacheKey`: the store to keep the key in from now on.
public struct MoveCacheKeyParams: Sendable, Hashable, Codable {
    /// `secret-service`, `tpm`, `passphrase` or `file`.
    public var to: String
    /// The new passphrase, for `passphrase`.
    public var passphrase: Secret?
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    package enum CodingKeys: String, CodingKey {
        case to, passphrase, correlationId
    }

    /// Creates the params.
    public init(to: String, passphrase: Secret? = nil, correlationId: String? = nil) {
        self.to = to
        self.passphrase = passphrase
        self.correlationId = correlationId
    }
}
