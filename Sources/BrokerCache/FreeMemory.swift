import CLinuxSupport
import Dispatch
import Synchronization

/// Hands the heap's free pages back to the system after a bulk change to the cache.
///
/// Loading or importing thousands of entries decodes and decrypts each one through buffers that are freed again;
/// glibc keeps those pages in its arenas, so a daemon that started on 10,000 tokens stayed at about 100 MiB, 30 of
/// them free heap (BENCHMARKS.md). `malloc_trim` returns every whole free page; it runs after bulk work only.
public enum FreeMemory {
    /// The number of entries from which a change counts as bulk.
    static let bulk = 256

    /// Whether a trim is queued and has not started: asks meanwhile are answered by it.
    private static let queued = Atomic<Bool>(false)

    /// Returns the heap's free pages to the system, on a utility thread: the trim walks every arena (several
    /// milliseconds after an import of 10,000 tokens), and the commit that asks may be running on an event loop.
    ///
    /// Asks that come while a trim waits to start share it (an import's bulk commit and the import itself both ask).
    public static func release() {
        guard queued.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
            return
        }
        DispatchQueue.global(qos: .utility).async {
            queued.store(false, ordering: .releasing)
            _ = tb_release_free_heap()
        }
    }
}
