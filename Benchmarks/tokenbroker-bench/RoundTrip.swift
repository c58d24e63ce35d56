import Foundation
import Glibc

/// A blocking Unix-socket client that sends one request line and reads one response line: the same code
/// drives the broker and the floor server, so their figures compare.
final class RoundTripper: @unchecked Sendable {
    // SAFETY: each instance is created on one thread and then used by exactly one load thread.
    private let path: String
    private var fd: Int32
    private let request: [UInt8]
    private var buffer = [UInt8](repeating: 0, count: 1 << 20)
    private(set) var lastResponseSize = 0

    init(socket path: String, request: [UInt8]) throws {
        self.path = path
        self.fd = try Self.connect(to: path)
        self.request = request.last == UInt8(ascii: "\n") ? request : request + [UInt8(ascii: "\n")]
    }

    deinit {
        close(fd)
    }

    /// Closes the connection and opens a new one, as a process per request (the CLI, git, kubectl) does.
    func reconnect() throws {
        close(fd)
        fd = try Self.connect(to: path)
    }

    private static func connect(to path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8).prefix($0.count - 1)) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else {
            close(fd)
            throw ValidationErrorText("cannot connect to \(path): \(String(cString: strerror(errno)))")
        }
        return fd
    }

    /// One round trip; returns the response (only when `keep` is set, to keep the hot loop lean).
    @discardableResult
    func roundTrip(keep: Bool = false) throws -> [UInt8]? {
        var sent = 0
        while sent < request.count {
            let written = request[sent...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard written > 0 else { throw ValidationErrorText("write failed") }
            sent += written
        }
        var total = 0
        while true {
            let received = buffer.withUnsafeMutableBytes { bytes in
                let free = UnsafeMutableRawBufferPointer(rebasing: bytes[total...])
                return read(fd, free.baseAddress, free.count)
            }
            guard received > 0 else { throw ValidationErrorText("the server closed the connection") }
            total += received
            if buffer[total - 1] == UInt8(ascii: "\n") { break }
            guard total < buffer.count else { throw ValidationErrorText("response larger than 1 MiB") }
        }
        lastResponseSize = total
        return keep ? Array(buffer[0..<total]) : nil
    }
}

struct ValidationErrorText: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}
