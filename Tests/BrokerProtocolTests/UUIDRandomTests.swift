import BrokerProtocol
import Foundation
import Testing

/// The correlation ids the broker makes for requests that bring none: random version-4 UUIDs, never repeated.
struct UUIDRandomTests {
    @Test func idsAreVersionFourAndDistinct() {
        let ids = (0..<10_000).map { _ in UUID.random() }
        #expect(Set(ids).count == ids.count)
        for id in ids {
            let bytes = withUnsafeBytes(of: id.uuid) { Array($0) }
            #expect(bytes[6] >> 4 == 4, "\(id)")
            #expect(bytes[8] >> 6 == 0b10, "\(id)")
            // It reads back as itself, in the canonical text form.
            #expect(UUID(uuidString: id.uuidString) == id)
            #expect(id.uuidString.count == 36)
        }
        // All 122 random bits vary: no byte is stuck across the ids.
        for index in 0..<16 {
            let seen = Set(ids.map { withUnsafeBytes(of: $0.uuid) { $0[index] } })
            #expect(seen.count > 8, "byte \(index)")
        }
    }
}
