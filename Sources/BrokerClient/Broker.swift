public import BrokerProtocol

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A connection to the user's token broker, with an API shaped like MSAL's `MSALPublicClientApplication`.
///
/// One `Broker` carries any number of concurrent calls over one Unix-socket connection. Every method throws
/// ``BrokerError`` only. Create it with ``connect(socketPath:)``; close it with ``close()`` when done.
///
/// ```swift
/// let broker = try await Broker.connect()
/// let account = try await broker.account(forUsername: "ada@contoso.com")
/// let token = try await broker.acquireTokenSilent(
///     TokenRequest(clientId: appID, scopes: ["User.Read"], account: AccountSelector(identifier: account.identifier))
/// )
/// ```
public final class Broker: Sendable {
    private let connection: any Transport

    private init(connection: any Transport) {
        self.connection = connection
    }

    /// The connection, for the calls defined in other files.
    var transport: any Transport {
        connection
    }

    /// How a `Broker` talks to the daemon.
    public enum ConnectionMode: Sendable, Hashable {
        /// SwiftNIO event loops: any number of concurrent calls on one connection, notifications delivered as they
        /// come.
        ///
        /// For apps and long-lived processes.
        case concurrent
        /// Blocking socket I/O on the calling thread, one call at a time, nothing started in the background: the
        /// fastest start for a short-lived command-line tool.
        ///
        /// A call blocks its thread until answered.
        case blocking
    }

    /// The socket path a client uses when none is given: `$TOKENBROKER_SOCKET`, else
    /// `$XDG_RUNTIME_DIR/tokenbroker/broker.sock`, else the same under `/run/user/<uid>`, else
    /// `/tmp/tokenbroker-<uid>/broker.sock` (``SocketLocation``, the rule the daemon shares).
    public static var defaultSocketPath: String {
        SocketLocation.resolve()
    }

    /// Connects to the broker at `socketPath` (default: ``defaultSocketPath``).
    ///
    /// Before anything is sent, the socket's directory must be the user's own, closed to others, and the peer must
    /// run as the same user: otherwise ``BrokerError/Code/permissionDenied``. Throws
    /// ``BrokerError/Code/brokerUnavailable`` when no broker answers, with how to start it.
    public static func connect(
        socketPath: String? = nil,
        mode: ConnectionMode = .concurrent
    ) async throws(BrokerError) -> Broker {
        let path = socketPath ?? defaultSocketPath
        switch mode {
        case .concurrent: return Broker(connection: try await EventLoopConnection.connect(to: path))
        case .blocking: return Broker(connection: try BlockingConnection.connect(to: path))
        }
    }

    /// The socket this broker was reached on.
    public var socketPath: String {
        connection.socketPath
    }

    /// Closes the connection.
    ///
    /// Calls still waiting fail with ``BrokerError/Code/connectionLost``.
    public func close() async {
        await connection.close()
    }

    // MARK: Accounts

    /// Every account the broker holds (MSAL's `allAccounts`), optionally only those with tokens for `clientId`
    /// or of `authority`.
    public func accounts(clientId: String? = nil, authority: String? = nil) async throws(BrokerError) -> [Account] {
        try await connection.call(
            Methods.GetAccounts.self,
            GetAccountsParams(clientId: clientId, authority: authority)
        ).accounts
    }

    /// The account with this identifier (MSAL `identifier`, ADAL `homeAccountId`).
    ///
    /// Throws ``BrokerError/Code/noAccount`` when there is none.
    public func account(forIdentifier identifier: String) async throws(BrokerError) -> Account {
        try await account(AccountSelector(identifier: identifier))
    }

    /// The account with this username (MSAL `username`, ADAL `userId`), compared case-insensitively.
    ///
    /// Throws ``BrokerError/Code/noAccount`` when there is none.
    public func account(forUsername username: String) async throws(BrokerError) -> Account {
        try await account(AccountSelector(username: username))
    }

    /// The account a selector names: by identifier when it has one, else (or when that finds nothing) by
    /// username.
    public func account(_ selector: AccountSelector) async throws(BrokerError) -> Account {
        try await connection.call(
            Methods.GetAccount.self,
            GetAccountParams(selector)
        ).account
    }

    /// Signs an account out of the broker (all its tokens), or out of `clientId` only.
    public func removeAccount(
        _ selector: AccountSelector,
        clientId: String? = nil
    ) async throws(BrokerError)
        -> RemoveAccountResult
    {
        try await connection.call(
            Methods.RemoveAccount.self,
            RemoveAccountParams(account: selector, clientId: clientId)
        )
    }

    // MARK: Tokens

    /// A token without any UI: from the broker's cache, or refreshed by the broker.
    ///
    /// Throws ``BrokerError/Code/interactionRequired`` when the user must sign in, ``BrokerError/Code/noAccount``
    /// when the account is unknown.
    public func acquireTokenSilent(_ request: TokenRequest) async throws(BrokerError) -> TokenResult {
        try await connection.call(
            Methods.AcquireTokenSilently.self,
            AcquireTokenSilentlyParams(authParameters: request.authParameters, correlationId: request.correlationId)
        ).brokerTokenResponse
    }

    /// Drops an access token its audience refused from the broker's cache, so that the next request refreshes it
    /// (git's credential `erase`); false when the cache did not hold it.
    public func discardAccessToken(_ token: Secret) async throws(BrokerError) -> Bool {
        try await connection.call(
            Methods.DiscardAccessToken.self,
            DiscardAccessTokenParams(accessToken: token)
        ).discarded
    }

    // MARK: Grants of the managed-identity endpoint

    /// Creates a grant: the endpoint's URL and the secret (`IDENTITY_ENDPOINT`, `IDENTITY_HEADER`) that let a
    /// container or sandbox get this account's tokens for what the grant names, until it expires.
    public func createGrant(_ params: CreateGrantParams) async throws(BrokerError) -> CreateGrantResult {
        try await connection.call(Methods.CreateGrant.self, params)
    }

    /// The grants not yet expired or revoked.
    public func grants() async throws(BrokerError) -> [EndpointGrant] {
        try await connection.call(Methods.ListGrants.self, ListGrantsParams()).grants
    }

    /// Revokes a grant, by id or by a label that names one grant; its holders get no token from then on.
    public func revokeGrant(_ grant: String) async throws(BrokerError) -> EndpointGrant {
        try await connection.call(Methods.RevokeGrant.self, RevokeGrantParams(grant: grant)).grant
    }

    // MARK: The cache key

    /// Where the cache key is kept, what that protects against, and why the cache is locked.
    public func keyStatus() async throws(BrokerError) -> KeyStoreStatus {
        try await connection.call(Methods.GetKeyStatus.self, GetKeyStatusParams())
    }

    /// Opens a cache locked by a passphrase with `passphrase`; without one, has the broker try a locked keyring
    /// again (on a desktop, with the keyring's own prompt).
    public func unlockCache(passphrase: String? = nil) async throws(BrokerError) -> KeyStoreStatus {
        try await connection.call(Methods.UnlockCache.self, UnlockCacheParams(passphrase: passphrase.map(Secret.init)))
    }

    /// Keeps the cache key in `store` (`secret-service`, `tpm`, `passphrase` with `passphrase`, or `file`) from now
    /// on.
    public func moveCacheKey(to store: String, passphrase: String? = nil) async throws(BrokerError) -> KeyStoreStatus {
        try await connection.call(
            Methods.MoveCacheKey.self,
            MoveCacheKeyParams(to: store, passphrase: passphrase.map(Secret.init))
        )
    }

    // MARK: The broker itself

    /// The broker's and the protocol's versions; throws ``BrokerError/Code/unsupportedProtocolVersion`` when
    /// the broker speaks another major version than this library.
    public func version() async throws(BrokerError) -> VersionResult {
        try await connection.call(
            Methods.GetLinuxBrokerVersion.self,
            GetVersionParams()
        )
    }

    /// Uptime, counts and recent errors.
    public func status() async throws(BrokerError) -> StatusResult {
        try await connection.call(
            Methods.GetStatus.self,
            GetStatusParams()
        )
    }

    /// Imports a cache document (MSAL unified schema, or ADAL's list), as the text of the file.
    ///
    /// A document too large for one request is imported in parts, entry by entry; each part is atomic, and the
    /// reports are merged.
    public func importCache(
        _ document: Secret,
        format: CacheFormat = .msal
    ) async throws(BrokerError)
        -> ImportCacheResult
    {
        let text = document.reveal()
        guard text.utf8.count > ImportSplitter.partBudget,
            let (parts, oversized) = ImportSplitter.split(text, format: format)
        else {
            return try await importPart(document, format: format)
        }
        var merged = ImportCacheResult(format: format, imported: EntryCounts(), skipped: oversized)
        for part in parts {
            let report = try await importPart(Secret(part.text), format: format)
            merged.imported.accounts += report.imported.accounts
            merged.imported.accessTokens += report.imported.accessTokens
            merged.imported.refreshTokens += report.imported.refreshTokens
            merged.imported.idTokens += report.imported.idTokens
            merged.imported.appMetadata += report.imported.appMetadata
            merged.skipped += ImportSplitter.renumbered(report.skipped, of: part)
        }
        return merged
    }

    private func importPart(_ document: Secret, format: CacheFormat) async throws(BrokerError) -> ImportCacheResult {
        try await connection.call(
            Methods.ImportCache.self,
            ImportCacheParams(format: format, data: document)
        )
    }

    /// Exports the cache (or what `clientId` and its family can use) as a document of `format`.
    public func exportCache(
        format: CacheFormat = .msal,
        clientId: String? = nil
    ) async throws(BrokerError)
        -> ExportCacheResult
    {
        try await connection.call(
            Methods.ExportCache.self,
            ExportCacheParams(format: format, clientId: clientId)
        )
    }
}
