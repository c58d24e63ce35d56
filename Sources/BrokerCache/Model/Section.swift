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
    /// The parts are copied into one string sized beforehand: appending them as strings cost each key about 4,000
    /// instructions, and a refresh names a dozen entries.
    static func key(_ parts: String...) -> String {
        let count = parts.reduce(max(0, parts.count - 1)) { $0 + $1.utf8.count }
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
            return end
        }
        return key.lowercasedSharingStorage
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
