import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// A small HTTP/1.1 server: one task per connection, requests answered in order, `Content-Length` bodies.
///
/// With a TLS context it serves HTTPS: the TLS handler goes first in each connection's pipeline, before the HTTP ones.
///
/// Shape of SwiftNIO's `NIOTCPEchoServer`: an async bind, a discarding task group, one child task per connection, and
/// each connection catches its own errors. A handler that holds its answer back (the token endpoint's delays) waits in
/// its connection's task, never on an event loop, so a slow answer holds up nothing but its own connection.
struct HTTPServer: Sendable {
    /// One accepted connection, speaking decoded HTTP parts.
    typealias Connection = NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>

    /// What answers each request.
    typealias Handler = @Sendable (HTTPRequest) async -> HTTPResponse

    /// The largest request body accepted; larger ones get 413 and the connection is closed.
    static let maximumBodyBytes = 1 << 20

    /// The port the listener is bound to.
    let port: Int

    private let listener: NIOAsyncChannel<Connection, Never>

    private init(listener: NIOAsyncChannel<Connection, Never>, port: Int) {
        self.listener = listener
        self.port = port
    }

    /// Binds a listener on `host`:`port` (port 0 picks a free one); nothing is served until `run` is called.
    ///
    /// With `tls`, every connection speaks TLS with that context (HTTPS); without it, plain HTTP.
    ///
    /// With `timing`, the v2.0 token endpoint's answers are timed at the connection (``ServedTime``).
    static func bind(
        host: String,
        port: Int,
        tls: NIOSSLContext? = nil,
        timing: ServedTime? = nil,
        group: MultiThreadedEventLoopGroup = .singleton
    ) async throws -> HTTPServer {
        let listener = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 256)
            .bind(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls))
                    }
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    if let timing {
                        try channel.pipeline.syncOperations.addHandler(timing.handler())
                    }
                    return try Connection(wrappingChannelSynchronously: channel)
                }
            }
        guard let bound = listener.channel.localAddress?.port else {
            throw ChannelError.unknownLocalAddress
        }
        return HTTPServer(listener: listener, port: bound)
    }

    /// Serves connections until the listener closes or the task is cancelled.
    func run(handler: @escaping Handler) async throws {
        try await withThrowingDiscardingTaskGroup { group in
            try await listener.executeThenClose { inbound in
                for try await connection in inbound {
                    group.addTask {
                        await Self.serve(connection, handler: handler)
                    }
                }
            }
        }
    }

    /// Answers the requests of one connection in order until the peer closes, a request asks to close, or an error.
    private static func serve(_ connection: Connection, handler: Handler) async {
        do {
            try await connection.executeThenClose { inbound, outbound in
                var head: HTTPRequestHead?
                var body = ByteBuffer()
                var tooLarge = false
                for try await part in inbound {
                    switch part {
                    case .head(let requestHead):
                        head = requestHead
                        body.clear()
                        tooLarge = false
                    case .body(var chunk):
                        if body.readableBytes + chunk.readableBytes > maximumBodyBytes {
                            tooLarge = true
                        } else if !tooLarge {
                            body.writeBuffer(&chunk)
                        }
                    case .end:
                        guard let requestHead = head else { continue }
                        head = nil
                        let keepAlive = requestHead.isKeepAlive && !tooLarge
                        let response: HTTPResponse
                        if tooLarge {
                            response = .json(
                                ControlError(error: "invalid_request", message: "the body is over 1 MiB"),
                                status: .payloadTooLarge
                            )
                        } else {
                            response = await handler(HTTPRequest(head: requestHead, body: body))
                        }
                        // Shutting down while the handler waited: nothing more is written.
                        try Task.checkCancellation()
                        Log.info("\(requestHead.method) \(pathOnly(requestHead.uri)) \(response.status.code)")
                        try await outbound.write(
                            contentsOf: parts(of: response, for: requestHead, keepAlive: keepAlive)
                        )
                        if !keepAlive { return }
                    }
                }
            }
        } catch is CancellationError {
            // Shutting down.
        } catch NIOSSLError.uncleanShutdown {
            // A TLS client that closed without close_notify, as many HTTP clients do once they have their answer.
        } catch {
            Log.info("connection ended: \(error)")
        }
    }

    private static func parts(
        of response: HTTPResponse,
        for request: HTTPRequestHead,
        keepAlive: Bool
    ) -> [HTTPServerResponsePart] {
        var headers = response.headers
        let body = request.method == .HEAD ? [] : response.body
        headers.replaceOrAdd(name: "Content-Length", value: String(response.body.count))
        if !keepAlive {
            headers.replaceOrAdd(name: "Connection", value: "close")
        } else if request.version.major == 1 && request.version.minor == 0 {
            headers.replaceOrAdd(name: "Connection", value: "keep-alive")
        }
        return [
            .head(HTTPResponseHead(version: request.version, status: response.status, headers: headers)),
            .body(.byteBuffer(ByteBuffer(bytes: body))),
            .end(nil),
        ]
    }

    /// The URI without its query, so that logs show no codes, states or challenges.
    private static func pathOnly(_ uri: String) -> Substring {
        uri.prefix { $0 != "?" }
    }
}
