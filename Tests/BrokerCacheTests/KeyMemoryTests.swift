import Foundation
import Glibc
import Testing

@testable import BrokerCache

/// The cache key in memory: a page of its own that core dumps leave out and that is locked out of swap.
struct KeyMemoryTests {
    /// The VmFlags of the mapping holding `address`, from /proc/self/smaps.
    private func flags(of address: UInt) throws -> Set<String> {
        var inside = false
        // Read to the end (procfs reports a size of 0, which Foundation's readers take at its word).
        let handle = try #require(FileHandle(forReadingAtPath: "/proc/self/smaps"))
        let smaps = try handle.readToEnd() ?? Data()
        for line in String(decoding: smaps, as: UTF8.self).split(separator: "\n") {
            let fields = line.split(separator: " ")
            if let range = fields.first, range.contains("-"), !range.hasSuffix(":") {
                let bounds = range.split(separator: "-").compactMap { UInt($0, radix: 16) }
                inside = bounds.count == 2 && bounds[0] <= address && address < bounds[1]
            } else if inside, line.hasPrefix("VmFlags:") {
                return Set(fields.dropFirst().map(String.init))
            }
        }
        throw CocoaError(.fileReadUnknown, userInfo: ["address": String(address, radix: 16)])
    }

    @Test func theKeysPageIsLeftOutOfDumpsAndLocked() throws {
        let key = try KeyMemory.random()
        let address = key.withUnsafeBytes { UInt(bitPattern: $0.baseAddress) }
        let vmFlags = try flags(of: address)
        #expect(vmFlags.contains("dd"), "not left out of core dumps: \(vmFlags)")
        var limit = rlimit()  // RLIMIT_MEMLOCK (8), which Glibc's module does not name
        if getrlimit(__rlimit_resource_t(8), &limit) == 0, limit.rlim_cur >= 4096 || getuid() == 0 {
            #expect(vmFlags.contains("lo"), "not locked in memory: \(vmFlags)")
        }
        // What the page hands out is the key, exactly its length.
        #expect(key.withUnsafeBytes { $0.count } == KeyMemory.length)
    }
}
