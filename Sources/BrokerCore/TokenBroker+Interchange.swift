import BrokerCache
public import BrokerProtocol
import Foundation

extension TokenBroker {
    /// `importCache`: adds the document's entries to the cache in one transaction.
    ///
    /// Never deletes; never replaces a newer token with an older one; reports every entry it left out.
    public func importCache(
        _ params: ImportCacheParams,
        caller: Caller
    ) async throws(BrokerFailure)
        -> ImportCacheResult
    {
        let format = params.format ?? .msal
        let document = Data(params.data.reveal().utf8)
        let read: (entries: [CacheEntry], skipped: [SkippedEntry])
        do throws(CacheError) {
            switch format {
            case .msal: read = try MSALCacheDocument.read(document)
            case .adal: throw CacheError(.invalidDocument, "ADAL import is not supported by this broker yet")
            }
        } catch {
            throw BrokerFailure(.invalidCache, error.message, underlying: error)
        }
        let now = nowSeconds
        let plan = cache.read { contents in
            CacheImport(entries: read.entries, skipped: read.skipped, into: contents, now: now)
        }
        do {
            try await cache.commit(plan.changes)
        } catch {
            throw BrokerFailure(
                .internalError,
                "the cache could not be written; nothing was imported",
                underlying: error
            )
        }
        audit.cacheMoved(
            "imported",
            by: caller,
            format: format,
            counts: plan.imported,
            correlationId: params.correlationId ?? ""
        )
        return ImportCacheResult(format: format, imported: plan.imported, skipped: plan.skipped)
    }

    /// `exportCache`: the cache (or one client id's part of it) as an MSAL document.
    public nonisolated func exportCache(
        _ params: ExportCacheParams,
        caller: Caller
    ) throws(BrokerFailure)
        -> ExportCacheResult
    {
        let format = params.format ?? .msal
        let entries = cache.read { contents in CacheExport.entries(of: contents, clientId: params.clientId) }
        let data: Data
        do {
            switch format {
            case .msal: data = try MSALCacheDocument.write(entries)
            case .adal:
                throw BrokerFailure.invalidParams("params.format", "ADAL export is not supported by this broker yet")
            }
        } catch let failure as BrokerFailure {
            throw failure
        } catch {
            throw BrokerFailure(.internalError, "the cache could not be serialized", underlying: error)
        }
        let counts = CacheContents(entries).count
        audit.cacheMoved(
            "exported",
            by: caller,
            format: format,
            counts: counts,
            correlationId: params.correlationId ?? ""
        )
        return ExportCacheResult(format: format, data: Secret(String(decoding: data, as: UTF8.self)), counts: counts)
    }
}
