#if canImport(Glibc)
import Glibc
#endif

/// Whether a URL's host is this machine's loopback: an IPv4 literal in 127.0.0.0/8, the IPv6 literal `::1`
/// (bracketed or not), or exactly `localhost`.
///
/// A host that merely starts with `127.` (`127.evil.example`) is a name anyone can register, not a loopback
/// address.
public enum LoopbackHost {
    /// Whether `host` names the loopback interface.
    public static func contains(_ host: String) -> Bool {
        let host = host.lowercased()
        if host == "localhost" { return true }
        var ipv4 = in_addr()
        if inet_pton(AF_INET, host, &ipv4) == 1 {
            return UInt32(bigEndian: ipv4.s_addr) >> 24 == 127
        }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        var ipv6 = in6_addr()
        guard inet_pton(AF_INET6, bare, &ipv6) == 1 else { return false }
        return withUnsafeBytes(of: ipv6) { bytes in bytes.prefix(15).allSatisfy { $0 == 0 } && bytes[15] == 1 }
    }
}
