import ArgumentParser
import Foundation
import Synchronization

/// The refresh path: silent requests whose cached access token needs a refresh, one after another, each a call to
/// the identity provider (refresh, rotation, id_token check, one durable commit).
struct Refresh: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Latency of silent requests that each refresh at the identity provider (one client)."
    )

    @OptionGroup var options: LoadOptions
    @Option(help: "Timed requests.") var count: Int = 200
    @Option(help: "Warm-up requests.") var warmup: Int = 10

    func run() throws {
        let client = try RoundTripper(socket: options.socket, request: try options.requestBytes())
        let first = String(decoding: try client.roundTrip(keep: true) ?? [], as: UTF8.self)
        guard first.contains(#""tokenSource":"identityProvider""#) else {
            throw ValidationErrorText("the request does not refresh: \(first.prefix(300))")
        }
        for _ in 0..<warmup { try client.roundTrip() }
        var samples = [UInt64]()
        for _ in 0..<count {
            let start = now()
            let response = String(decoding: try client.roundTrip(keep: true) ?? [], as: UTF8.self)
            samples.append(now() - start)
            guard response.contains(#""tokenSource":"identityProvider""#) else {
                throw ValidationErrorText("a request did not refresh: \(response.prefix(300))")
            }
        }
        var fields: [String: Any] = percentiles(samples)
        fields["kind"] = "refresh"
        fields["label"] = options.label
        fields["count"] = count
        report(fields)
    }
}

/// Single flight: N callers ask at the same instant for a token that needs a refresh; the broker makes one call and
/// answers them all.
///
/// Reports the time until the last caller has its answer.
struct SingleFlight: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "single-flight",
        abstract: "N simultaneous callers needing one refresh: time until all are answered, per round."
    )

    @OptionGroup var options: LoadOptions
    @Option(help: "Callers per round, each on its own connection and thread.") var callers: Int = 50
    @Option(help: "Rounds.") var rounds: Int = 20

    func run() throws {
        let request = try options.requestBytes()
        let clients = try (0..<callers).map { _ in try RoundTripper(socket: options.socket, request: request) }
        var roundTimes = [UInt64]()
        for _ in 0..<rounds {
            let go = Atomic<Bool>(false)
            let finished = Atomic<Int>(0)
            let failures = Atomic<Int>(0)
            let latest = Atomic<UInt64>(0)
            for client in clients {
                let thread = Thread {
                    while !go.load(ordering: .acquiring) { sched_yield() }
                    let response = (try? client.roundTrip(keep: true)).flatMap { $0 } ?? []
                    if !String(decoding: response, as: UTF8.self).contains(#""tokenSource":"identityProvider""#) {
                        failures.add(1, ordering: .relaxed)
                    }
                    latest.max(now(), ordering: .relaxed)
                    finished.add(1, ordering: .releasing)
                }
                thread.start()
            }
            usleep(20_000)  // let every thread reach the start line
            let start = now()
            go.store(true, ordering: .releasing)
            while finished.load(ordering: .acquiring) < callers { usleep(200) }
            guard failures.load(ordering: .relaxed) == 0 else {
                throw ValidationErrorText("\(failures.load(ordering: .relaxed)) callers got no refreshed token")
            }
            roundTimes.append(latest.load(ordering: .relaxed) - start)
        }
        var fields: [String: Any] = percentiles(roundTimes)
        fields["kind"] = "single_flight"
        fields["label"] = options.label
        fields["callers"] = callers
        fields["rounds"] = rounds
        report(fields)
    }
}
