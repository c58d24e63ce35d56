/// When a cached access token may be handed out, and when it should be refreshed first.
///
/// - Fresh: more than `max(5 minutes, minimumValidity)` remain and `refresh_on` has not passed.
/// - Refresh due: still valid beyond the buffer, but past `refresh_on`: refresh, and hand this token out if the
///   provider cannot be reached.
/// - Expired: within the buffer of expiry (or cached "in the future", a clock-skew guard): refresh.
public enum Freshness: Sendable, Hashable, Comparable {
    case fresh
    case refreshDue
    case expired

    /// The buffer before expiry in which a token no longer counts as valid (MSAL's 5 minutes).
    public static let expiryBuffer: Duration = .seconds(300)

    /// How fresh `token` is at `now` for a caller that needs `minimumValidity`.
    public static func of(_ token: AccessToken, now: Int64, minimumValidity: Duration = .zero) -> Freshness {
        let needed = max(expiryBuffer, minimumValidity).components.seconds
        if token.cachedAt > now + expiryBuffer.components.seconds { return .expired }
        if token.expiresOn - now <= needed { return .expired }
        if let refreshOn = token.refreshOn, refreshOn <= now { return .refreshDue }
        return .fresh
    }

    /// The seconds in which `token` is ``fresh`` for a caller that needs `minimumValidity`: `of(token, now:
    /// minimumValidity) == .fresh` exactly when the range contains `now` (empty when it never is).
    public static func freshSeconds(of token: AccessToken, minimumValidity: Duration = .zero) -> Range<Int64> {
        let needed = max(expiryBuffer, minimumValidity).components.seconds
        let start = minus(token.cachedAt, expiryBuffer.components.seconds)
        var end = minus(token.expiresOn, needed)
        if let refreshOn = token.refreshOn { end = min(end, refreshOn) }
        return start..<max(start, end)
    }

    /// `value - amount`, held at the bounds of `Int64` (an imported entry may carry any time).
    private static func minus(_ value: Int64, _ amount: Int64) -> Int64 {
        let (difference, overflow) = value.subtractingReportingOverflow(amount)
        return overflow ? (amount > 0 ? .min : .max) : difference
    }

    /// Fresh beats refresh-due beats expired.
    public static func < (lhs: Freshness, rhs: Freshness) -> Bool {
        lhs.rank < rhs.rank
    }

    private var rank: Int {
        switch self {
        case .expired: 0
        case .refreshDue: 1
        case .fresh: 2
        }
    }
}
