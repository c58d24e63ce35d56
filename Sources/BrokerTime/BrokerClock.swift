#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// The time, as every time-dependent part of the broker reads it and waits on it: one clock, injected, so tests
/// run throttles, retries, windows and timeouts on a clock they move by hand instead of sleeping.
public protocol BrokerClock: Sendable {
    /// Wall-clock time: token expiry, timestamps people read.
    var now: Date { get }

    /// Monotonic time since an arbitrary origin: deadlines, windows, how long something took.
    var elapsed: Duration { get }

    /// Waits `duration` of this clock's time; throws `CancellationError` when the task is cancelled.
    func sleep(for duration: Duration) async throws
}

extension BrokerClock {
    /// Wall-clock time in whole seconds since the Unix epoch.
    public var nowSeconds: Int64 {
        Int64(now.timeIntervalSince1970)
    }

    /// Wall-clock time in milliseconds since the Unix epoch.
    public var nowMilliseconds: Int64 {
        Int64(now.timeIntervalSince1970 * 1000)
    }
}

/// The system's clocks: `Date()` for wall time, `ContinuousClock` (which counts suspended time too) for the rest.
public struct SystemClock: BrokerClock {
    private static let origin = ContinuousClock.now

    /// The system clock.
    public init() {}

    public var now: Date { Date() }

    public var elapsed: Duration { Self.origin.duration(to: .now) }

    public func sleep(for duration: Duration) async throws {
        try await Task.sleep(for: duration)
    }
}

extension BrokerClock where Self == SystemClock {
    /// The system's clocks.
    public static var system: SystemClock { SystemClock() }
}
