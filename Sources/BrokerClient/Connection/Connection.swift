import BrokerProtocol
import Foundation
import NIOCore
import NIOPosix

/// One connection to the broker, carrying any number of concurrent calls.
final class Connection: Sendable {
    private let channel: any Channel
    let pending: PendingCalls
    let socketPath: String

    private init(channel: any Channel, pending: PendingCalls, socketPath: String) {
        self.channel = channel
        self.pending = pending
        self.socketPath = socketPath
    }

    /// Connects to the socket at `path`.
    static func connect(to path: String) async throws(BrokerError) -> Connection {
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
        do {
            let channel = try await bootstrap.connect(unixDomainSocketPath: path).get()
            return Connection(channel: channel, pending: pending, socketPath: path)
        } catch {
            throw Self.unavailable(path, error)
        }
    }

    private static func unavailable(_ path: String, _ error: any Error) -> BrokerError {
        let reason: String
        if !FileManager.default.fileExists(atPath: path) {
            reason = "no broker socket at \(path)"
        } else if let io = error as? IOError, io.errnoCode == EACCES {
            reason = "no permission to use \(path)"
        } else {
            reason = "nothing answers on \(path)"
        }
        return BrokerError(
            .brokerUnavailable,
            "the token broker is not running (\(reason)); start it with `systemctl --user start tokenbrokerd.socket`, "
                + "or run `tokenbrokerd` in a terminal"
        )
    }

    /// Sends a request and waits for its result.
    ///
    /// Cancelling the task abandons the wait (the broker may still finish the request).
    func call<Params: Encodable & Sendable, Result: Decodable & Sendable>(
        _ method: MethodName,
        _ params: Params,
        as type: Result.Type
    ) async throws(BrokerError) -> Result {
        let promise = channel.eventLoop.makePromise(of: (any Sendable).self)
        let id: RequestID
        switch pending.register(resultType: Result.self, promise: promise) {
        case .success(let registered): id = registered
        case .failure(let error):
            promise.fail(error)
            throw error
        }
        var bytes: [UInt8]
        do {
            bytes = try WireEncoder().encode(Request(id: id, method: method, params: params))
        } catch {
            let failure = BrokerError(.invalidRequest, "the request could not be encoded: \(error)")
            pending.complete(id, with: .failure(failure))
            throw failure
        }
        bytes.append(UInt8(ascii: "\n"))
        guard bytes.count <= WireProtocol.maximumFrameBytes + 1 else {
            let failure = BrokerError(
                .invalidRequest,
                "the request is \(bytes.count) bytes; the broker accepts at most \(WireProtocol.maximumFrameBytes)"
            )
            pending.complete(id, with: .failure(failure))
            throw failure
        }
        channel.writeAndFlush(ByteBuffer(bytes: bytes)).whenFailure { [pending] _ in
            pending.complete(id, with: .failure(BrokerError(.connectionLost, "the request could not be sent")))
        }
        let value: any Sendable
        do {
            value = try await withTaskCancellationHandler {
                try await promise.futureResult.get()
            } onCancel: { [pending] in
                pending.complete(id, with: .failure(BrokerError(.timeout, "the request was cancelled")))
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
}
