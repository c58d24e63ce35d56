import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// What the receiver does with a request that reached the redirect path.
public enum RedirectVerdict: Sendable {
    /// The sign-in's redirect: deliver it, answer with the page, refuse every later one.
    case accept(succeeded: Bool)
    /// Not this sign-in's (wrong `state`): answer 400, keep waiting.
    case reject(String)
}

/// The loopback listener of RFC 8252 §7.3: an HTTP server on 127.0.0.1 with an ephemeral port that waits for the
/// browser to come back from the provider, accepts the one redirect the judge approves, and shows a small page
/// telling the user they can close the window.
///
/// Requests to other paths get 404; redirects the judge rejects (another `state`) get 400 and the wait goes on;
/// after the accepted one, every redirect gets 400. The listener binds 127.0.0.1 only.
public final class LoopbackRedirectReceiver: Sendable {
    /// The port the listener got.
    public let port: Int
    /// The redirect URI to send to the provider: `http://<host>:<port><path>`.
    public let redirectURI: String
    private let channel: any Channel
    private let state: SharedState
    private let stream: AsyncStream<String>

    private init(port: Int, redirectURI: String, channel: any Channel, state: SharedState, stream: AsyncStream<String>)
    {
        self.port = port
        self.redirectURI = redirectURI
        self.channel = channel
        self.state = state
        self.stream = stream
    }

    /// Starts listening on 127.0.0.1.
    ///
    /// `host` is the host the redirect URI names, `127.0.0.1` or `localhost` (both reach this listener); `port` a
    /// fixed port, or 0 for an ephemeral one; `path` the path the redirect comes to; `judge` decides, from the full
    /// redirect URL, whether a redirect is the sign-in's.
    public static func start(
        host: String = "127.0.0.1",
        port: Int = 0,
        path: String = "/",
        judge: @escaping @Sendable (String) -> RedirectVerdict
    ) async throws -> LoopbackRedirectReceiver {
        let (stream, continuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(1))
        let path = path.isEmpty ? "/" : path
        let state = SharedState(path: path, judge: judge, continuation: continuation)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(RedirectHandler(state: state))
                }
            }
            .bind(host: "127.0.0.1", port: port)
            .get()
        guard let boundPort = channel.localAddress?.port else {
            try? await channel.close()
            throw RedirectRejection("the loopback listener has no port")
        }
        state.setOrigin("http://\(host):\(boundPort)")
        return LoopbackRedirectReceiver(
            port: boundPort,
            redirectURI: "http://\(host):\(boundPort)\(path)",
            channel: channel,
            state: state,
            stream: stream
        )
    }

    /// Waits for the accepted redirect and returns its full URL; nil when the task was canceled or the receiver
    /// closed first.
    public func redirect() async -> String? {
        var iterator = stream.makeAsyncIterator()
        return await iterator.next()
    }

    /// Stops listening.
    ///
    /// Connections in progress are closed.
    public func close() async {
        state.finish()
        try? await channel.close()
    }

    fileprivate final class SharedState: Sendable {
        let path: String
        let judge: @Sendable (String) -> RedirectVerdict
        private let continuation: AsyncStream<String>.Continuation
        private let mutable = Mutex<(origin: String, done: Bool)>(("", false))

        init(
            path: String,
            judge: @escaping @Sendable (String) -> RedirectVerdict,
            continuation: AsyncStream<String>.Continuation
        ) {
            self.path = path
            self.judge = judge
            self.continuation = continuation
        }

        func setOrigin(_ origin: String) {
            mutable.withLock { $0.origin = origin }
        }

        /// Judges a request to the redirect path: the status and page to answer.
        func handle(uri: String) -> (HTTPResponseStatus, String) {
            let url = mutable.withLock { $0.origin } + uri
            return mutable.withLock { state -> (HTTPResponseStatus, String) in
                guard !state.done else {
                    return (.badRequest, Page.render(title: "Already done", text: "This sign-in is already complete."))
                }
                switch judge(url) {
                case .reject(let reason):
                    return (
                        .badRequest,
                        Page.render(title: "Not this sign-in", text: "This redirect was refused: \(reason).")
                    )
                case .accept(let succeeded):
                    state.done = true
                    continuation.yield(url)
                    continuation.finish()
                    return succeeded
                        ? (.ok, Page.render(title: "Signed in", text: "You are signed in. You can close this window."))
                        : (
                            .ok,
                            Page.render(
                                title: "Sign-in did not complete",
                                text: "The sign-in did not complete. You can close this window and try again."
                            )
                        )
                }
            }
        }

        func finish() {
            mutable.withLock { $0.done = true }
            continuation.finish()
        }
    }
}

private final class RedirectHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let state: LoopbackRedirectReceiver.SharedState
    private var head: HTTPRequestHead?

    init(state: LoopbackRedirectReceiver.SharedState) {
        self.state = state
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head): self.head = head
        case .body: break
        case .end:
            guard let head else { return }
            self.head = nil
            respond(to: head, context: context)
        }
    }

    private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
        let (status, page): (HTTPResponseStatus, String)
        if head.method != .GET {
            (status, page) = (.methodNotAllowed, Page.render(title: "Not allowed", text: "Only GET is served here."))
        } else if path != state.path {
            (status, page) = (.notFound, Page.render(title: "Not found", text: "Nothing here."))
        } else {
            (status, page) = state.handle(uri: head.uri)
        }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "text/html; charset=utf-8")
        headers.add(name: "Content-Length", value: "\(page.utf8.count)")
        headers.add(name: "Cache-Control", value: "no-store")
        headers.add(name: "Referrer-Policy", value: "no-referrer")
        headers.add(name: "Connection", value: "close")
        let body = context.channel.allocator.buffer(string: page)
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))),
            promise: nil
        )
        context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }
}

/// The small pages the listener shows.
private enum Page {
    static func render(title: String, text: String) -> String {
        """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><title>\(escape(title)) — tokenbroker</title>
        <style>body{font-family:system-ui,sans-serif;margin:4em auto;max-width:32em;color:#222}</style></head>
        <body><h1>\(escape(title))</h1><p>\(escape(text))</p></body></html>

        """
    }

    static func escape(_ text: String) -> String {
        var out = ""
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(character)
            }
        }
        return out
    }
}
