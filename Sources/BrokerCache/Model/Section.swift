/// The sections of the MSAL unified cache; their names are also the `credential_type` values.
public enum Section: Sendable, Hashable, Comparable, CustomStringConvertible {
    case accessToken
    case refreshToken
    case idToken
    case account
    case appMetadata
    /// A section this version does not know; kept as it came.
    case other(String)

    /// The section's name in MSAL JSON.
    public var name: String {
        switch self {
        case .accessToken: "AccessToken"
        case .refreshToken: "RefreshToken"
        case .idToken: "IdToken"
        case .account: "Account"
        case .appMetadata: "AppMetadata"
        case .other(let name): name
        }
    }

    /// The section named `name` in MSAL JSON.
    public init(name: String) {
        switch name {
        case "AccessToken": self = .accessToken
        case "RefreshToken": self = .refreshToken
        case "IdToken": self = .idToken
        case "Account": self = .account
        case "AppMetadata": self = .appMetadata
        default: self = .other(name)
        }
    }

    /// The five sections MSAL defines, in the order MSAL writes them.
    public static let known: [Section] = [.accessToken, .refreshToken, .idToken, .account, .appMetadata]

    /// The name.
    public var description: String {
        name
    }
}

/// Where an entry lives: its section and its MSAL key.
public struct EntryID: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The section.
    public var section: Section
    /// The MSAL flat key, as MSAL Python builds it.
    public var key: String

    /// Creates an id.
    public init(section: Section, key: String) {
        self.section = section
        self.key = key
    }

    /// The MSAL key of `parts`: joined by `-` and lowercased.
    ///
    /// The parts are copied into one string and its ASCII capitals lowered in place, eight bytes at a time; only a
    /// key with a non-ASCII character goes through `lowercased()`, whose result is the same as on the unlowered key
    /// (ASCII letters lower alike in any context). A refresh names a dozen entries, and appending the parts as
    /// strings, then lowering the whole (an access token's scopes have capitals), cost each key about 6,000
    /// instructions: 5 % of a refresh's event loop (callgrind).
    static func key(_ parts: String...) -> String {
        let count = parts.reduce(max(0, parts.count - 1)) { $0 + $1.utf8.count }
        var ascii = true
        let key = String(unsafeUninitializedCapacity: count) { buffer in
            guard let start = buffer.baseAddress else { return 0 }
            var end = 0
            for index in parts.indices {
                if index > 0 {
                    start[end] = UInt8(ascii: "-")
                    end += 1
                }
                var part = parts[index]
                let at = start + end
                end += part.withUTF8 { bytes in
                    if let first = bytes.baseAddress { at.initialize(from: first, count: bytes.count) }
                    return bytes.count
                }
            }
            ascii = lowerASCIICapitals(UnsafeMutableRawBufferPointer(start: start, count: end))
            return end
        }
        return ascii ? key : key.lowercased()
    }

    /// Lowers the ASCII capitals of `bytes` in place; whether every byte is ASCII.
    private static func lowerASCIICapitals(_ bytes: UnsafeMutableRawBufferPointer) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        var seen: UInt64 = 0
        var index = 0
        while index + 8 <= bytes.count {
            var word = bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            seen |= word
            // Per byte below 0x80, adding 0x80 - "A" sets the high bit from "A" up, and adding 0x80 - ("Z" + 1) from
            // past "Z": a capital has the first and not the second, and its high bit moved down two is 0x20.
            let low = word & ~highs
            let capitals = (low &+ ones &* (0x80 - 0x41)) & ~(low &+ ones &* (0x80 - 0x5B)) & ~word & highs
            word |= capitals >> 2
            bytes.storeBytes(of: word, toByteOffset: index, as: UInt64.self)
            index += 8
        }
        var ascii = seen & highs == 0
        while index < bytes.count {
            let byte = bytes[index]
            ascii = ascii && byte < 0x80
            if byte &- UInt8(ascii: "A") < 26 { bytes[index] = byte | 0x20 }
            index += 1
        }
        return ascii
    }

    /// `Section/key`.
    public var description: String {
        "\(section.name)/\(key)"
    }

    /// Orders by section name, then key.
    public static func < (lhs: EntryID, rhs: EntryID) -> Bool {
        (lhs.section.name, lhs.key) < (rhs.section.name, rhs.key)
    }
}

extension Section {
    /// Orders by name.
    public static func < (lhs: Section, rhs: Section) -> Bool {
        lhs.name < rhs.name
    }
}
