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
            #expect(id.canonicalText == id.uuidString)
        }
        // All 122 random bits vary: no byte is stuck across the ids.
        for index in 0..<16 {
            let seen = Set(ids.map { withUnsafeBytes(of: $0.uuid) { $0[index] } })
            #expect(seen.count > 8, "byte \(index)")
        }
    }

    /// The text written straight is Foundation's, for ids that are not version 4 as well: all zeros, and each byte
    /// value in each place.
    @Test func canonicalTextIsFoundations() {
        let edges =
            [UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))]
            + (0...255).map { value in
                let byte = UInt8(value)
                return UUID(
                    uuid: (
                        byte, byte &+ 1, byte &+ 2, byte &+ 3, byte &+ 4, byte &+ 5, byte &+ 6, byte &+ 7,
                        byte &+ 8, byte &+ 9, byte &+ 10, byte &+ 11, byte &+ 12, byte &+ 13, byte &+ 14, byte &+ 15
                    )
                )
            }
        for id in edges { #expect(id.canonicalText == id.uuidString) }
        #expect(WireProtocol.newCorrelationId().count == 36)
    }
}
