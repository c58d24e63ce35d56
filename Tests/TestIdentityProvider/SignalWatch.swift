import Dispatch
import Foundation

/// Turns termination signals into an awaitable event.
///
/// The signals' default actions are switched off when the watch is created, so a signal that arrives before anyone
/// awaits is kept, not fatal. Unchecked `Sendable`: the dispatch sources are only touched by `init` and `deinit`.
final class SignalWatch: @unchecked Sendable {
    private let sources: [any DispatchSourceSignal]
    private let stream: AsyncStream<Int32>

    /// Starts watching `signals`.
    init(signals: [Int32]) {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self, bufferingPolicy: .bufferingNewest(1))
        self.stream = stream
        sources = signals.map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            return source
        }
    }

    /// Waits for the first watched signal and returns its number.
    func next() async -> Int32 {
        for await number in stream { return number }
        return SIGTERM
    }

    deinit {
        for source in sources { source.cancel() }
    }
}
