public import Foundation
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
/// It also serves the sign-in's start page (``startPage(redirectingTo:)``): a one-time path that sends the browser
/// on to the authorization URL, so that the URL, with its `state`, `nonce`, PKCE challenge and login hint, never
/// appears on a command line, which every local user can read in `/proc`.
///
/// Only processes of this user are served: the owner of each connection's peer socket is looked up in the kernel's
/// table (`/proc/net/tcp`), and anyone else gets 403, whatever `state` they bring. Requests to other paths get
/// 404; redirects the judge rejects (another `state`) get 400 and the wait goes on; after the accepted one, every
/// redirect gets 400. At most ``maximumConnections`` connections of the user are open at once, each for at most
/// its request timeout (10 seconds unless told); another user's get their 403 at once, in a pool of their own
/// (``maximumForeignConnections``, closed after ``foreignTimeout``), so a flood from another user takes neither the
/// user's slots nor the daemon's descriptors. Closing the receiver closes them all.
public final class LoopbackRedirectReceiver: Sendable {
    /// The port the listener got.
    public let port: Int
    /// The redirect URI to send to the provider: `http://<host>:<port><path>`.
    public let redirectURI: String
    private let channels: [any Channel]
    private let state: SharedState
    private let stream: AsyncStream<String>

    /// Connections of the user open at once; more are closed at once (a flood must not take the daemon's
    /// descriptors).
    public static let maximumConnections = 16
    /// Connections of other users open at once, each answered 403 as it comes; more are closed unanswered.
    public static let maximumForeignConnections = 8
    /// How long another user's connection stays open after its 403, for its request to arrive (closing a socket
    /// with unread input resets it, and the 403 would be lost).
    static let foreignTimeout: TimeAmount = .seconds(2)

    private init(
        port: Int,
        redirectURI: String,
        channels: [any Channel],
        state: SharedState,
        stream: AsyncStream<String>
    ) {
        self.port = port
        self.redirectURI = redirectURI
        self.channels = channels
        self.state = state
        self.stream = stream
    }

    /// Starts listening on 127.0.0.1, and on ::1 as well when `host` is `localhost` (a browser may resolve it to
    /// either).
    ///
    /// `host` is the host the redirect URI names, `127.0.0.1` or `localhost`; `port` a fixed port, or 0 for an
    /// ephemeral one; `path` the path the redirect comes to; `requestTimeout` the longest one connection may take to
    /// send its request (then it is closed); `judge` decides, from the full redirect URL, whether a redirect is the
    /// sign-in's.
    public static func start(
        host: String = "127.0.0.1",
        port: Int = 0,
        path: String = "/",
        requestTimeout: Duration = .seconds(10),
        judge: @escaping @Sendable (String) -> RedirectVerdict
    ) async throws -> LoopbackRedirectReceiver {
        let (stream, continuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(1))
        let path = path.isEmpty ? "/" : path
        let state = SharedState(
            path: path,
            requestTimeout: TimeAmount(requestTimeout),
            judge: judge,
            continuation: continuation
        )
        var lastError: (any Error)?
        // With localhost, the same port on ::1 too; an ephemeral port taken there is tried again a few times.
        for _ in 0..<(host == "localhost" && port == 0 ? 8 : 1) {
            do {
                let ipv4 = try await bind(host: "127.0.0.1", port: port, state: state)
                guard let boundPort = ipv4.localAddress?.port else {
                    try? await ipv4.close()
                    throw RedirectRejection("the loopback listener has no port")
                }
                var channels = [ipv4]
                if host == "localhost" {
                    do {
                        channels.append(try await bind(host: "::1", port: boundPort, state: state))
                    } catch let error as IOError where error.errnoCode == EADDRINUSE && port == 0 {
                        try? await ipv4.close()
                        lastError = error
                        continue
                    } catch {
                        // No IPv6 on this machine: 127.0.0.1 alone serves every browser here.
                    }
                }
                state.setOrigin("http://\(host):\(boundPort)")
                return LoopbackRedirectReceiver(
                    port: boundPort,
                    redirectURI: "http://\(host):\(boundPort)\(path)",
                    channels: channels,
                    state: state,
                    stream: stream
                )
            } catch let error as RedirectRejection {
                throw error
            } catch {
                lastError = error
            }
        }
        throw lastError ?? RedirectRejection("the loopback listener could not start")
    }

    private static func bind(host: String, port: Int, state: SharedState) async throws -> any Channel {
        try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let owner = LoopbackPeer.owner(local: channel.localAddress, remote: channel.remoteAddress)
                    guard !owner.isForeign else {
                        // Another user's: a 403 right away, in their own small pool; never the user's slots.
                        guard state.admit(channel, foreign: true) else {
                            channel.close(promise: nil)
                            return
                        }
                        try channel.pipeline.syncOperations.addHandler(ForeignConnectionHandler())
                        channel.eventLoop.scheduleTask(in: foreignTimeout) { channel.close(promise: nil) }
                        return
                    }
                    guard state.admit(channel, foreign: false) else {
                        channel.close(promise: nil)
                        return
                    }
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(RedirectHandler(state: state))
                    // However slowly a request comes, the connection is closed after the timeout.
                    channel.eventLoop.scheduleTask(in: state.requestTimeout) { channel.close(promise: nil) }
                }
            }
            .bind(host: host, port: port)
            .get()
    }

    /// Serves a one-time start page that sends the browser on to `url`; returns its address, for the browser's
    /// command line (the first fetch takes it).
    ///
    /// The address holds a random path and nothing of the authorization request.
    public func startPage(redirectingTo url: URL) -> URL {
        let token = RandomToken.make()
        state.setStart(path: "/tokenbroker/start/\(token)", target: url)
        return URL(string: state.origin + "/tokenbroker/start/\(token)") ?? url
    }

    /// Waits for the accepted redirect and returns its full URL; nil when the task was canceled or the receiver
    /// closed first.
    public func redirect() async -> String? {
        var iterator = stream.makeAsyncIterator()
        return await iterator.next()
    }

    /// Stops listening and closes every connection still open.
    public func close() async {
        state.finish()
        for channel in channels { try? await channel.close() }
        for connection in state.takeConnections() { try? await connection.close() }
    }

    /// How many connections are open now (for tests and status).
    public var openConnections: Int {
        state.connectionCount
    }

    fileprivate final class SharedState: Sendable {
        let path: String
        let requestTimeout: TimeAmount
        let judge: @Sendable (String) -> RedirectVerdict
        private let continuation: AsyncStream<String>.Continuation
        private let mutable = Mutex<Mutable>(Mutable())

        private struct Mutable {
            var origin = ""
            var done = false
            var startPath: String?
            var startTarget: URL?
            var connections: [ObjectIdentifier: any Channel] = [:]
            var foreign: [ObjectIdentifier: any Channel] = [:]
        }

        init(
            path: String,
            requestTimeout: TimeAmount,
            judge: @escaping @Sendable (String) -> RedirectVerdict,
            continuation: AsyncStream<String>.Continuation
        ) {
            self.path = path
            self.requestTimeout = requestTimeout
            self.judge = judge
            self.continuation = continuation
        }

        var origin: String {
            mutable.withLock { $0.origin }
        }

        func setOrigin(_ origin: String) {
            mutable.withLock { $0.origin = origin }
        }

        func setStart(path: String, target: URL) {
            mutable.withLock {
                $0.startPath = path
                $0.startTarget = target
            }
        }

        /// Takes a new connection, unless its pool (the user's, or other users') is full.
        func admit(_ channel: any Channel, foreign: Bool) -> Bool {
            let id = ObjectIdentifier(channel)
            let admitted = mutable.withLock { state -> Bool in
                if foreign {
                    guard state.foreign.count < LoopbackRedirectReceiver.maximumForeignConnections else { return false }
                    state.foreign[id] = channel
                } else {
                    guard state.connections.count < LoopbackRedirectReceiver.maximumConnections else { return false }
                    state.connections[id] = channel
                }
                return true
            }
            if admitted {
                channel.closeFuture.whenComplete { _ in
                    self.mutable.withLock {
                        _ = foreign ? $0.foreign.removeValue(forKey: id) : $0.connections.removeValue(forKey: id)
                    }
                }
            }
            return admitted
        }

        var connectionCount: Int {
            mutable.withLock { $0.connections.count }
        }

        func takeConnections() -> [any Channel] {
            mutable.withLock { state in
                defer { state.connections.removeAll() }
                return Array(state.connections.values)
            }
        }

        /// Where the start page sends the browser, for a request to `path`; nil for any other path.
        ///
        /// The page is served once: whoever read its address afterwards (from the browser's command line) finds
        /// nothing there.
        func takeStartTarget(for path: String) -> URL? {
            mutable.withLock { state in
                guard !state.done, let startPath = state.startPath, startPath == path else { return nil }
                defer {
                    state.startPath = nil
                    state.startTarget = nil
                }
                return state.startTarget
            }
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
        var headers = HTTPHeaders()
        let (status, page): (HTTPResponseStatus, String)
        if head.method != .GET {
            (status, page) = (.methodNotAllowed, Page.render(title: "Not allowed", text: "Only GET is served here."))
        } else if let target = state.takeStartTarget(for: path) {
            headers.add(name: "Location", value: target.absoluteString)
            (status, page) = (.found, Page.render(title: "Signing in", text: "Continue to the sign-in page."))
        } else if path == state.path {
            (status, page) = state.handle(uri: head.uri)
        } else {
            (status, page) = (.notFound, Page.render(title: "Not found", text: "Nothing here."))
        }
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

/// Answers another user's connection 403 as soon as it opens, reads and drops whatever it sends, and closes when
/// the peer does (or at the pool's timeout): nothing of this sign-in is theirs.
private final class ForeignConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private static let response: String = {
        let page = Page.render(title: "Not yours", text: "This sign-in belongs to another user.")
        return "HTTP/1.1 403 Forbidden\r\nContent-Type: text/html; charset=utf-8\r\n"
            + "Content-Length: \(page.utf8.count)\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n" + page
    }()

    func handlerAdded(context: ChannelHandlerContext) {
        let response = context.channel.allocator.buffer(string: Self.response)
        context.writeAndFlush(wrapOutboundOut(response), promise: nil)
    }

    /// The request is read and dropped; the peer's end of input closes the channel (no half-closure allowed).
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
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
