/// A set of OAuth scopes compared the way MSAL compares them: case-insensitively, ignoring the OpenID
/// Connect scopes `openid profile offline_access` that every request carries.
public struct ScopeSet: Sendable, Hashable, CustomStringConvertible {
    /// The scopes every request adds; they never decide whether a token matches.
    public static let reserved: Set<String> = ["openid", "profile", "offline_access"]

    /// The scopes as given, order and case kept, duplicates and empty strings removed.
    public let scopes: [String]
    /// The lowercased scopes without the reserved ones: what matching compares.
    public let normalized: Set<String>

    /// Creates a set from scopes.
    public init(_ scopes: some Sequence<String>) {
        var seen = Set<String>()
        var kept: [String] = []
        for scope in scopes where !scope.isEmpty {
            if seen.insert(scope.lowercased()).inserted { kept.append(scope) }
        }
        self.scopes = kept
        self.normalized = seen.subtracting(Self.reserved)
    }

    /// Creates a set from a space-separated `target` (or `scope`) string.
    public init(target: String) {
        self.init(target.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).map(String.init))
    }

    /// Whether a token holding `stored` satisfies a request for these scopes.
    ///
    /// A request for `<resource>/.default` is satisfied by any token whose scopes all belong to that resource.
    public func isSatisfied(by stored: ScopeSet) -> Bool {
        if normalized.isSubset(of: stored.normalized) { return true }
        let wanted = normalized.subtracting(stored.normalized)
        return wanted.allSatisfy { scope in
            guard let resource = Self.defaultScopeResource(scope) else { return false }
            return !stored.normalized.isEmpty && stored.normalized.allSatisfy { $0.hasPrefix(resource) }
        }
    }

    /// The scopes as MSAL stores them: sorted and joined by spaces.
    public var target: String {
        scopes.sorted().joined(separator: " ")
    }

    /// The scopes, space-separated, as given.
    public var description: String {
        scopes.joined(separator: " ")
    }

    /// Whether the set asks for nothing beyond the reserved scopes.
    public var isEmpty: Bool {
        normalized.isEmpty
    }

    /// For `https://graph.microsoft.com/.default`, the prefix `https://graph.microsoft.com/` of its scopes.
    private static func defaultScopeResource(_ scope: String) -> String? {
        guard scope.hasSuffix("/.default") else { return nil }
        return String(scope.dropLast(".default".count))
    }
}
