import BrokerProtocol
import NIOCore
import NIOPosix

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A connection on SwiftNIO's event loops, carrying any number of concurrent calls and their notifications.
final class EventLoopConnection: Transport {
    private let channel: any Channel
    let pending: PendingCalls
    let socketPath: String

    private init(channel: any Channel, pending: PendingCalls, socketPath: String) {
        self.channel = channel
        self.pending = pending
        self.socketPath = socketPath
    }

    /// Connects to the socket at `path`.
    static func connect(to path: String) async throws(BrokerError) -> EventLoopConnection {
        try checkSocketDirectory(path)
        let pending = PendingCalls()
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(5))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers(
                        ByteToMessageHandler(LineDecoder()),
                        MessageRouter(pending: pending)
                    )
                }
            }
        let channel: any Channel
        do {
            channel = try await bootstrap.connect(unixDomainSocketPath: path).get()
        } catch {
            throw BrokerError.unavailable(path, errno: (error as? IOError)?.errnoCode ?? 0)
        }
        let peer =
            try? await (channel as? any SocketOptionProvider)?
            .unsafeGetSocketOption(level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
            .get() as PeerCredentials?
        do {
            try checkPeer(peer, at: path)
        } catch {
            try? await channel.close()
            throw error
        }
        return EventLoopConnection(channel: channel, pending: pending, socketPath: path)
    }

    /// Sends a request and waits for its result.
    ///
    /// Cancelling the task abandons the wait (the broker may still finish the request).
    func call<Method: BrokerMethod>(
        _ method: Method.Type,
        _ params: Method.Params
    ) async throws(BrokerError)
        -> Method.Result
    {
        typealias Result = Method.Result
        // The broker takes so many requests of one connection at once; the rest wait here for a slot, which the
        // broker's answer frees (PendingCalls).
        do {
            try await pending.slots.acquire()
        } catch {
            throw BrokerError(.timeout, "the request was cancelled")
        }
        let promise = channel.eventLoop.makePromise(of: (any Sendable).self)
        let id: RequestID
        switch pending.register(resultType: Result.self, promise: promise) {
        case .success(let registered): id = registered
        case .failure(let error):
            pending.slots.release()
            promise.fail(error)
            throw error
        }
        let bytes: [UInt8]
        do throws(BrokerError) {
            bytes = try requestFrame(id: id, method: method, params: params)
        } catch {
            pending.complete(id, with: .failure(error))
            throw error
        }
        channel.writeAndFlush(ByteBuffer(bytes: bytes)).whenFailure { [pending] _ in
            pending.complete(id, with: .failure(BrokerError(.connectionLost, "the request could not be sent")))
        }
        let value: any Sendable
        do {
            value = try await withTaskCancellationHandler {
                try await promise.futureResult.get()
            } onCancel: { [pending] in
                pending.abandon(id, with: BrokerError(.timeout, "the request was cancelled"))
            }
        } catch let error as BrokerError {
            throw error
        } catch {
            throw BrokerError(.internal, "the call failed unexpectedly")
        }
        guard let result = value as? Result else {
            throw BrokerError(.internal, "the broker's answer has an unexpected shape")
        }
        return result
    }

    /// Closes the connection; calls still waiting fail with `connection_lost`.
    func close() async {
        try? await channel.close()
    }

    func listen(to correlationId: String, _ listener: @escaping @Sendable (ServerNotification) -> Void) {
        pending.listen(to: correlationId, listener)
    }

    func stopListening(to correlationId: String) {
        pending.stopListening(to: correlationId)
    }
}
