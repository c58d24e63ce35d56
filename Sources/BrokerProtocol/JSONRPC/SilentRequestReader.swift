/// Reads the request apps send most, `acquireTokenSilently`, straight from the strict JSON tape, without Codable.
///
/// It takes only the plain shape: the request members and the params and auth parameters a silent request
/// usually carries, strings without escapes, an integer or string id. Anything else (an escape, an unknown or
/// null member, a notification, any error at all) is left to ``RequestDecoder``, whose answer decides; for what it
/// takes, it reads exactly what ``RequestDecoder`` would (a test holds the two equal).
package enum SilentRequestReader {
    /// The request in `frame`, when it is a plain `acquireTokenSilently`; nil for ``RequestDecoder`` to decode.
    package static func read(_ frame: [UInt8]) -> (id: RequestID, params: AcquireTokenSilentlyParams)? {
        readLocatingID(frame).map { ($0.id, $0.params) }
    }

    /// ``read(_:)``, and where the id's value is in `frame` (a string's with its quotes).
    static func readLocatingID(_ frame: [UInt8]) -> Read? {
        guard let tape = try? JSONTape(frame, limits: .request), tape.nodes.first?.kind == .object else { return nil }
        return Reader(tape: tape).request()
    }

    struct Read {
        let id: RequestID
        let params: AcquireTokenSilentlyParams
        let idBytes: Range<Int>
    }

    private struct Reader {
        let tape: JSONTape

        func request() -> Read? {
            var id: RequestID?
            var idBytes = 0..<0
            var version = false
            var method = false
            var params: AcquireTokenSilentlyParams?
            for (key, value) in tape.members(of: 0) {
                if named(key, "jsonrpc") {
                    version = plain(value) == "2.0"
                } else if named(key, "method") {
                    method = plain(value) == "acquireTokenSilently"
                } else if named(key, "id") {
                    id = requestID(value)
                    let node = tape.nodes[value]
                    let quotes = node.kind == .string ? 1 : 0
                    idBytes = Int(node.start) - quotes..<Int(node.end) + quotes
                } else if named(key, "params") {
                    params = silentParams(value)
                } else {
                    return nil
                }
            }
            guard version, method, let id, let params else { return nil }
            return Read(id: id, params: params, idBytes: idBytes)
        }

        private func requestID(_ index: Int) -> RequestID? {
            switch tape.nodes[index].kind {
            case .number:
                // nil for a fraction, an exponent or out of range: the decoder's to explain.
                guard let number = tape.integer(at: index) else { return nil }
                return .number(number)
            case .string:
                guard let text = plain(index), text.utf8.count <= WireProtocol.maximumStringIdBytes else { return nil }
                return .string(text)
            default:
                return nil
            }
        }

        private func silentParams(_ index: Int) -> AcquireTokenSilentlyParams? {
            guard tape.nodes[index].kind == .object else { return nil }
            var parameters: AuthParameters?
            var correlationId: String?
            for (key, value) in tape.members(of: index) {
                if named(key, "authParameters") {
                    guard let read = authParameters(value) else { return nil }
                    parameters = read
                } else if named(key, "correlationId") {
                    guard let text = plain(value), WireProtocol.isValidCorrelationId(text) else {
                        return nil
                    }
                    correlationId = text
                } else {
                    return nil
                }
            }
            guard let parameters else { return nil }
            return AcquireTokenSilentlyParams(authParameters: parameters, correlationId: correlationId)
        }

        private func authParameters(_ index: Int) -> AuthParameters? {
            guard tape.nodes[index].kind == .object else { return nil }
            var parameters = AuthParameters(clientId: "")
            var clientId: String?
            for (key, value) in tape.members(of: index) {
                // Every member this reader takes must be read; one it cannot read is the decoder's to judge.
                if named(key, "clientId") {
                    guard let text = plain(value) else { return nil }
                    clientId = text
                } else if named(key, "authority") {
                    guard let text = plain(value) else { return nil }
                    parameters.authority = text
                } else if named(key, "requestedScopes") {
                    guard let scopes = strings(value) else { return nil }
                    parameters.requestedScopes = scopes
                } else if named(key, "account") {
                    guard let selector = account(value) else { return nil }
                    parameters.account = selector
                } else if named(key, "resource") {
                    guard let text = plain(value) else { return nil }
                    parameters.resource = text
                } else if named(key, "username") {
                    guard let text = plain(value) else { return nil }
                    parameters.username = text
                } else if named(key, "redirectUri") {
                    guard let text = plain(value) else { return nil }
                    parameters.redirectUri = text
                } else if named(key, "forceRefresh") {
                    guard let flag = bool(value) else { return nil }
                    parameters.forceRefresh = flag
                } else if named(key, "minimumValiditySeconds") {
                    guard let seconds = tape.integer(at: value).flatMap(Int.init(exactly:)) else { return nil }
                    parameters.minimumValiditySeconds = seconds
                } else {
                    return nil
                }
            }
            guard let clientId else { return nil }
            parameters.clientId = clientId
            return parameters
        }

        private func account(_ index: Int) -> AccountSelector? {
            guard tape.nodes[index].kind == .object else { return nil }
            var selector = AccountSelector()
            for (key, value) in tape.members(of: index) {
                guard let text = plain(value) else { return nil }
                if named(key, "identifier") {
                    selector.identifier = text
                } else if named(key, "username") {
                    selector.username = text
                } else {
                    return nil
                }
            }
            return selector
        }

        private func strings(_ index: Int) -> [String]? {
            guard tape.nodes[index].kind == .array else { return nil }
            var strings: [String] = []
            strings.reserveCapacity(Int(tape.nodes[index].count))
            for (_, value) in tape.members(of: index) {
                guard let text = plain(value) else { return nil }
                strings.append(text)
            }
            return strings
        }

        private func bool(_ index: Int) -> Bool? {
            switch tape.nodes[index].kind {
            case .true: true
            case .false: false
            default: nil
            }
        }

        /// Whether the member name at `index` is `name`, written without escapes.
        private func named(_ index: Int, _ name: String) -> Bool {
            !tape.nodes[index].escaped && tape.string(at: index, equals: name)
        }

        /// A string without escapes (the tape has checked its UTF-8); nil for any other value.
        private func plain(_ index: Int) -> String? {
            let node = tape.nodes[index]
            guard node.kind == .string, !node.escaped else { return nil }
            return try? tape.string(at: index)
        }

    }
}
