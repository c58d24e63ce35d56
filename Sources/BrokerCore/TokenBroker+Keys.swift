import BrokerCache
public import BrokerProtocol
import Logging

extension TokenBroker {
    /// Opens the cache at start: the key found, or the cache left locked, saying why.
    ///
    /// The managed-identity endpoint loads the grants as it starts; a cache that opens later loads them then.
    public func openCache() async {
        await vault.open()
    }

    /// For a request that needs the cache: tries a locked keyring or TPM again when it is time; the request then
    /// finds the cache open, or fails with `cache_locked`.
    func retryLockedCache() async {
        if await vault.retryIfDue() { await loadGrants() }
    }

    /// Throws `cache_locked` while the cache is locked (for the front ends' methods that need it).
    public func requireOpenCache() throws(BrokerFailure) {
        _ = try cache
    }

    /// `getKeyStatus`.
    public var keyStatus: KeyStoreStatus {
        vault.status
    }

    /// `unlockCache`: the passphrase, or another try of a locked keyring (with its own prompt, on a desktop).
    public func unlockCache(_ params: UnlockCacheParams, caller: Caller) async throws(BrokerFailure) -> KeyStoreStatus {
        let passphrase = params.passphrase.map { Passphrase($0.reveal()) }
        do {
            if try await vault.unlock(passphrase: passphrase) {
                await loadGrants()
                audit.cacheKeyChanged(
                    "unlocked",
                    by: caller,
                    store: vault.status.store ?? "none",
                    correlationId: params.correlationId
                )
            }
        } catch {
            throw BrokerFailure.locked(error)
        }
        return vault.status
    }

    /// `moveCacheKey`: keeps the key in the store named, as the user's choice.
    public func moveCacheKey(_ params: MoveCacheKeyParams, caller: Caller) async throws(BrokerFailure) -> KeyStoreStatus
    {
        guard let kind = KeyStoreKind(rawValue: params.to) else {
            throw BrokerFailure.invalidParams(
                ParamField(MoveCacheKeyParams.CodingKeys.to),
                "expected one of \(KeyStoreKind.names)"
            )
        }
        if kind == .passphrase, params.passphrase?.isEmpty ?? true {
            throw BrokerFailure.invalidParams(
                ParamField(MoveCacheKeyParams.CodingKeys.passphrase),
                "a passphrase is needed to keep the key with one"
            )
        }
        do {
            let status = try await vault.move(to: kind, passphrase: params.passphrase.map { Passphrase($0.reveal()) })
            audit.cacheKeyChanged("moved", by: caller, store: kind.rawValue, correlationId: params.correlationId)
            return status
        } catch {
            if vault.cache != nil {
                throw BrokerFailure(.internalError, "the key stays where it was: \(error.problem); \(error.hint)")
            }
            throw BrokerFailure.locked(error)
        }
    }

    private func loadGrants() async {
        do {
            let damaged = try await grants.load()
            for id in damaged {
                logger.error("a grant could not be opened and is left in place", metadata: ["grant": "\(id)"])
            }
        } catch {
            logger.error("cannot load the grants: \(error)")
        }
    }
}
