import BrokerCache
import BrokerCore
import BrokerServer
import BrokerTestSupport
import Logging

/// A server on `path` that is not yet running.
func secondServer(path: String, directory: TemporaryDirectory) async throws -> SocketServer {
    let logs = LogCapture()
    let broker = TokenBroker(cache: try await TokenCache(store: InMemoryTokenStore()), logger: logs.logger())
    return SocketServer(
        configuration: ServerConfiguration(listener: .bind(path: path)),
        broker: broker,
        details: .init(stateDirectory: directory.path("state")),
        logger: logs.logger()
    )
}
