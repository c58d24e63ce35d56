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
        let data = params.data
        let now = nowSeconds
        let cache = try cache
        // Parsing up to a frame's worth of JSON, and planning against the whole cache, is heavy: off the loops.
        let plan = try await HeavyWork.run { () throws(BrokerFailure) -> CacheImport in
            let document = Data(data.reveal().utf8)
            let read: (entries: [CacheEntry], skipped: [SkippedEntry])
            do throws(CacheError) {
                switch format {
                case .msal: read = try MSALCacheDocument.read(document)
                case .adal: read = try ADALCacheDocument.read(document, timeZone: .current, now: now)
                }
            } catch {
                throw BrokerFailure(.invalidCache, error.message, underlying: error)
            }
            return cache.read { contents in
                CacheImport(entries: read.entries, skipped: read.skipped, into: contents, now: now)
            }
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
        // However few entries it wrote, an import parsed a document of up to 64 MiB: hand the pages back.
        FreeMemory.release()
        audit.cacheMoved(
            "imported",
            by: caller,
            format: format,
            counts: plan.imported,
            correlationId: params.effectiveCorrelationId
        )
        return ImportCacheResult(format: format, imported: plan.imported, skipped: plan.skipped)
    }

    /// `exportCache`: the cache (or one client id's part of it) as an MSAL or ADAL document.
    public func exportCache(
        _ params: ExportCacheParams,
        caller: Caller
    ) async throws(BrokerFailure)
        -> ExportCacheResult
    {
        let format = params.format ?? .msal
        let cache = try cache
        // Copying and serializing the whole cache (up to 64 MiB) is heavy: off the loops, with the access tokens'
        // secrets the contents leave in the store read from it (on its own reader queue).
        let entries = await HeavyWork.run { cache.read { $0.allEntries } }
        let secrets: [EntryID: Secret]
        do {
            secrets = try await cache.storedSecrets(for: entries)
        } catch {
            throw BrokerFailure(.internalError, "the cache could not be read", underlying: error)
        }
        let (data, counts) = try await HeavyWork.run { () throws(BrokerFailure) -> (Data, EntryCounts) in
            do {
                let contents = CacheContents(TokenCache.filling(entries, with: secrets))
                switch format {
                case .msal:
                    let entries = CacheExport.entries(of: contents, clientId: params.clientId)
                    return (try MSALCacheDocument.write(entries), CacheContents(entries).count)
                case .adal:
                    return try ADALCacheDocument.write(contents, clientId: params.clientId, timeZone: .current)
                }
            } catch {
                throw BrokerFailure(.internalError, "the cache could not be read or serialized", underlying: error)
            }
        }
        audit.cacheMoved(
            "exported",
            by: caller,
            format: format,
            counts: counts,
            correlationId: params.effectiveCorrelationId
        )
        return ExportCacheResult(format: format, data: Secret(String(decoding: data, as: UTF8.self)), counts: counts)
    }
}
