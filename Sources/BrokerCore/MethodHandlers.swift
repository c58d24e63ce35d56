import BrokerCache
public import BrokerProtocol

/// How a handler answers: now, from what it found in memory; or later, in a task, continuing from there.
public enum Answer<Result: Sendable>: Sendable {
    /// The answer, ready.
    case now(Result)
    /// The rest of the work, for a task: it may wait on the identity provider, the disk or the user.
    ///
    /// It receives the connection the request came on (where the notifications of a sign-in go).
    case later(@Sendable (FlowOwner) async throws(BrokerFailure) -> Result)

    /// The answer, waiting for it when it comes later.
    public func value(owner: FlowOwner) async throws(BrokerFailure) -> Result {
        switch self {
        case .now(let result): result
        case .later(let work): try await work(owner)
        }
    }
}

/// One method's handler: validates the params and answers, or hands the rest to ``Answer/later(_:)``.
///
/// It never waits: a front end calls it on an event loop for the methods that answer from memory.
public struct MethodHandler<Method: BrokerMethod>: Sendable {
    /// Validates `params` for `caller` and answers.
    public let answer: @Sendable (Method.Params, Caller) throws(BrokerFailure) -> Answer<Method.Result>
}

/// The handler of every method: what each front end (the socket, later the bus and HTTP) dispatches to.
public struct MethodHandlers: Sendable {
    private var handlers: [MethodName: any Sendable] = [:]

    /// No handlers yet.
    public init() {}

    /// Handles `method` with `answer`.
    public mutating func on<Method: BrokerMethod>(
        _ method: Method.Type,
        _ answer: @escaping @Sendable (Method.Params, Caller) throws(BrokerFailure) -> Answer<Method.Result>
    ) {
        handlers[Method.name] = MethodHandler<Method>(answer: answer)
    }

    /// The handler of `method`; nil when this broker does not serve it.
    public func handler<Method: BrokerMethod>(for method: Method.Type) -> MethodHandler<Method>? {
        handlers[Method.name] as? MethodHandler<Method>
    }

    /// Adds the handlers of `other` (another part's methods: the endpoint's grants).
    public mutating func add(_ other: MethodHandlers) {
        handlers.merge(other.handlers) { _, new in new }
    }

    /// The methods with a handler, in the table's order.
    public var served: [MethodName] {
        Methods.all.map { $0.name }.filter { handlers[$0] != nil }
    }
}

extension TokenBroker {
    /// The broker's handler for every method of the table.
    ///
    /// `status` answers `getStatus`: what the front end knows of its connections joins what the broker knows; a
    /// front end without `getStatus` (the bus) passes nil.
    public func handlers(status: (@Sendable () -> StatusResult)?) -> MethodHandlers {
        var handlers = MethodHandlers()
        // What needs the cache waits for one more try of a locked keyring or TPM first.
        func onCache<Method: BrokerMethod>(
            _ method: Method.Type,
            _ answer: @escaping @Sendable (Method.Params, Caller) throws(BrokerFailure) -> Answer<Method.Result>
        ) {
            handlers.on(method, whenCacheOpen(answer))
        }
        handlers.on(Methods.GetLinuxBrokerVersion.self) { params, _ throws(BrokerFailure) in
            .now(try self.version(params))
        }
        onCache(Methods.GetAccounts.self) { params, _ throws(BrokerFailure) in .now(try self.accounts(params)) }
        onCache(Methods.GetAccount.self) { params, _ throws(BrokerFailure) in .now(try self.account(params)) }
        if let status { handlers.on(Methods.GetStatus.self, afterRetryingLockedCache { status() }) }
        onCache(Methods.AcquireTokenSilently.self) { params, caller throws(BrokerFailure) in
            try self.answerSilently(params, caller: caller)
        }
        onCache(Methods.AcquireTokenInteractively.self) { params, caller in
            .later { owner throws(BrokerFailure) in
                try await self.acquireTokenInteractively(params, caller: caller, owner: owner)
            }
        }
        handlers.on(Methods.CompleteInteractiveFlow.self) { params, _ in
            .later { owner throws(BrokerFailure) in try self.completeInteractiveFlow(params, answer: owner.answer) }
        }
        handlers.on(Methods.CancelInteractiveFlow.self) { params, _ in
            .later { _ in self.cancelInteractiveFlow(params) }
        }
        onCache(Methods.RemoveAccount.self) { params, caller in
            .later { _ throws(BrokerFailure) in try await self.removeAccount(params, caller: caller) }
        }
        onCache(Methods.ImportCache.self) { params, caller in
            .later { _ throws(BrokerFailure) in try await self.importCache(params, caller: caller) }
        }
        onCache(Methods.ExportCache.self) { params, caller in
            .later { _ throws(BrokerFailure) in try await self.exportCache(params, caller: caller) }
        }
        onCache(Methods.DiscardAccessToken.self) { params, caller in
            .later { _ throws(BrokerFailure) in try await self.discardAccessToken(params, caller: caller) }
        }
        handlers.on(Methods.GetKeyStatus.self, afterRetryingLockedCache { self.keyStatus })
        handlers.on(Methods.UnlockCache.self) { params, caller in
            .later { _ throws(BrokerFailure) in try await self.unlockCache(params, caller: caller) }
        }
        onCache(Methods.MoveCacheKey.self) { params, caller in
            .later { _ throws(BrokerFailure) in try await self.moveCacheKey(params, caller: caller) }
        }
        return handlers
    }

    /// A status: now, or while the cache is locked, after one more try of its key store (when due), so that a keyring
    /// unlocked since shows as such.
    func afterRetryingLockedCache<Params: Sendable, Result: Sendable>(
        _ status: @escaping @Sendable () -> Result
    ) -> @Sendable (Params, Caller) throws(BrokerFailure) -> Answer<Result> {
        { _, _ in
            guard self.vault.cache == nil else { return .now(status()) }
            return .later { _ in
                await self.retryLockedCache()
                return status()
            }
        }
    }

    /// `answer`, or while the cache is locked, one more try of its key store (when due) before it.
    public func whenCacheOpen<Params: Sendable, Result: Sendable>(
        _ answer: @escaping @Sendable (Params, Caller) throws(BrokerFailure) -> Answer<Result>
    ) -> @Sendable (Params, Caller) throws(BrokerFailure) -> Answer<Result> {
        { params, caller throws(BrokerFailure) in
            guard self.vault.cache == nil else { return try answer(params, caller) }
            return .later { owner throws(BrokerFailure) in
                await self.retryLockedCache()
                return try await answer(params, caller).value(owner: owner)
            }
        }
    }
}
