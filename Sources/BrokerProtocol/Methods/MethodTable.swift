/// One method of the protocol: its name on the wire, its params and its result.
///
/// Every front end derives what it needs from these types: the request decoder finds the params type by name,
/// the server finds the handler by type, and the client pairs each call with its result type. Adding a method
/// is one new type in ``Methods`` (listed in ``Methods/all``), its params (conforming to ``CorrelatedParams`` or
/// ``FlowParams``) and result, plus its handler.
public protocol BrokerMethod: Sendable {
    /// What the request's `params` decode to.
    associatedtype Params: MethodParams
    /// What the response's `result` encodes.
    associatedtype Result: Codable, Sendable

    /// The method's name on the wire.
    static var name: MethodName { get }

    /// Whether the server may answer it on the event loop that read it, when the answer needs only memory (the
    /// cache's short lock, no disk, no network, no waiting); otherwise it always runs in a task.
    static var answersFromMemory: Bool { get }
}

extension BrokerMethod {
    /// Most methods wait on the disk, the network or the user.
    public static var answersFromMemory: Bool { false }
}

/// What the params of every method share: the correlation id that ties a request to its logs, errors and
/// identity-provider calls, and whether they may be left out.
public protocol MethodParams: Codable, Sendable {
    /// The correlation id the caller sent, if any.
    var sentCorrelationId: String? { get }

    /// Gives the params `correlationId` when they carry none.
    mutating func adoptCorrelationId(_ correlationId: String)

    /// The params of a request that has none (or `null`); nil when the method requires them.
    static var whenOmitted: Self? { get }
}

extension MethodParams {
    /// Params are required unless a type says otherwise.
    public static var whenOmitted: Self? { nil }
}

/// Params whose correlation id is optional: the client library, or else the broker, makes one up.
public protocol CorrelatedParams: MethodParams {
    /// Follows the request into the broker's logs and identity-provider calls.
    var correlationId: String? { get set }
}

extension CorrelatedParams {
    /// The `correlationId` member.
    public var sentCorrelationId: String? { correlationId }

    /// The correlation id in effect: the one sent, else a new one (Protocol/ §6).
    ///
    /// A front end that filled it in first (``MethodCall/ensureCorrelationId()``) finds its own here; every handler
    /// goes by this one rule.
    public var effectiveCorrelationId: String {
        correlationId ?? WireProtocol.newCorrelationId()
    }

    /// Sets `correlationId` when it is absent.
    public mutating func adoptCorrelationId(_ correlationId: String) {
        if self.correlationId == nil { self.correlationId = correlationId }
    }
}

/// Params that name a running interactive flow by its correlation id, which they therefore always carry.
public protocol FlowParams: MethodParams {
    /// The correlation id of the interactive request the call is about.
    var correlationId: String { get }
}

extension FlowParams {
    /// The `correlationId` member.
    public var sentCorrelationId: String? { correlationId }

    /// Nothing to adopt: the flow's id is required.
    public mutating func adoptCorrelationId(_ correlationId: String) {}
}

/// The method table: one type per method of the protocol (Protocol/ §4–§9).
public enum Methods {
    /// `getLinuxBrokerVersion`: versions, for negotiation.
    public enum GetLinuxBrokerVersion: BrokerMethod {
        public typealias Params = GetVersionParams
        public typealias Result = VersionResult
        public static let name: MethodName = "getLinuxBrokerVersion"
        public static var answersFromMemory: Bool { true }
    }

    /// `getAccounts`: every account, optionally filtered.
    public enum GetAccounts: BrokerMethod {
        public typealias Params = GetAccountsParams
        public typealias Result = AccountsResult
        public static let name: MethodName = "getAccounts"
        public static var answersFromMemory: Bool { true }
    }

    /// `getAccount`: one account by identifier or username.
    public enum GetAccount: BrokerMethod {
        public typealias Params = GetAccountParams
        public typealias Result = AccountResult
        public static let name: MethodName = "getAccount"
        public static var answersFromMemory: Bool { true }
    }

    /// `acquireTokenSilently`: a cached token (answered from memory) or a refreshed one (in a task).
    public enum AcquireTokenSilently: BrokerMethod {
        public typealias Params = AcquireTokenSilentlyParams
        public typealias Result = AcquireTokenResult
        public static let name: MethodName = "acquireTokenSilently"
        public static var answersFromMemory: Bool { true }
    }

    /// `acquireTokenInteractively`: a sign-in shown the way the app chose.
    public enum AcquireTokenInteractively: BrokerMethod {
        public typealias Params = AcquireTokenInteractivelyParams
        public typealias Result = AcquireTokenResult
        public static let name: MethodName = "acquireTokenInteractively"
    }

    /// `completeInteractiveFlow`: the redirect an `embedded` web view reached.
    public enum CompleteInteractiveFlow: BrokerMethod {
        public typealias Params = CompleteInteractiveFlowParams
        public typealias Result = FlowControlResult
        public static let name: MethodName = "completeInteractiveFlow"
    }

    /// `cancelInteractiveFlow`: stops a running sign-in.
    public enum CancelInteractiveFlow: BrokerMethod {
        public typealias Params = CancelInteractiveFlowParams
        public typealias Result = FlowControlResult
        public static let name: MethodName = "cancelInteractiveFlow"
    }

    /// `removeAccount`: signs an account out.
    public enum RemoveAccount: BrokerMethod {
        public typealias Params = RemoveAccountParams
        public typealias Result = RemoveAccountResult
        public static let name: MethodName = "removeAccount"
    }

    /// `importCache`: takes an MSAL or ADAL cache document.
    public enum ImportCache: BrokerMethod {
        public typealias Params = ImportCacheParams
        public typealias Result = ImportCacheResult
        public static let name: MethodName = "importCache"
    }

    /// `exportCache`: writes the cache as an MSAL or ADAL document.
    public enum ExportCache: BrokerMethod {
        public typealias Params = ExportCacheParams
        public typealias Result = ExportCacheResult
        public static let name: MethodName = "exportCache"
    }

    /// `getStatus`: uptime, counts and recent errors.
    public enum GetStatus: BrokerMethod {
        public typealias Params = GetStatusParams
        public typealias Result = StatusResult
        public static let name: MethodName = "getStatus"
        public static var answersFromMemory: Bool { true }
    }

    /// `createGrant`: a capability for the managed-identity endpoint.
    public enum CreateGrant: BrokerMethod {
        public typealias Params = CreateGrantParams
        public typealias Result = CreateGrantResult
        public static let name: MethodName = "createGrant"
    }

    /// `listGrants`: the managed-identity endpoint's grants.
    public enum ListGrants: BrokerMethod {
        public typealias Params = ListGrantsParams
        public typealias Result = ListGrantsResult
        public static let name: MethodName = "listGrants"
    }

    /// `revokeGrant`: ends a grant at once.
    public enum RevokeGrant: BrokerMethod {
        public typealias Params = RevokeGrantParams
        public typealias Result = RevokeGrantResult
        public static let name: MethodName = "revokeGrant"
    }

    /// `discardAccessToken`: drops a token its audience refused, so that the next request refreshes.
    public enum DiscardAccessToken: BrokerMethod {
        public typealias Params = DiscardAccessTokenParams
        public typealias Result = DiscardAccessTokenResult
        public static let name: MethodName = "discardAccessToken"
    }

    /// `getKeyStatus`: where the cache key is kept, and why the cache is locked.
    public enum GetKeyStatus: BrokerMethod {
        public typealias Params = GetKeyStatusParams
        public typealias Result = KeyStoreStatus
        public static let name: MethodName = "getKeyStatus"
        public static var answersFromMemory: Bool { true }
    }

    /// `unlockCache`: opens a cache locked by a passphrase or a locked keyring.
    public enum UnlockCache: BrokerMethod {
        public typealias Params = UnlockCacheParams
        public typealias Result = KeyStoreStatus
        public static let name: MethodName = "unlockCache"
    }

    /// `moveCacheKey`: keeps the cache key in another store.
    public enum MoveCacheKey: BrokerMethod {
        public typealias Params = MoveCacheKeyParams
        public typealias Result = KeyStoreStatus
        public static let name: MethodName = "moveCacheKey"
    }

    /// Every method, in the order `getLinuxBrokerVersion` lists them.
    public static let all: [any BrokerMethod.Type] = [
        GetLinuxBrokerVersion.self, GetAccounts.self, GetAccount.self, AcquireTokenSilently.self,
        AcquireTokenInteractively.self, CompleteInteractiveFlow.self, CancelInteractiveFlow.self, RemoveAccount.self,
        ImportCache.self, ExportCache.self, GetStatus.self, CreateGrant.self, ListGrants.self, RevokeGrant.self,
        DiscardAccessToken.self, GetKeyStatus.self, UnlockCache.self, MoveCacheKey.self,
    ]

    /// The method of a wire name.
    static let byName: [String: any BrokerMethod.Type] = Dictionary(
        uniqueKeysWithValues: all.map { ($0.name.rawValue, $0) }
    )

    /// The method named `name` on the wire, if there is one.
    public static func named(_ name: String) -> (any BrokerMethod.Type)? {
        byName[name]
    }
}

extension GetVersionParams: CorrelatedParams {
    /// No params: no version to check.
    public static var whenOmitted: GetVersionParams? { GetVersionParams(protocolVersion: nil) }
}

extension GetAccountsParams: CorrelatedParams {
    /// No params: every account.
    public static var whenOmitted: GetAccountsParams? { GetAccountsParams() }
}

extension GetAccountParams: CorrelatedParams {}
extension AcquireTokenSilentlyParams: CorrelatedParams {}
extension AcquireTokenInteractivelyParams: CorrelatedParams {}
extension CompleteInteractiveFlowParams: FlowParams {}
extension CancelInteractiveFlowParams: FlowParams {}
extension RemoveAccountParams: CorrelatedParams {}
extension ImportCacheParams: CorrelatedParams {}

extension ExportCacheParams: CorrelatedParams {
    /// No params: the whole cache as MSAL JSON.
    public static var whenOmitted: ExportCacheParams? { ExportCacheParams() }
}

extension GetStatusParams: CorrelatedParams {
    /// No params needed.
    public static var whenOmitted: GetStatusParams? { GetStatusParams() }
}

extension CreateGrantParams: CorrelatedParams {}

extension ListGrantsParams: CorrelatedParams {
    /// No params: every grant.
    public static var whenOmitted: ListGrantsParams? { ListGrantsParams() }
}

extension RevokeGrantParams: CorrelatedParams {}
extension DiscardAccessTokenParams: CorrelatedParams {}

/// A field of a method's params, as an `invalid_params` error names it (`params.authParameters.clientId`), spelled
/// from the params' own coding keys.
package struct ParamField: Sendable, Hashable, CustomStringConvertible {
    /// The dotted path, starting with `params`.
    package let path: String

    /// The field reached through `keys`, from the params object down.
    package init(_ keys: any CodingKey...) {
        path = (["params"] + keys.map(\.stringValue)).joined(separator: ".")
    }

    /// A member of the `authParameters` object.
    package static func authParameters(_ key: AuthParameters.CodingKeys) -> ParamField {
        ParamField(AcquireTokenSilentlyParams.CodingKeys.authParameters, key)
    }

    package var description: String { path }
}

extension GetKeyStatusParams: CorrelatedParams {
    /// No params needed.
    public static var whenOmitted: GetKeyStatusParams? { GetKeyStatusParams() }
}

extension UnlockCacheParams: CorrelatedParams {
    /// No params: try a locked keyring again.
    public static var whenOmitted: UnlockCacheParams? { UnlockCacheParams() }
}

extension MoveCacheKeyParams: CorrelatedParams {}
