import ArgumentParser
import Foundation

/// Tokens through the managed-identity endpoint: each request a TCP connection of its own (the endpoint answers
/// `Connection: close`, as App Service's clients expect), from N threads doing blocking requests.
struct Endpoint: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Latency and requests per second of the managed-identity endpoint with N clients."
    )

    @Option(help: "The endpoint's IPv4 address and port (ADDRESS:PORT).") var address: String
    @Option(help: "A file holding the grant's secret (IDENTITY_HEADER).") var secretFile: String
    @Option(help: "The resource to ask for.") var resource: String
    @Option(help: "Concurrent clients.") var connections: Int = 1
    @Option(help: "Measured seconds.") var seconds: Double = 3
    @Option(help: "The server's pid, to measure its CPU time per request.") var serverPid: Int32?

    func run() throws {
        let parts = address.split(separator: ":")
        guard parts.count == 2, let port = UInt16(parts[1]) else { throw ValidationErrorText("--address ADDRESS:PORT") }
        let secret = try String(contentsOfFile: secretFile, encoding: .utf8).trimmingCharacters(
            in: .whitespacesAndNewlines
        )
        let query = resource.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? resource
        let request = Array(
            ("GET /msi/token?api-version=2019-08-01&resource=\(query) HTTP/1.1\r\nHost: \(address)\r\n"
                + "X-IDENTITY-HEADER: \(secret)\r\n\r\n").utf8
        )
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, String(parts[0]), &address.sin_addr)
        let target = address
        let first = try Self.exchange(request, target)
        guard first.hasPrefix("HTTP/1.1 200") else {
            throw ValidationErrorText("the endpoint answered: \(first.prefix(200))")
        }
        var fields = measureLoad(
            clients: connections,
            warmupSeconds: 0.5,
            seconds: seconds,
            serverPid: serverPid,
            stopOnFailure: false
        ) { _ in (try? Self.exchange(request, target))?.hasPrefix("HTTP/1.1 200") == true }
        fields["kind"] = "endpoint"
        fields["label"] = "managed-identity endpoint"
        report(fields)
    }

    /// One request on a new connection; the whole answer (the endpoint closes after it).
    static func exchange(_ request: [UInt8], _ target: sockaddr_in) throws -> String {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ValidationErrorText("socket: \(errno)") }
        defer { close(fd) }
        var address = target
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { throw ValidationErrorText("connect: \(errno)") }
        guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, 0) }) == request.count else {
            throw ValidationErrorText("send: \(errno)")
        }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            guard count > 0 else { break }
            answer += buffer[0..<count]
        }
        return String(decoding: answer, as: UTF8.self)
    }
}
