import CLinuxSupport
import Foundation
import Glibc
import Synchronization
import Testing

/// The event loops ask the scheduler for 0.1 ms slices (`tb_request_thread_slice`, from the daemon's `main`).
///
/// Checked on threads of the test's own: a slice belongs to a thread, and the test runner's are left as they were.
struct ThreadSliceTests {
    /// Whether the kernel takes a slice per thread: EEVDF's custom slices came with Linux 6.12.
    static let kernelTakesSlices: Bool = {
        var name = utsname()
        guard uname(&name) == 0 else { return false }
        let release = withUnsafeBytes(of: &name.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let numbers = release.split(separator: ".").prefix(2).map { Int($0.prefix { $0.isNumber }) ?? 0 }
        return numbers.count == 2 && (numbers[0], numbers[1]) >= (6, 12)
    }()

    /// The calling thread's slice in nanoseconds (`se.slice` of /proc/thread-self/sched), nil when not shown.
    static func slice() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/thread-self/sched", encoding: .utf8) else { return nil }
        let line = text.split(separator: "\n").first { $0.hasPrefix("se.slice ") }
        return line.flatMap { Int($0.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "") }
    }

    /// Runs `body` on a new thread and returns what it returns.
    static func onNewThread<T: Sendable>(_ body: @escaping @Sendable () -> T) -> T? {
        let result = Mutex<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            let value = body()
            result.withLock { $0 = value }
            done.signal()
        }.start()
        done.wait()
        return result.withLock { $0 }
    }

    /// The thread that asks gets 0.1 ms slices; the threads it starts begin with the default (reset on fork), and
    /// the test runner's thread is left as it was.
    ///
    /// The asking thread first asks for the default (a slice of 0): the test process may have inherited a slice of
    /// its own from whatever started it.
    @Test(.enabled(if: kernelTakesSlices, "custom slices need Linux 6.12"))
    func aThreadGetsTheSliceItAsksForAndItsThreadsDoNot() {
        let runner = Self.slice()
        let seen = Self.onNewThread { () -> (errors: [Int32], byDefault: Int?, asked: Int?, started: Int?) in
            let reset = tb_request_thread_slice(0)
            let byDefault = Self.slice()
            let error = tb_request_thread_slice(100_000)
            return ([reset, error], byDefault, Self.slice(), Self.onNewThread { Self.slice() } ?? nil)
        }
        guard let seen else {
            Issue.record("the thread returned nothing")
            return
        }
        #expect(seen.errors == [0, 0])
        #expect(seen.asked == 100_000)
        #expect(seen.byDefault != nil && seen.byDefault != 100_000)
        #expect(seen.started == seen.byDefault)
        #expect(Self.slice() == runner)
    }
}
