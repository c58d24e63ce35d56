import ArgumentParser
import Dispatch
import Glibc

// `tokenbroker token` is answered before the command tree when it can be (see FastPath); everything else runs the
// full CLI. The main stays synchronous: the release binary is a static executable (it starts in a fraction of the
// time), and an async main ends the main thread with pthread_exit, which in a static binary first sorts every
// unwind table in it (tens of milliseconds).
if let status = FastPath.run(CommandLine.arguments) { exit(status) }
runFullCLI()

/// The command tree, on a task of its own while the main thread waits.
///
/// A function of its own, so the fast path does not pay for it: inline, the compiler looked up
/// `Optional<TaskPriority>`'s metadata (for `Task.detached`) before the fast path ran, 30,000 of the 357,000
/// instructions `tokenbroker token` ran in all (callgrind).
@inline(never)
func runFullCLI() {
    let finished = DispatchSemaphore(value: 0)
    Task.detached {
        await CLI.main()
        finished.signal()
    }
    finished.wait()
}
