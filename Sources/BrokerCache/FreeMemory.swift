import CLinuxSupport
import Dispatch

/// Hands the heap's free pages back to the system after a bulk change to the cache.
///
/// Loading or importing thousands of entries decodes and decrypts each one through buffers that are freed again;
/// glibc keeps those pages in its arenas, so a daemon that started on 10,000 tokens stayed at about 100 MiB, 30 of
/// them free heap (BENCHMARKS.md). `malloc_trim` returns every whole free page; it runs after bulk work only.
public enum FreeMemory {
    /// The number of entries from which a change counts as bulk.
    static let bulk = 256

    /// Returns the heap's free pages to the system, on a utility thread: the trim walks every arena (several
    /// milliseconds after an import of 10,000 tokens), and the commit that asks may be running on an event loop.
    public static func release() {
        DispatchQueue.global(qos: .utility).async { _ = tb_release_free_heap() }
    }
}
