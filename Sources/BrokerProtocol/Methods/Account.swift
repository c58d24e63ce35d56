/// An account as the broker shows it: MSAL's `MSALAccount`, which is also the ADAL user.
///
/// `identifier` is unique and stable (MSAL's home account id, `uid.utid`; ADAL's `homeAccountId`): keep it
/// for later requests. `username` is displayable and may change (the UPN; ADAL's `userId`).
public struct Account: Sendable, Hashable, Codable {
    /// The unique, non-displayable id: `<object id>.<tenant id>` for Entra ID, the `sub` claim elsewhere.
    public var identifier: String
    /// The displayable id: `preferred_username` or `upn` (ADAL's `userId`); may be empty.
    public var username: String
    /// The host of the authority that signed the account in, such as `login.microsoftonline.com`.
    public var environment: String
    /// The tenant (Entra ID) or issuer path (other providers) the account's id token came from.
    public var realm: String
    /// The account's id inside that tenant: the `oid` claim, else `sub`.
    public var localAccountId: String
    /// The display name, when the id token carried one.
    public var name: String?
    /// How the account got into the broker, such as `authorization_code`, `device_code` or `msal_import`.
    public var accountSource: String?
    /// The claims of the account's latest id token, when the broker has one.
    public var accountClaims: [String: JSONValue]?

    /// Creates an account.
    public init(
        identifier: String,
        username: String,
        environment: String,
        realm: String,
        localAccountId: String,
        name: String? = nil,
        accountSource: String? = nil,
        accountClaims: [String: JSONValue]? = nil
    ) {
        self.identifier = identifier
        self.username = username
        self.environment = environment
        self.realm = realm
        self.localAccountId = localAccountId
        self.name = name
        self.accountSource = accountSource
        self.accountClaims = accountClaims
    }
}

/// Names an account in a request: by `identifier` when given, else by `username` (the seed's lookup rule).
public struct AccountSelector: Sendable, Hashable, Codable {
    /// The account's identifier (MSAL `identifier`, ADAL `homeAccountId`).
    ///
    /// Preferred when present.
    public var identifier: String?
    /// The account's username (MSAL `username`, ADAL `userId`).
    ///
    /// Used when `identifier` is absent or matches no account.
    public var username: String?

    /// Creates a selector; give at least one of the two.
    public init(identifier: String? = nil, username: String? = nil) {
        self.identifier = identifier
        self.username = username
    }

    /// Whether the selector names nothing.
    public var isEmpty: Bool {
        (identifier ?? "").isEmpty && (username ?? "").isEmpty
    }
}

/// Params of `getAccounts`.
public struct GetAccountsParams: Sendable, Hashable, Codable {
    /// Only accounts with tokens for this client id (its own or its family's).
    public var clientId: String?
    /// Only accounts of this authority's environment (and tenant, when the authority names one).
    public var authority: String?
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    package enum CodingKeys: String, CodingKey {
        case clientId, authority, correlationId
    }

    /// Creates the params; with no filter, every account is listed.
    public init(clientId: String? = nil, authority: String? = nil, correlationId: String? = nil) {
        self.clientId = clientId
        self.authority = authority
        self.correlationId = correlationId
    }
}

/// Result of `getAccounts`.
public struct AccountsResult: Sendable, Hashable, Codable {
    /// The accounts, ordered by username then identifier.
    public var accounts: [Account]

    /// Creates the result.
    public init(accounts: [Account]) {
        self.accounts = accounts
    }
}

/// Params of `getAccount`: the selector's fields at the top level.
public struct GetAccountParams: Sendable, Hashable, Codable {
    /// See ``AccountSelector/identifier``.
    public var identifier: String?
    /// See ``AccountSelector/username``.
    public var username: String?
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    package enum CodingKeys: String, CodingKey {
        case identifier, username, correlationId
    }

    /// Creates the params from a selector.
    public init(_ selector: AccountSelector, correlationId: String? = nil) {
        self.identifier = selector.identifier
        self.username = selector.username
        self.correlationId = correlationId
    }

    /// The selector these params name.
    public var selector: AccountSelector {
        AccountSelector(identifier: identifier, username: username)
    }
}

/// Result of `getAccount`.
public struct AccountResult: Sendable, Hashable, Codable {
    /// The account found.
    public var account: Account

    /// Creates the result.
    public init(account: Account) {
        self.account = account
    }
}

/// Params of `removeAccount`.
public struct RemoveAccountParams: Sendable, Hashable, Codable {
    /// The account to sign out.
    public var account: AccountSelector
    /// Sign the account out of this client id only (its access, id and own refresh tokens); the account and its family
    /// refresh token stay for other apps.
    ///
    /// Absent: remove the account and everything it has.
    public var clientId: String?
    /// See ``AcquireTokenSilentlyParams/correlationId``.
    public var correlationId: String?

    package enum CodingKeys: String, CodingKey {
        case account, clientId, correlationId
    }

    /// Creates the params.
    public init(account: AccountSelector, clientId: String? = nil, correlationId: String? = nil) {
        self.account = account
        self.clientId = clientId
        self.correlationId = correlationId
    }
}

/// Result of `removeAccount`.
public struct RemoveAccountResult: Sendable, Hashable, Codable {
    /// How many tokens were deleted.
    public var removedCredentials: Int
    /// Whether the account itself was deleted (false when only one client id was signed out).
    public var accountRemoved: Bool

    /// Creates the result.
    public init(removedCredentials: Int, accountRemoved: Bool) {
        self.removedCredentials = removedCredentials
        self.accountRemoved = accountRemoved
    }
}
