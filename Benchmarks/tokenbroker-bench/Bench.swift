import ArgumentParser
import Foundation

/// `tokenbroker-bench`: the benchmark driver `scripts/bench.sh` runs (a release build, never a test).
@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokenbroker-bench",
        abstract: "Load generator and measurements for tokenbroker's benchmark (see scripts/bench.sh).",
        subcommands: [
            Latency.self, Throughput.self, Seed.self, Lookup.self, Refresh.self, SingleFlight.self, Endpoint.self,
        ]
    )
}

/// Prints one JSON object per measurement, for the script to collect.
func report(_ fields: [String: Any]) {
    let data = (try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])) ?? Data()
    print(String(decoding: data, as: UTF8.self))
}

/// Percentiles of nanosecond samples, in microseconds.
func percentiles(_ samples: [UInt64]) -> [String: Double] {
    let sorted = samples.sorted()
    func at(_ fraction: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        let index = min(sorted.count - 1, Int((fraction * Double(sorted.count - 1)).rounded()))
        return Double(sorted[index]) / 1000
    }
    let mean = sorted.isEmpty ? 0 : Double(sorted.reduce(0, +)) / Double(sorted.count) / 1000
    return ["p50_us": at(0.5), "p90_us": at(0.9), "p99_us": at(0.99), "p999_us": at(0.999), "mean_us": mean]
}

/// Monotonic nanoseconds.
func now() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}
