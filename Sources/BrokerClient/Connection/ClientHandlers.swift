import BrokerProtocol
import NIOCore

/// Splits the broker's byte stream into lines, bounded by the largest response the protocol allows.
///
/// Remembers how far it has looked for the newline, so a large answer arriving in many reads is scanned once.
struct LineDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    /// Bytes after the reader index already known to hold no newline.
    private var scanned = 0

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        let unscanned = buffer.readableBytesView.dropFirst(scanned)
        guard let newline = unscanned.firstIndex(of: UInt8(ascii: "\n")) else {
            scanned = buffer.readableBytes
            if scanned > WireProtocol.maximumResponseBytes {
                throw BrokerError(.internal, "the broker sent a message larger than the protocol allows")
            }
            return .needMoreData
        }
        scanned = 0
        let length = newline - buffer.readerIndex
        guard let line = buffer.readSlice(length: length) else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: 1)
        context.fireChannelRead(wrapInboundOut(line))
        return .continue
    }
}

/// Routes each message from the broker: responses to their waiting calls, notifications to their listeners.
final class MessageRouter: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let pending: PendingCalls
    private let decoder: ServerMessageDecoder

    init(pending: PendingCalls) {
        self.pending = pending
        self.decoder = ServerMessageDecoder { [pending] id in pending.resultType(for: id) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let line = unwrapInboundIn(data)
        let message: ServerMessage
        do {
            message = try decoder.decode(Array(line.readableBytesView))
        } catch {
            // A line we cannot read means client and broker disagree about the protocol: stop here.
            pending.closeAll(BrokerError(.internal, "the broker sent a message this library cannot read"))
            context.close(promise: nil)
            return
        }
        switch message {
        case .result(let id, let result): pending.complete(id, with: .success(result))
        case .error(let id?, let error): pending.complete(id, with: .failure(BrokerError(error)))
        case .error(nil, let error):
            // Not tied to a request: the broker refused the connection or a frame; it closes next.
            pending.closeAll(BrokerError(error))
        case .notification(let notification): pending.deliver(notification)
        case .orphanResponse:
            // The answer to a call that was cancelled: nobody waits for it.
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        pending.closeAll(BrokerError(.connectionLost, "the connection to the broker closed"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        pending.closeAll(error as? BrokerError ?? BrokerError(.connectionLost, "the connection to the broker failed"))
        context.close(promise: nil)
    }
}
