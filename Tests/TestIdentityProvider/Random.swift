import BrokerProtocol

/// Unpredictable values for codes and tokens, from the system's cryptographic generator.
enum Random {
    /// `count` random bytes.
    static func bytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: UInt8.min...UInt8.max, using: &generator) }
    }

    /// `count` random bytes as base64url text.
    static func token(bytes count: Int) -> String {
        Base64URL.encode(bytes(count))
    }

    /// A random version 4 UUID, lowercased, for trace and correlation ids.
    static func uuid() -> String {
        var raw = bytes(16)
        raw[6] = (raw[6] & 0x0F) | 0x40
        raw[8] = (raw[8] & 0x3F) | 0x80
        return UUIDText.format(raw)
    }

    /// `count` characters from an alphabet without look-alikes (no 0/O, 1/I), for user codes.
    static func userCode(length count: Int) -> String {
        let alphabet = Array("ABCDEFGHJKLMNPQRSTUVWXYZ23456789")
        var generator = SystemRandomNumberGenerator()
        return String((0..<count).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &generator)] })
    }
}
