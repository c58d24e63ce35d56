import BrokerProtocol
import Glibc

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// How calls reach the broker: the event-loop connection (concurrent calls) or the blocking one (one call at a
/// time, nothing started in the background).
protocol Transport: Sendable {
    var socketPath: String { get }

    /// Sends a request and returns its result; throws the broker's error, or a transport failure.
    ///
    /// A call without a correlation id gets a new one here (Protocol/ §3).
    func call<Method: BrokerMethod>(
        _ method: Method.Type,
        _ params: Method.Params
    ) async throws(BrokerError)
        -> Method.Result

    /// Delivers the notifications of the request with this correlation id to `listener`.
    func listen(to correlationId: String, _ listener: @escaping @Sendable (ServerNotification) -> Void)

    /// Stops delivering them.
    func stopListening(to correlationId: String)

    /// Closes the connection.
    func close() async
}

/// One request line: the wire encoding of the request and its newline, refused when over the frame limit.
///
/// Params without a correlation id get a new one.
func requestFrame<Method: BrokerMethod>(
    id: RequestID,
    method: Method.Type,
    params: Method.Params
) throws(BrokerError) -> [UInt8] {
    var call = Call<Method>(params)
    _ = call.ensureCorrelationId()
    var bytes: [UInt8]
    do {
        bytes = try WireEncoder().encode(Request(id: id, method: Method.name, params: call.params))
    } catch {
        throw BrokerError(.invalidRequest, "the request could not be encoded: \(error)")
    }
    guard bytes.count <= WireProtocol.maximumFrameBytes else {
        throw BrokerError(
            .invalidRequest,
            "the request is \(bytes.count) bytes; the broker accepts at most \(WireProtocol.maximumFrameBytes)"
        )
    }
    bytes.append(UInt8(ascii: "\n"))
    return bytes
}

/// Refuses a socket whose directory is not the user's own private one: another user could be listening there
/// (Protocol/ §14).
func checkSocketDirectory(_ path: String) throws(BrokerError) {
    switch SocketLocation.directoryProblem(ofSocket: path) {
    case nil: return
    case .missing: throw BrokerError.unavailable(path, errno: ENOENT)
    case .untrusted(let reason):
        throw BrokerError(
            .permissionDenied,
            "refusing to connect to \(path): \(reason); a broker socket must be in a directory of your own that only "
                + "you can use (mode 0700)"
        )
    }
}

/// Refuses a connection whose peer runs as another user: it is not this user's broker (Protocol/ §14).
func checkPeer(_ peer: PeerCredentials?, at path: String) throws(BrokerError) {
    guard let peer else {
        throw BrokerError(.permissionDenied, "refusing \(path): the kernel does not say who serves it")
    }
    guard peer.uid == getuid() else {
        throw BrokerError(
            .permissionDenied,
            "refusing \(path): it is served by another user (uid \(peer.uid)), not by your broker"
        )
    }
}

extension BrokerError {
    /// No broker answers at `path`: why, and how to start one.
    static func unavailable(_ path: String, errno code: Int32) -> BrokerError {
        let reason: String
        if !FileManager.default.fileExists(atPath: path) {
            reason = "no broker socket at \(path)"
        } else if code == EACCES {
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
}
