import CLinuxSupport
public import Crypto
import Foundation

/// The sealing key's 32 bytes, in a page of their own that core dumps leave out (`MADV_DONTDUMP`), kept out of swap
/// where the memory-lock limit allows (`mlock`), and wiped when released.
///
/// The daemon also turns core dumps off altogether; this is for the dump that happens anyway (a `core_pattern`
/// pipe with `suid_dumpable=2` still dumps a non-dumpable process, for root). A ``SymmetricKey`` made for one
/// operation lives on the heap only while it runs, and swift-crypto wipes it when it is released.
public final class KeyMemory: @unchecked Sendable {
    /// The key's length.
    public static let length = 32
    private let page: UnsafeMutableRawPointer
    private let pageSize: Int

    /// Reserves the page.
    ///
    /// Unchecked-Sendable: the bytes are written once, before `init` returns, then only read.
    private init() throws {
        pageSize = max(Int(sysconf(Int32(_SC_PAGESIZE))), Self.length)
        let mapped = mmap(nil, pageSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        guard let mapped, mapped != MAP_FAILED else {
            throw CacheError(.io, "cannot reserve memory for the cache key: \(String(cString: strerror(errno)))")
        }
        page = mapped
        _ = tb_exclude_from_core_dumps(page, pageSize)
        _ = mlock(page, pageSize)  // best effort: RLIMIT_MEMLOCK may be 0
    }

    /// A copy of `key`.
    public convenience init(_ key: SymmetricKey) throws {
        try self.init()
        key.withUnsafeBytes { bytes in
            guard let source = bytes.baseAddress else { return }
            page.copyMemory(from: source, byteCount: min(bytes.count, Self.length))
        }
    }

    /// Reads exactly ``length`` bytes from `fd` straight into the page (no copy on the heap); nil when the file
    /// holds another number of bytes.
    static func read(from fd: Int32) throws -> KeyMemory? {
        let memory = try KeyMemory()
        var total = 0
        while total <= Self.length {
            // One byte more than the key: a longer file is refused, not cut.
            let count = Glibc.read(fd, memory.page + total, Self.length + 1 - total)
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else {
                throw CacheError(.io, "cannot read the cache key: \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            total += count
        }
        return total == Self.length ? memory : nil
    }

    /// A key whose bytes `fill` writes straight into the page (a store's C call); nil when `fill` says there is none.
    ///
    /// What `fill` wrote is wiped with the page when it throws or returns false.
    static func filled(_ fill: (UnsafeMutableRawBufferPointer) throws -> Bool) throws -> KeyMemory? {
        let memory = try KeyMemory()
        guard try fill(UnsafeMutableRawBufferPointer(start: memory.page, count: Self.length)) else { return nil }
        return memory
    }

    /// Whether `other` holds the same bytes, compared in constant time.
    func matches(_ other: KeyMemory) -> Bool {
        var difference: UInt8 = 0
        for index in 0..<Self.length {
            difference |=
                page.load(fromByteOffset: index, as: UInt8.self)
                ^ other.page.load(fromByteOffset: index, as: UInt8.self)
        }
        return difference == 0
    }

    /// A fresh random key (drawn by swift-crypto, whose copy is wiped as it is released).
    static func random() throws -> KeyMemory {
        try KeyMemory(SymmetricKey(size: .bits256))
    }

    /// Runs `body` with the key's bytes.
    func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try body(UnsafeRawBufferPointer(start: page, count: Self.length))
    }

    /// Runs `body` with the key as a ``SymmetricKey``, which is released (and wiped) when `body` returns.
    func withKey<Result>(_ body: (SymmetricKey) throws -> Result) rethrows -> Result {
        try body(withUnsafeBytes { SymmetricKey(data: $0) })
    }

    deinit {
        explicit_bzero(page, pageSize)
        munlock(page, pageSize)
        munmap(page, pageSize)
    }
}
