import AsyncHTTPClient
import Foundation
import Glibc
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

/// The broker's HTTP client: async-http-client with a connect timeout, no redirects followed (an
/// identity provider's token endpoint never redirects, and following one could carry a code elsewhere), and
/// responses bounded to ``maximumResponseBytes``.
public final class AsyncHTTPTransport: HTTPTransport {
    /// The largest response body read; larger answers fail as ``TransportError/Kind/responseTooLarge``.
    public static let maximumResponseBytes = 1 << 20

    private let client: HTTPClient

    /// Creates a client with its own connection pool on NIO's shared event loops.
    ///
    /// async-http-client requires a shutdown before release, so prefer ``shared``; one made here must live
    /// until the process ends.
    ///
    /// No read timeout: each request's deadline (``send(_:timeout:)``) bounds a provider that stops answering, and
    /// the read timer, armed, moved and cancelled three times a request, cost a refresh 15,600 instructions (2 %,
    /// callgrind).
    private init(
        connectTimeout: Duration = .seconds(10),
        additionalTrustRoots: [NIOSSLCertificate] = []
    ) {
        var pool = HTTPClient.Configuration.ConnectionPool()
        // async-http-client would keep retrying a refused connection until the request's deadline; the token
        // endpoint's own retry policy decides that instead, so a provider that is down is known at once.
        pool.retryConnectionEstablishment = false
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: TimeAmount(connectTimeout)),
            connectionPool: pool,
            decompression: .disabled
        )
        // No spans: the daemon bootstraps no tracer, and asking the no-op one for a span on every request still
        // cost 3 % of a refresh's instructions (a task-local value set, attributes built and dropped).
        configuration.tracing.tracer = nil
        if !additionalTrustRoots.isEmpty {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.additionalTrustRoots = [.certificates(additionalTrustRoots)]
            configuration.tlsConfiguration = tls
        }
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// The process's transport with the default timeouts.
    ///
    /// It lives as long as the process (like `HTTPClient.shared`), so nobody has to shut it down.
    public static let shared = AsyncHTTPTransport()

    /// A transport that trusts the CA certificates in the PEM file at `path` as well as the system's: for an
    /// identity provider with a private CA (an on-premises one, a test provider).
    ///
    /// Like ``shared`` it lives as long as the process (async-http-client must be shut down before it is
    /// released): make one, once.
    public static func trusting(certificatesIn path: String) throws(TransportError) -> AsyncHTTPTransport {
        let certificates: [NIOSSLCertificate]
        do {
            certificates = try NIOSSLCertificate.fromPEMFile(path)
        } catch {
            throw TransportError(.connection, "\(path) holds no PEM certificate that can be read: \(error)")
        }
        guard !certificates.isEmpty else { throw TransportError(.connection, "\(path) holds no PEM certificate") }
        let transport = AsyncHTTPTransport(additionalTrustRoots: certificates)
        keptForTheProcess.withLock { $0.append(transport) }
        return transport
    }

    private static let keptForTheProcess = Mutex<[AsyncHTTPTransport]>([])

    /// Sends `request`, collecting at most ``maximumResponseBytes`` of body.
    public func send(_ request: HTTPRequest, timeout: Duration) async throws(TransportError) -> HTTPResponse {
        var outgoing = HTTPClientRequest(url: request.url.absoluteString)
        outgoing.method = request.method == .get ? .GET : .POST
        for header in request.headers { outgoing.headers.add(name: header.name, value: header.value) }
        if let body = request.body { outgoing.body = .bytes(ByteBuffer(bytes: body)) }
        do {
            let deadline = NIODeadline.now() + TimeAmount(timeout)
            let response = try await client.execute(outgoing, deadline: deadline)
            let body = try await response.body.collect(upTo: Self.maximumResponseBytes)
            return HTTPResponse(
                status: Int(response.status.code),
                headers: response.headers.map { ($0.name, $0.value) },
                body: Array(buffer: body)
            )
        } catch {
            throw Self.classify(error, request: request)
        }
    }

    private static func classify(_ error: any Error, request: HTTPRequest) -> TransportError {
        let target = request.url.host.map { host in request.url.port.map { "\(host):\($0)" } ?? host } ?? "?"
        if error is NIOTooManyBytesError {
            return TransportError(.responseTooLarge, "\(target) answered more than \(maximumResponseBytes) bytes")
        }
        if error is CancellationError { return TransportError(.canceled, "the request to \(target) was canceled") }
        if let error = error as? HTTPClientError {
            switch error {
            case .connectTimeout:
                return TransportError(.connection, "could not connect to \(target) in time")
            case .deadlineExceeded, .readTimeout, .writeTimeout:
                return TransportError(.timeout, "\(target) did not answer in time")
            case .cancelled:
                return TransportError(.canceled, "the request to \(target) was canceled")
            default:
                break
            }
        }
        if error is NIOSSLError || error is BoringSSLError {
            // The handshake failed (an untrusted or wrong certificate): nothing was sent.
            return TransportError(.connection, "no trusted TLS connection to \(target): \(error)")
        }
        // None of these errors carries a request body (requests with secrets are POSTs whose URL has no query), so
        // their text is safe to keep.
        let reason = Self.reason(error)
        if Self.neverConnected(error) {
            return TransportError(.connection, "could not connect to \(target): \(reason)")
        }
        return TransportError(.interrupted, "the exchange with \(target) broke off: \(reason)")
    }
}

extension AsyncHTTPTransport {
    /// What a socket error says to a person: the system's text for its errno (`Connection refused`), not NIO's
    /// description of the call that saw it; anything else as it describes itself, at most 200 characters.
    fileprivate static func reason(_ error: any Error) -> String {
        if let error = error as? IOError {
            return "\(String(cString: strerror(error.errnoCode))) (errno \(error.errnoCode))"
        }
        if let error = error as? NIOConnectionError,
            let io = (error.connectionErrors.map(\.error) + [error.dnsAAAAError, error.dnsAError].compactMap { $0 })
                .lazy.compactMap({ $0 as? IOError }).first
        {
            return "\(String(cString: strerror(io.errnoCode))) (errno \(io.errnoCode))"
        }
        return String(String(describing: error).prefix(200))
    }

    /// Whether `error` means no connection was made, so nothing was sent: refused, unreachable, the name unknown.
    fileprivate static func neverConnected(_ error: any Error) -> Bool {
        if error is NIOConnectionError || error is SocketAddressError { return true }
        if let error = error as? IOError {
            return [ECONNREFUSED, ENETUNREACH, EHOSTUNREACH, EADDRNOTAVAIL].contains(error.errnoCode)
        }
        return false
    }
}

extension TimeAmount {
    fileprivate init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
