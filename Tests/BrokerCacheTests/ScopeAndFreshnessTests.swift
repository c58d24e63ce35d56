import BrokerCache
import BrokerProtocol
import Testing

struct ScopeSetTests {
    /// Matching is a case-insensitive subset test that ignores the OpenID Connect scopes.
    @Test(arguments: [
        ("User.Read", "user.read Mail.Read openid", true),
        ("user.read mail.read", "User.Read Mail.Read", true),
        ("User.Read Files.Read", "User.Read Mail.Read", false),
        ("openid profile offline_access User.Read", "User.Read", true),
        (
            "https://graph.microsoft.com/.default",
            "https://graph.microsoft.com/User.Read https://graph.microsoft.com/Mail.Read", true
        ),
        (
            "https://graph.microsoft.com/.default",
            "https://graph.microsoft.com/User.Read https://vault.azure.net/user_impersonation", false
        ),
        ("https://management.core.windows.net//.default", "https://management.core.windows.net//.default", true),
        ("https://graph.microsoft.com/.default", "", false),
        // OpenID Connect scopes alone (a generic provider's userinfo token) match on themselves, offline_access aside.
        ("openid", "openid profile", true),
        ("openid profile offline_access", "openid profile", true),
        ("openid email", "openid profile", false),
        ("openid", "User.Read", false),
        ("openid", "", false),
        ("offline_access", "openid profile offline_access", false),
    ])
    func matchesLikeMSAL(requested: String, stored: String, matches: Bool) {
        #expect(ScopeSet(target: requested).isSatisfied(by: ScopeSet(target: stored)) == matches)
    }

    /// A new token replaces the older ones it overlaps; tokens for OpenID Connect scopes alone overlap only each
    /// other, never a token for an API.
    @Test(arguments: [
        ("User.Read", "User.Read Mail.Read openid", true),
        ("User.Read", "Mail.Read", false),
        ("openid profile", "openid", true),
        ("openid", "openid User.Read", false),
        ("openid profile", "email", false),
    ])
    func overlapsLikeMSAL(one: String, other: String, overlap: Bool) {
        #expect(ScopeSet(target: one).overlaps(ScopeSet(target: other)) == overlap)
        #expect(ScopeSet(target: other).overlaps(ScopeSet(target: one)) == overlap)
    }

    /// The stored target is sorted and space-joined, as MSAL writes it; duplicates differing in case collapse.
    @Test func targetIsSortedAndDeduplicated() {
        let scopes = ScopeSet(["User.Read", "openid", "user.read", "Mail.Read"])
        #expect(scopes.target == "Mail.Read User.Read openid")
        #expect(scopes.normalized == ["user.read", "mail.read"])
    }

    /// A target splits at spaces, tabs and line feeds, runs of them included; whatever else is part of a scope.
    @Test func targetSplitsAtSpacesTabsAndLineFeeds() {
        #expect(ScopeSet(target: " User.Read\tMail.Read\n\nopenid  ").scopes == ["User.Read", "Mail.Read", "openid"])
        #expect(ScopeSet(target: "api://é/Files.Read\u{A0}x").scopes == ["api://é/Files.Read\u{A0}x"])
        #expect(ScopeSet(target: "").scopes.isEmpty)
        #expect(ScopeSet(target: " \t\n").scopes.isEmpty)
    }

    /// What a token stored under a set's target holds is what parsing that target gives, separators in scopes and
    /// duplicates differing in case included.
    @Test(arguments: [
        ["User.Read", "openid", "user.read", "Mail.Read"], ["b", "A", "a", "B", "c"], [], ["", "x"],
        ["has space", "Mail.Read"], ["tab\there", "a"], ["line\nfeed"], ["api://é/Files.Read\u{A0}x", "Z"],
        ["offline_access", "profile", "openid"],
    ])
    func storedScopesAreTheTargetsParse(scopes: [String]) {
        let set = ScopeSet(scopes)
        #expect(set.storedScopes == ScopeSet(target: set.target).scopes)
    }
}

struct FreshnessTests {
    private func token(
        expiresIn: Int64,
        refreshIn: Int64? = nil,
        cachedAgo: Int64 = 0,
        now: Int64 = 1_000_000
    ) -> AccessToken {
        AccessToken(
            homeAccountId: "h",
            environment: "e",
            clientId: "c",
            realm: "r",
            target: "s",
            secret: .init("x"),
            cachedAt: now - cachedAgo,
            expiresOn: now + expiresIn,
            refreshOn: refreshIn.map { now + $0 }
        )
    }

    /// Five minutes is the floor; a caller's larger minimum validity raises it; refresh_on makes a valid
    /// token due for refresh; a token cached in the future counts as expired.
    @Test func followsTheBufferMinimumValidityAndRefreshOn() {
        let now: Int64 = 1_000_000
        #expect(Freshness.of(token(expiresIn: 3600), now: now) == .fresh)
        #expect(Freshness.of(token(expiresIn: 301), now: now) == .fresh)
        #expect(Freshness.of(token(expiresIn: 300), now: now) == .expired)
        #expect(Freshness.of(token(expiresIn: -10), now: now) == .expired)
        #expect(Freshness.of(token(expiresIn: 1800), now: now, minimumValidity: .seconds(3600)) == .expired)
        #expect(Freshness.of(token(expiresIn: 7200), now: now, minimumValidity: .seconds(3600)) == .fresh)
        #expect(Freshness.of(token(expiresIn: 3600, refreshIn: -1), now: now) == .refreshDue)
        #expect(Freshness.of(token(expiresIn: 3600, refreshIn: 600), now: now) == .fresh)
        #expect(Freshness.of(token(expiresIn: 3600, cachedAgo: -3600), now: now) == .expired)
    }

    /// The fresh window holds exactly the seconds in which the token is fresh: a remembered answer relies on it.
    @Test func theFreshWindowIsExactlyWhenTheTokenIsFresh() {
        let now: Int64 = 1_000_000
        let tokens = [
            token(expiresIn: 3600), token(expiresIn: 301), token(expiresIn: 300), token(expiresIn: -10),
            token(expiresIn: 3600, refreshIn: 600), token(expiresIn: 3600, refreshIn: -1),
            token(expiresIn: 3600, cachedAgo: -3600), token(expiresIn: 3600, cachedAgo: -200),
        ]
        for token in tokens {
            for minimum in [Duration.zero, .seconds(1800)] {
                let window = Freshness.freshSeconds(of: token, minimumValidity: minimum)
                for instant in stride(from: now - 4000, through: now + 4000, by: 1) {
                    let fresh = Freshness.of(token, now: instant, minimumValidity: minimum) == .fresh
                    #expect(window.contains(instant) == fresh, "at \(instant - now) s, minimum \(minimum)")
                }
            }
        }
        var extreme = token(expiresIn: 0)
        extreme.expiresOn = .min
        extreme.cachedAt = .min
        #expect(Freshness.freshSeconds(of: extreme).isEmpty)
    }
}
