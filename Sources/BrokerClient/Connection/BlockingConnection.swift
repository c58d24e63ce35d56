import BrokerProtocol
import Glibc
import Synchronization

/// A connection that does blocking socket I/O on the calling thread, one call at a time.
///
/// It starts no thread and no event loop, so a short-lived tool spends its time on its one request rather than
/// on setting up concurrency (about 2 ms of a 5 ms process, measured). Concurrent calls queue behind each other;
/// a call cannot be cancelled once sent (the process can be). Notifications for the running call are delivered
/// on the calling thread while it waits; a listener must not call the broker itself (the call lock is held).
package final class BlockingConnection: Transport {
    let socketPath: String
    /// Held for the whole of a call: calls run one at a time.
    private let state: Mutex<State>
    /// Separate, so a listener runs without the call lock's listener table locked.
    private let listeners = Mutex<[String: @Sendable (ServerNotification) -> Void]>([:])

    private struct State {
        var fd: Int32
        var nextID: Int64 = 1
        var buffer: [UInt8] = []
    }

    private init(fd: Int32, socketPath: String) {
        self.socketPath = socketPath
        self.state = Mutex(State(fd: fd))
    }

    deinit {
        state.withLock { state in
            if state.fd >= 0 { Glibc.close(state.fd) }
        }
    }

    /// Connects to the socket at `path`.
    package static func connect(to path: String) throws(BrokerError) -> BlockingConnection {
        try checkSocketDirectory(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw BrokerError(.internal, "cannot create a socket") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            Glibc.close(fd)
            throw BrokerError(.invalidRequest, "the socket path is too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else {
            let code = errno
            Glibc.close(fd)
            throw BrokerError.unavailable(path, errno: code)
        }
        do {
            try checkPeer(PeerCredentials.of(socket: fd), at: path)
        } catch {
            Glibc.close(fd)
            throw error
        }
        return BlockingConnection(fd: fd, socketPath: path)
    }

    func call<Method: BrokerMethod>(
        _ method: Method.Type,
        _ params: Method.Params
    ) async throws(BrokerError)
        -> Method.Result
    {
        try state.withLock { (state) throws(BrokerError) -> Method.Result in
            guard state.fd >= 0 else { throw BrokerError(.connectionLost, "the connection to the broker is closed") }
            let id = RequestID.number(state.nextID)
            state.nextID += 1
            try Self.send(try requestFrame(id: id, method: method, params: params), on: state.fd)
            return try answer(to: id, as: Method.Result.self, first: try Self.readLine(&state), state: &state)
        }
    }

    /// The answer to the call `id`, from `first` (a line already read) on: its result, or its error thrown;
    /// notifications go to their listeners on the way, answers to earlier, abandoned calls are passed over.
    private func answer<Result: Decodable & Sendable>(
        to id: RequestID,
        as type: Result.Type,
        first: [UInt8],
        state: inout State
    ) throws(BrokerError) -> Result {
        let decoder = ServerMessageDecoder { candidate in candidate == id ? Result.self : nil }
        var line = first
        while true {
            let message: ServerMessage
            do {
                message = try decoder.decode(line)
            } catch {
                throw BrokerError(.internal, "the broker sent a message this library cannot read")
            }
            switch message {
            case .result(id, let value):
                guard let result = value as? Result else {
                    throw BrokerError(.internal, "the broker's answer has an unexpected shape")
                }
                return result
            case .error(let errorID, let error) where errorID == id || errorID == nil:
                throw BrokerError(error)
            case .notification(let notification):
                if let correlationId = notification.correlationId,
                    let listener = listeners.withLock({ $0[correlationId] })
                {
                    listener(notification)
                }
            default:
                // An answer to an earlier, abandoned call: not ours.
                break
            }
            line = try Self.readLine(&state)
        }
    }

    /// `acquireTokenSilently` written and read without Codable (see ``SilentCall``): the token, or the broker's error.
    ///
    /// For a tool whose run is this one call. An answer the plain reader does not take (an error, a shape it leaves
    /// alone) is read as ``call(_:_:)`` reads it, from the same line: the call is made once, whatever comes of it.
    /// Nil when the request has a field the plain writer does not write (ask through ``call(_:_:)``).
    package func silentToken(_ request: TokenRequest) throws(BrokerError) -> SilentCall.Token? {
        try state.withLock { (state) throws(BrokerError) -> SilentCall.Token? in
            guard state.fd >= 0 else { throw BrokerError(.connectionLost, "the connection to the broker is closed") }
            let id = state.nextID
            guard
                let line = SilentCall.requestLine(request.authParameters, correlationId: request.correlationId, id: id)
            else { return nil }
            state.nextID += 1
            try Self.send(line, on: state.fd)
            while true {
                let answerLine = try Self.readLine(&state)
                switch SilentCall.read(answerLine, id: id) {
                case .token(let token): return token
                case .notForThisCall: continue
                case .otherAnswer:
                    let result = try answer(
                        to: .number(id),
                        as: AcquireTokenResult.self,
                        first: answerLine,
                        state: &state
                    ).brokerTokenResponse
                    return SilentCall.Token(
                        accessToken: result.accessToken.reveal(),
                        expiresOn: result.expiresOn,
                        username: result.account.username
                    )
                }
            }
        }
    }

    func listen(to correlationId: String, _ listener: @escaping @Sendable (ServerNotification) -> Void) {
        listeners.withLock { $0[correlationId] = listener }
    }

    func stopListening(to correlationId: String) {
        listeners.withLock { _ = $0.removeValue(forKey: correlationId) }
    }

    func close() async {
        state.withLock { state in
            if state.fd >= 0 { Glibc.close(state.fd) }
            state.fd = -1
        }
    }

    private static func send(_ bytes: [UInt8], on fd: Int32) throws(BrokerError) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { throw BrokerError(.connectionLost, "the connection to the broker closed") }
            offset += written
        }
    }

    /// The next line from the broker, without its newline; bounded by the protocol's largest response.
    private static func readLine(_ state: inout State) throws(BrokerError) -> [UInt8] {
        var scanned = 0
        // Uninitialized: the kernel writes only what arrives, so a short answer touches a page or two of it, not
        // sixteen zeroed ones (page faults are a good part of a process that runs for a millisecond).
        let chunk = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: 1 << 16)
        defer { chunk.deallocate() }
        while true {
            if let newline = Self.newline(in: state.buffer, from: scanned) {
                let line = Array(state.buffer[..<newline])
                state.buffer.removeSubrange(...newline)
                return line
            }
            scanned = state.buffer.count
            guard state.buffer.count <= WireProtocol.maximumResponseBytes else {
                throw BrokerError(.internal, "the broker sent a message larger than the protocol allows")
            }
            let count = Glibc.read(state.fd, chunk.baseAddress, chunk.count)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { throw BrokerError(.connectionLost, "the connection to the broker closed") }
            state.buffer += chunk[0..<count]
        }
    }

    /// The index of the first newline in `buffer` at or after `start`, found by the C library's `memchr`: a byte at a
    /// time (`firstIndex(of:)` on a slice) took the whole answer 20,000 instructions, as many as parsing it.
    private static func newline(in buffer: [UInt8], from start: Int) -> Int? {
        buffer.withUnsafeBufferPointer { bytes in
            guard start < bytes.count, let base = bytes.baseAddress,
                let found = memchr(base + start, Int32(UInt8(ascii: "\n")), bytes.count - start)
            else { return nil }
            return UnsafeRawPointer(base).distance(to: UnsafeRawPointer(found))
        }
    }
}
