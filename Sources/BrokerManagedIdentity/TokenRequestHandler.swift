import BrokerCore
import BrokerProtocol
import NIOCore
import NIOHTTP1

/// One connection of the endpoint: reads one request, answers it, closes.
///
/// The answer is App Service's (`api-version=2019-08-01`): `access_token`, `expires_on` (epoch seconds, as a
/// string), `resource`, `token_type`, `client_id`; an error is `{"statusCode": …, "message": …}`, which MSAL and the
/// Azure SDKs turn into their own error with the message.
final class TokenRequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let endpoint: IdentityEndpoint
    private let admitted: Bool
    private let deadline: Scheduled<Void>
    private var head: HTTPRequestHead?
    private var bodyBytes = 0
    private var answering = false

    /// The most body a request may carry (a GET carries none; this bounds what is read before answering 400).
    static let maximumBody = 4096

    init(endpoint: IdentityEndpoint, admitted: Bool, deadline: Scheduled<Void>) {
        self.endpoint = endpoint
        self.admitted = admitted
        self.deadline = deadline
    }

    func channelActive(context: ChannelHandlerContext) {
        // A full listener: closed at once, so a flood holds no descriptors.
        if !admitted { context.close(promise: nil) }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard admitted, !answering else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body(let body):
            bodyBytes += body.readableBytes
            if bodyBytes > Self.maximumBody {
                reply(.failure(.payloadTooLarge, "a token request has no body"), context: context)
            }
        case .end:
            guard let head else { return }
            deadline.cancel()
            answer(head, context: context)
        }
    }

    private func answer(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let request = EndpointRequest.parse(
            head,
            hasBody: bodyBytes > 0,
            local: context.channel.localAddress,
            remote: context.channel.remoteAddress
        )
        switch request.flatMap({ endpoint.prepare($0) }) {
        case .failure(let failure):
            reply(.failure(failure.status, failure.message), context: context)
        case .success(.now(let reply)):
            self.reply(reply, context: context)
        case .success(.later(let work)):
            answering = true
            let promise = context.eventLoop.makePromise(of: Reply.self)
            promise.completeWithTask { await work() }
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            promise.futureResult.whenSuccess { reply in
                bound.value.0.reply(reply, context: bound.value.1)
            }
        }
    }

    /// Bytes that are not HTTP (or headers over NIO's 80 KiB): 431 or 400 in the SDKs' error shape, then the output
    /// closed while the rest of what the client sends is read and dropped, so that it reads the answer instead of a
    /// reset; the request's deadline closes the connection at the latest.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // After the parser's error, NIO's decoder reports each later read as data in its error state: the lingering
        // close reads on and drops it (closing now would reset the connection under the answer still on its way).
        if answering, case .dataReceivedInErrorState? = error as? ByteToMessageDecoderError { return }
        guard admitted, !answering, let parse = error as? HTTPParserError else {
            context.close(promise: nil)
            return
        }
        let reply: Reply =
            parse == .headerOverflow
            ? .failure(.requestHeaderFieldsTooLarge, "the request's headers are over 80 KiB")
            : .failure(.badRequest, "not an HTTP request the endpoint reads: \(parse)")
        self.reply(reply, context: context, lingering: true)
    }

    private func reply(_ reply: Reply, context: ChannelHandlerContext, lingering: Bool = false) {
        answering = true
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json; charset=utf-8")
        headers.add(name: "Content-Length", value: "\(reply.body.count)")
        headers.add(name: "Cache-Control", value: "no-store")
        headers.add(name: "Connection", value: "close")
        let head = HTTPResponseHead(version: .http1_1, status: reply.status, headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: reply.body)))), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            channel.close(mode: lingering ? .output : .all, promise: nil)
        }
    }
}

/// An answer of the endpoint: a status and a JSON body.
struct Reply: Sendable {
    let status: HTTPResponseStatus
    let body: [UInt8]

    /// The token answer.
    static func token(_ token: TokenAnswer) -> Reply {
        Reply(status: .ok, body: encode(token))
    }

    /// App Service's error shape.
    static func failure(_ status: HTTPResponseStatus, _ message: String) -> Reply {
        Reply(status: status, body: encode(ErrorAnswer(message: message, statusCode: Int(status.code))))
    }

    /// The broker's own encoder (members in declaration order, which is alphabetical below).
    private static func encode(_ value: some Encodable) -> [UInt8] {
        (try? WireEncoder().encode(value)) ?? Array("{}".utf8)
    }
}

/// The token, as App Service answers it.
struct TokenAnswer: Encodable {
    // swift-format-ignore: AlwaysUseLowerCamelCase
    let access_token: String
    // swift-format-ignore: AlwaysUseLowerCamelCase
    let client_id: String
    // swift-format-ignore: AlwaysUseLowerCamelCase
    let expires_on: String
    let resource: String
    // swift-format-ignore: AlwaysUseLowerCamelCase
    let token_type: String
}

/// An error, as App Service answers it.
struct ErrorAnswer: Encodable {
    let message: String
    let statusCode: Int
}

/// Why a request gets no token: the status and a message for the holder (never a secret).
struct Refusal: Error {
    let status: HTTPResponseStatus
    let message: String

    init(_ status: HTTPResponseStatus, _ message: String) {
        self.status = status
        self.message = message
    }
}
