/// Scope lists as the token endpoint grants them: the asked-for resource scopes plus the three OIDC scopes.
enum Scopes {
    /// The scopes every grant carries, and which say nothing about the resource.
    static let reserved = ["openid", "profile", "offline_access"]

    /// The resource scope granted when a request asks for none, as Entra ID defaults to Microsoft Graph.
    static let defaultResourceScope = "User.Read"

    /// The application id of Microsoft Graph, the audience of tokens for scopes without a resource prefix.
    static let graphApplicationID = "00000003-0000-0000-c000-000000000000"

    /// The scopes of a space-separated `scope` parameter, duplicates (ignoring case) removed, in order.
    static func parse(_ text: String?) -> [String] {
        var seen: Set<String> = []
        var scopes: [String] = []
        for scope in (text ?? "").split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        where seen.insert(scope.lowercased()).inserted {
            scopes.append(scope)
        }
        return scopes
    }

    /// What a request for `requested` is granted: its resource scopes (or the default one), then the reserved ones.
    static func granted(_ requested: [String]) -> [String] {
        var resource = parse(requested.joined(separator: " ")).filter { !reserved.contains($0.lowercased()) }
        if resource.isEmpty { resource = [defaultResourceScope] }
        return resource + reserved
    }

    /// The access token audience: the resource prefix of the first resource scope, else Microsoft Graph.
    static func audience(of scopes: [String]) -> String {
        guard let first = scopes.first(where: { !reserved.contains($0.lowercased()) }),
            let slash = first.lastIndex(of: "/")
        else { return graphApplicationID }
        return String(first[..<slash])
    }

    /// The access token `scp` claim: the resource scopes without their resource prefix.
    static func scopeClaim(of scopes: [String]) -> String {
        scopes.filter { !reserved.contains($0.lowercased()) }
            .map { scope in scope.lastIndex(of: "/").map { String(scope[scope.index(after: $0)...]) } ?? scope }
            .joined(separator: " ")
    }
}
