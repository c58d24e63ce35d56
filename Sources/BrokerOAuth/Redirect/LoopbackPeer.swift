import Foundation
import NIOCore

/// Who is on the other end of a TCP connection over the loopback interface: the owner of the peer's socket, as the
/// kernel lists it in `/proc/net/tcp` and `/proc/net/tcp6` (what an ident server reads).
///
/// The loopback listener serves a sign-in only to processes of the user: another local user who learnt its port
/// can neither fetch the start page nor bring a redirect with a code of their own.
enum LoopbackPeer {
    /// What the kernel says about the peer of `channel`.
    enum Owner: Equatable {
        /// The peer's socket belongs to this uid.
        case uid(UInt32)
        /// The kernel's table could not be read here (no `/proc`): nobody can be told apart.
        case unknown
        /// The table was read and the connection is not in it (the peer already closed).
        case gone

        /// Not known to be the user's: another uid, or a peer already gone.
        ///
        /// Where `/proc` cannot tell, nobody is foreign (the `state`, which never leaves this user, still guards).
        var isForeign: Bool {
            switch self {
            case .uid(let uid): uid != getuid()
            case .gone: true
            case .unknown: false
            }
        }
    }

    /// The owner of the socket at the other end of a connection from `remote` to `local`.
    static func owner(local: SocketAddress?, remote: SocketAddress?) -> Owner {
        guard let local, let remote, let localKey = key(local), let remoteKey = key(remote) else { return .gone }
        let table = local.protocol == .inet6 ? "/proc/net/tcp6" : "/proc/net/tcp"
        guard let text = readWhole(table) else { return .unknown }
        // The peer's own entry: its local address is our remote one, and the other way round. Only that line is
        // split into fields: a flood makes the table long, and every connection reads it.
        let addresses = remoteKey + " " + localKey
        for line in text.split(separator: "\n").dropFirst() where line.contains(addresses) {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count > 7, fields[1] == remoteKey, fields[2] == localKey, let uid = UInt32(fields[7]) else {
                continue
            }
            return .uid(uid)
        }
        return .gone
    }

    /// An address as `/proc/net/tcp*` prints it: the address's 32-bit words in host byte order, in hexadecimal,
    /// then `:` and the port in hexadecimal.
    static func key(_ address: SocketAddress) -> Substring? {
        guard let port = address.port else { return nil }
        var bytes: [UInt8]
        switch address {
        case .v4(let v4):
            bytes = withUnsafeBytes(of: v4.address.sin_addr) { Array($0) }
        case .v6(let v6):
            bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
        default:
            return nil
        }
        var text = ""
        while !bytes.isEmpty {
            let word = bytes.prefix(4)
            bytes.removeFirst(min(4, bytes.count))
            let value = word.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
            text += hex(value, digits: 8)
        }
        return Substring(text + ":" + hex(UInt32(port), digits: 4))
    }

    /// A `/proc` file read to its end: the kernel reports its size as 0, and generates it a page at a time.
    private static func readWhole(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = read(fd, &chunk, chunk.count)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func hex(_ value: UInt32, digits: Int) -> String {
        let text = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}
