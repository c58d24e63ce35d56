/// The canonical text form of a UUID's 16 bytes: lowercase hex in groups of 8-4-4-4-12.
enum UUIDText {
    /// Formats the first 16 bytes of `bytes` as a lowercase UUID string.
    static func format(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        var text = ""
        for (index, byte) in bytes.prefix(16).enumerated() {
            if index == 4 || index == 6 || index == 8 || index == 10 { text.append("-") }
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return text
    }
}
