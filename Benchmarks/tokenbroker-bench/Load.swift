import ArgumentParser
import Foundation
import Synchronization

struct LoadOptions: ParsableArguments {
    @Option(help: "The server's socket.") var socket: String
    @Option(help: "A file holding one request line.") var request: String
    @Option(help: "A label for the report.") var label: String = "broker"

    func requestBytes() throws -> [UInt8] {
        Array(try Data(contentsOf: URL(filePath: request)))
    }
}

struct Latency: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Round-trip latency with one client.")

    @OptionGroup var options: LoadOptions
    @Option(help: "Timed round trips.") var count: Int = 100_000
    @Option(help: "Warm-up round trips.") var warmup: Int = 2_000
    @Flag(help: "A new connection for each round trip (timed from connect to the answer), as a process per token has.")
    var connectionEach = false
    @Option(help: "The server's pid, to measure its CPU time per round trip.") var serverPid: Int32?

    func run() throws {
        let client = try RoundTripper(socket: options.socket, request: try options.requestBytes())
        let first = try client.roundTrip(keep: true) ?? []
        guard !String(decoding: first, as: UTF8.self).contains(#""error""#) else {
            throw ValidationErrorText("the request fails: \(String(decoding: first.prefix(300), as: UTF8.self))")
        }
        let roundTrip: () throws -> Void =
            connectionEach
            ? {
                try client.reconnect()
                _ = try client.roundTrip()
            } : { _ = try client.roundTrip() }
        for _ in 0..<warmup { try roundTrip() }
        var samples = [UInt64]()
        samples.reserveCapacity(count)
        let cpuBefore = serverPid.flatMap(cpuMicroseconds)
        for _ in 0..<count {
            let start = now()
            try roundTrip()
            samples.append(now() - start)
        }
        let cpuAfter = serverPid.flatMap(cpuMicroseconds)
        var fields: [String: Any] = percentiles(samples)
        fields["kind"] = "latency"
        fields["label"] = options.label
        fields["count"] = count
        fields["response_bytes"] = client.lastResponseSize
        fields["connection_each"] = connectionEach
        if let cpuBefore, let cpuAfter {
            fields["server_cpu_us_per_request"] = Double(cpuAfter - cpuBefore) / Double(count)
        }
        report(fields)
    }
}

struct Throughput: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Requests per second with N clients, each a thread doing blocking round trips."
    )

    @OptionGroup var options: LoadOptions
    @Option(help: "Concurrent connections.") var connections: Int = 8
    @Option(help: "Measured seconds.") var seconds: Double = 3
    @Option(help: "Warm-up seconds.") var warmupSeconds: Double = 0.5
    @Option(help: "The server's pid, to measure its CPU time per request.") var serverPid: Int32?

    func run() throws {
        let request = try options.requestBytes()
        let clients = try (0..<connections).map { _ in try RoundTripper(socket: options.socket, request: request) }
        var fields = measureLoad(
            clients: connections,
            warmupSeconds: warmupSeconds,
            seconds: seconds,
            serverPid: serverPid,
            stopOnFailure: true
        ) { client in
            do {
                try clients[client].roundTrip()
                return true
            } catch {
                return false
            }
        }
        fields["kind"] = "throughput"
        fields["label"] = options.label
        report(fields)
    }
}

/// Load from `clients` threads, each repeating `attempt(index)` (true when it succeeded).
///
/// After a warm-up, `seconds` are measured: the latency percentiles of the measured attempts, `connections`,
/// `requests`, `rps`, `failures`, and with `serverPid` the server's CPU per request. A failed attempt ends its
/// thread when `stopOnFailure` (a broken connection), else it counts and the thread goes on (a refused one).
func measureLoad(
    clients: Int,
    warmupSeconds: Double,
    seconds: Double,
    serverPid: Int32?,
    stopOnFailure: Bool,
    _ attempt: @escaping @Sendable (Int) -> Bool
) -> [String: Any] {
    let phase = Atomic<Int>(0)  // 0 warm-up, 1 measuring, 2 stop
    let done = Atomic<Int>(0)
    let failures = Atomic<Int>(0)
    let samples = Mutex<[UInt64]>([])
    let group = DispatchGroup()
    for client in 0..<clients {
        group.enter()
        Thread {
            var local: [UInt64] = []
            local.reserveCapacity(100_000)
            while phase.load(ordering: .relaxed) < 2 {
                let start = now()
                guard attempt(client) else {
                    failures.add(1, ordering: .relaxed)
                    if stopOnFailure { break } else { continue }
                }
                if phase.load(ordering: .relaxed) == 1 {
                    local.append(now() - start)
                    done.add(1, ordering: .relaxed)
                }
            }
            samples.withLock { $0 += local }
            group.leave()
        }.start()
    }
    Thread.sleep(forTimeInterval: warmupSeconds)
    let cpuBefore = serverPid.flatMap(cpuMicroseconds)
    let start = now()
    phase.store(1, ordering: .relaxed)
    Thread.sleep(forTimeInterval: seconds)
    phase.store(2, ordering: .relaxed)
    let elapsed = Double(now() - start) / 1e9
    let cpuAfter = serverPid.flatMap(cpuMicroseconds)
    group.wait()
    var fields: [String: Any] = percentiles(samples.withLock { $0 })
    let requests = done.load(ordering: .relaxed)
    fields["connections"] = clients
    fields["requests"] = requests
    fields["rps"] = Double(requests) / elapsed
    fields["failures"] = failures.load(ordering: .relaxed)
    if let cpuBefore, let cpuAfter, requests > 0 {
        fields["server_cpu_us_per_request"] = Double(cpuAfter - cpuBefore) / Double(requests)
        fields["server_cpus"] = Double(cpuAfter - cpuBefore) / 1e6 / elapsed
    }
    return fields
}

/// A process's user + system CPU time so far, in microseconds (from /proc/<pid>/stat).
func cpuMicroseconds(_ pid: Int32) -> Int64? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return nil }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 13, let user = Int64(fields[11]), let system = Int64(fields[12]) else { return nil }
    return (user + system) * 1_000_000 / Int64(sysconf(Int32(_SC_CLK_TCK)))
}
