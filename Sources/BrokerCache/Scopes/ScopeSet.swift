/// A set of OAuth scopes compared the way MSAL compares them: case-insensitively, ignoring the OpenID
/// Connect scopes `openid profile offline_access` that every request carries.
///
/// A set of OpenID Connect scopes alone (`openid profile`), which generic providers issue a real access token for
/// (the one their userinfo endpoint takes), is compared on those scopes instead, `offline_access` aside: it asks
/// for a refresh token, never for something an access token carries.
public struct ScopeSet: Sendable, Hashable, CustomStringConvertible {
    /// The scopes every request adds; they never decide whether a token matches.
    public static let reserved: Set<String> = Set(reservedInRequestOrder)
    /// The reserved scopes in the order MSAL sends them.
    public static let reservedInRequestOrder = ["openid", "profile", "offline_access"]

    /// The scopes as given, order and case kept, duplicates and empty strings removed.
    public let scopes: [String]
    /// The lowercased scopes without the reserved ones: what matching compares.
    public let normalized: Set<String>
    /// What matching compares: ``normalized``, or for a set of OpenID Connect scopes alone, those scopes
    /// (lowercased, without `offline_access`).
    public let matched: Set<String>
    /// Every scope, lowercased.
    private let lowercased: Set<String>

    /// Creates a set from scopes.
    ///
    /// The sets are sized once and filled in one pass, and scopes already in lower case are kept as they are, not
    /// copied: a refresh makes two sets, and growing each set insert by insert cost it 1,500 instructions an insert
    /// (callgrind).
    public init(_ scopes: some Sequence<String>) {
        let count = scopes.underestimatedCount
        var seen = Set<String>(minimumCapacity: count)
        var normalized = Set<String>(minimumCapacity: count)
        var kept: [String] = []
        kept.reserveCapacity(count)
        for scope in scopes where !scope.isEmpty {
            let lowercased = scope.lowercasedSharingStorage
            guard seen.insert(lowercased).inserted else { continue }
            kept.append(scope)
            if !Self.reserved.contains(lowercased) { normalized.insert(lowercased) }
        }
        self.scopes = kept
        self.lowercased = seen
        self.normalized = normalized
        self.matched = normalized.isEmpty ? seen.subtracting(["offline_access"]) : normalized
    }

    /// Creates a set from a space-separated `target` (or `scope`) string.
    ///
    /// Split on the bytes (space, tab, line feed): scope tokens are ASCII (RFC 6749, section 3.3), and splitting by
    /// `Character` paid for grapheme breaking on every token a refresh stores.
    public init(target: String) {
        self.init(
            target.utf8.split(whereSeparator: { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A }).map { String(Substring($0)) }
        )
    }

    /// Whether a token holding `stored` satisfies a request for these scopes.
    ///
    /// A request for `<resource>/.default` is satisfied by any token whose scopes all belong to that resource; a
    /// request for OpenID Connect scopes alone by a token that carries them.
    public func isSatisfied(by stored: ScopeSet) -> Bool {
        if normalized.isEmpty { return !matched.isEmpty && matched.isSubset(of: stored.lowercased) }
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

    /// The scopes a token stored under ``target`` holds: what `ScopeSet(target: target).scopes` gives, without
    /// joining and parsing again (13,000 instructions, 1.5 % of a refresh) when no scope holds a separator.
    public var storedScopes: [String] {
        let separated = scopes.contains { scope in scope.utf8.contains { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A } }
        return separated ? ScopeSet(target: target).scopes : scopes.sorted()
    }

    /// The scopes, space-separated, as given.
    public var description: String {
        scopes.joined(separator: " ")
    }

    /// Whether the set asks for nothing beyond the reserved scopes.
    public var isEmpty: Bool {
        normalized.isEmpty
    }

    /// Whether a token for these scopes and one for `other` hold some of the same.
    ///
    /// A new token replaces the older ones it overlaps (MSAL does the same). Tokens for OpenID Connect scopes alone
    /// overlap only each other.
    public func overlaps(_ other: ScopeSet) -> Bool {
        guard normalized.isEmpty == other.normalized.isEmpty else { return false }
        return !matched.isDisjoint(with: other.matched)
    }

    /// The scope an ADAL v1 `resource` stands for: `<resource>/.default`, always with the slash, as MSAL and
    /// the Azure CLI map it (`https://management.core.windows.net/` becomes
    /// `https://management.core.windows.net//.default`, which is what gets a token whose audience keeps the
    /// resource's trailing slash).
    public static func defaultScope(forResource resource: String) -> String {
        resource + "/.default"
    }

    /// Microsoft Graph's resource: the one Entra ID means by a scope without a resource (`User.Read`).
    public static let graphResource = "https://graph.microsoft.com"

    /// The ADAL v1 resource these scopes belong to, when they all belong to one: `R` for `R/.default`, the part
    /// before the last `/` for a scope like `https://graph.microsoft.com/User.Read` or `api://id/access`, and
    /// Microsoft Graph for a bare `User.Read`, as Entra ID reads it.
    public var resource: String? {
        var found: String?
        for scope in scopes where !Self.reserved.contains(scope.lowercased()) {
            let resource: String
            if scope.lowercased().hasSuffix("/.default") {
                resource = String(scope.dropLast("/.default".count))
            } else if let scheme = scope.firstRange(of: "://"),
                let slash = scope[scheme.upperBound...].lastIndex(of: "/")
            {
                resource = String(scope[..<slash])
            } else if !scope.contains("/") {
                resource = Self.graphResource
            } else {
                return nil
            }
            guard !resource.isEmpty else { return nil }
            if let found, found.lowercased() != resource.lowercased() { return nil }
            found = found ?? resource
        }
        return found
    }

    /// For `https://graph.microsoft.com/.default`, the prefix `https://graph.microsoft.com/` of its scopes.
    private static func defaultScopeResource(_ scope: String) -> String? {
        guard scope.hasSuffix("/.default") else { return nil }
        return String(scope.dropLast(".default".count))
    }
}
