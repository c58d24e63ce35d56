import BrokerCore
import BrokerOAuth
import BrokerProtocol
import BrokerTime
import CSystemd
import Foundation
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The session-bus connection, on a thread of its own.
///
/// sd-bus is not thread-safe, so every call on the connection happens there. Calls answered from memory are answered on that thread at once; the others run in a
/// task, whose answer comes back through a queue and an eventfd that wakes the thread.
///
/// Order at start: the object is exported, then the name requested (clients `Ping` the name the moment it
/// appears). At stop: the name is released, the calls under way are answered, the connection closed.
final class BusLoop: @unchecked Sendable {
    // @unchecked: `bus`, `callers` and `answered` are used on the loop's thread only; the rest is behind `shared`.
    private let translator: Broker1Translator
    private let logger: Logger
    private let clock: any BrokerClock
    private let ownUID = getuid()
    private let wake: Int32
    private let shared = Mutex(Shared())
    private let finished = Mutex<[CheckedContinuation<Void, Never>]?>([])

    private var bus: OpaquePointer?
    /// Who each sender is: a unique name is never reused while the bus runs, so it is asked once.
    private var callers: [String: Caller] = [:]

    /// Calls under way, per sender: beyond this, a sender's new calls are answered "busy" at once.
    static let callsPerSender = 32
    /// Calls under way in all.
    static let callsInAll = 512
    /// How long the loop's own calls to the bus may take.
    static let callTimeoutMicroseconds: UInt64 = 5_000_000
    /// How long the stop waits for the calls under way to be answered.
    static let drainTime: Duration = .seconds(5)

    private struct Shared {
        var state = StatusResult.BusStatus.State.starting
        var message: String?
        var outbox: [(call: UInt, answer: String, sender: String)] = []
        var underWay: [String: Int] = [:]
        var underWayInAll = 0
        var calls = 0
        var lastActivity: Duration = .zero
        var stopping = false
    }

    init(translator: Broker1Translator, logger: Logger, clock: any BrokerClock) {
        self.translator = translator
        self.logger = logger
        self.clock = clock
        wake = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        shared.withLock { $0.lastActivity = clock.elapsed }
    }

    deinit {
        if wake >= 0 { close(wake) }
    }

    // MARK: - Control, from any thread

    /// Starts the thread; it joins the bus and serves until ``stop()``.
    func start() {
        let thread = Thread { [self] in
            self.serve()
            let waiters = finished.withLock { waiters -> [CheckedContinuation<Void, Never>] in
                defer { waiters = nil }
                return waiters ?? []
            }
            for waiter in waiters { waiter.resume() }
        }
        thread.name = "tokenbroker-bus"
        thread.start()
    }

    /// Asks the thread to release the name, answer what is under way and close; returns when it has.
    func stop() async {
        shared.withLock { $0.stopping = true }
        signal()
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let done = finished.withLock { waiters -> Bool in
                guard waiters != nil else { return true }
                waiters?.append(waiter)
                return false
            }
            if done { waiter.resume() }
        }
    }

    /// The front end's status.
    var status: StatusResult.BusStatus {
        shared.withLock {
            StatusResult.BusStatus(state: $0.state, name: Broker1.busName, message: $0.message, calls: $0.calls)
        }
    }

    /// How long no call has been under way; nil while one is.
    var idleFor: Duration? {
        let (underWay, last) = shared.withLock { ($0.underWayInAll, $0.lastActivity) }
        return underWay > 0 ? nil : clock.elapsed - last
    }

    private func signal() {
        var one: UInt64 = 1
        _ = write(wake, &one, 8)
    }

    // MARK: - The loop's thread

    private func serve() {
        guard wake >= 0 else { return settle(.unavailable, "no eventfd: \(Self.errorText(errno))") }
        var opened: OpaquePointer?
        var result = sd_bus_open_user(&opened)
        guard result >= 0, let opened else {
            return settle(
                .unavailable,
                "no session bus (\(Self.errorText(-result))): Broker1 clients cannot reach tokenbroker"
            )
        }
        bus = opened
        defer {
            sd_bus_flush_close_unref(opened)
            bus = nil
        }
        // The loop's own calls to the bus (the name, a caller's credentials, the user manager's environment) wait
        // at most this long, not sd-bus's 25 s: a bus that stops answering must not hold the broker's stop.
        _ = sd_bus_set_method_call_timeout(opened, Self.callTimeoutMicroseconds)
        result = sd_bus_add_object(
            opened,
            nil,
            Broker1.objectPath,
            Self.callback,
            Unmanaged.passUnretained(self).toOpaque()
        )
        guard result >= 0 else {
            return settle(.unavailable, "the Broker1 object could not be exported: \(Self.errorText(-result))")
        }
        // The bus says when the name comes to this connection (now, or once another broker that owns it leaves)
        // and when it goes.
        let userdata = Unmanaged.passUnretained(self).toOpaque()
        for signal in ["NameAcquired", "NameLost"] {
            result = sd_bus_match_signal(
                opened,
                nil,
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                signal,
                Self.nameCallback,
                userdata
            )
            guard result >= 0 else {
                return settle(.unavailable, "cannot follow the name's owner: \(Self.errorText(-result))")
            }
        }
        // In line, never replacing: while another broker (Microsoft's, himmelblau's) owns the name, it keeps it.
        result = sd_bus_request_name(opened, Broker1.busName, tb_name_queue)
        guard result >= 0 else {
            return settle(.unavailable, "the name \(Broker1.busName) could not be taken: \(Self.errorText(-result))")
        }
        if result > 0 {
            acquired()
        } else {
            settle(
                .taken,
                "\(Broker1.busName) is owned by \(owner(of: Broker1.busName)); tokenbroker leaves it alone and "
                    + "answers only once that one has left"
            )
        }
        loop(opened)
    }

    private func acquired() {
        guard shared.withLock({ $0.state != .owner && !$0.stopping }) else { return }
        settle(.owner, nil)
        logger.info("answering Broker1 on the session bus", metadata: ["name": "\(Broker1.busName)"])
    }

    private static let nameCallback: sd_bus_message_handler_t = { message, userdata, _ in
        guard let message, let userdata else { return 0 }
        let loop = Unmanaged<BusLoop>.fromOpaque(userdata).takeUnretainedValue()
        var value: UnsafePointer<CChar>?
        guard sd_bus_message_read_basic(message, CChar(UInt8(ascii: "s")), &value) > 0, let value,
            String(cString: value) == Broker1.busName
        else { return 0 }
        let member = sd_bus_message_get_member(message).map { String(cString: $0) }
        if member == "NameAcquired" {
            loop.acquired()
        } else if loop.shared.withLock({ !$0.stopping }) {
            loop.settle(.taken, "\(Broker1.busName) was taken over by \(loop.owner(of: Broker1.busName))")
        }
        return 0
    }

    private func settle(_ state: StatusResult.BusStatus.State, _ message: String?) {
        shared.withLock {
            $0.state = state
            $0.message = message
        }
        switch state {
        case .taken, .unavailable: logger.notice("Broker1 front end: \(message ?? "\(state)")")
        default: break
        }
    }

    private func loop(_ bus: OpaquePointer) {
        var released = false
        var drainDeadline: Duration?
        while true {
            var result: Int32
            repeat { result = sd_bus_process(bus, nil) } while result > 0
            if result < 0 {
                settle(.unavailable, "the session bus connection was lost: \(Self.errorText(-result))")
                return
            }
            let (batch, stopping, underWay) = shared.withLock { shared in
                defer { shared.outbox.removeAll(keepingCapacity: true) }
                return (shared.outbox, shared.stopping, shared.underWayInAll)
            }
            for item in batch { send(item.answer, to: item.call, from: item.sender) }
            if stopping {
                if !released {
                    released = true
                    _ = sd_bus_release_name(bus, Broker1.busName)
                    settle(.off, "the broker is stopping")
                    drainDeadline = clock.elapsed + Self.drainTime
                }
                let remaining = underWay - batch.count
                if remaining <= 0 || clock.elapsed >= drainDeadline ?? .zero {
                    _ = sd_bus_flush(bus)
                    return
                }
            }
            if !batch.isEmpty { continue }
            wait(on: bus, until: drainDeadline)
        }
    }

    /// Sleeps until the bus or the eventfd has something, or sd-bus's own timeout (a pending call) comes.
    private func wait(on bus: OpaquePointer, until deadline: Duration?) {
        var timeoutMicroseconds: UInt64 = .max
        _ = sd_bus_get_timeout(bus, &timeoutMicroseconds)
        var milliseconds: Int32 = -1
        if timeoutMicroseconds != .max {
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            let nowMicroseconds = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
            milliseconds = Int32(
                clamping: timeoutMicroseconds > nowMicroseconds ? (timeoutMicroseconds - nowMicroseconds) / 1000 + 1 : 0
            )
        }
        if let deadline {
            let left = Int32(clamping: max(0, (deadline - clock.elapsed).components.seconds * 1000 + 1))
            milliseconds = milliseconds < 0 ? left : min(milliseconds, left)
        }
        var fds = [
            pollfd(fd: sd_bus_get_fd(bus), events: Int16(truncatingIfNeeded: sd_bus_get_events(bus)), revents: 0),
            pollfd(fd: wake, events: Int16(POLLIN), revents: 0),
        ]
        _ = poll(&fds, 2, milliseconds)
        if fds[1].revents & Int16(POLLIN) != 0 {
            var count: UInt64 = 0
            _ = read(wake, &count, 8)
        }
    }

    private static let callback: sd_bus_message_handler_t = { message, userdata, _ in
        guard let message, let userdata else { return 0 }
        return Unmanaged<BusLoop>.fromOpaque(userdata).takeUnretainedValue().handle(message)
    }

    /// One method call on the object: 1 when answered (or to be answered), 0 to let sd-bus answer (an interface
    /// that is not Broker1's: Peer and Properties are sd-bus's own).
    private func handle(_ message: OpaquePointer) -> Int32 {
        let interface = sd_bus_message_get_interface(message).map { String(cString: $0) }
        let member = sd_bus_message_get_member(message).map { String(cString: $0) } ?? ""
        if interface == "org.freedesktop.DBus.Introspectable", member == "Introspect" {
            reply(Broker1.introspection, to: message)
            return 1
        }
        if let interface, interface != Broker1.interface { return 0 }
        let sender = sd_bus_message_get_sender(message).map { String(cString: $0) } ?? ""
        guard let caller = caller(of: message, sender: sender) else {
            reply(Broker1Translator.error(.unexpected, "tokenbroker could not tell who is calling"), to: message)
            return 1
        }
        guard caller.uid == ownUID else {
            logger.warning(
                "refused a Broker1 call from another user",
                metadata: ["caller_uid": "\(caller.uid)", "caller": "\(caller)", "method": "\(shown(member))"]
            )
            reply(
                Broker1Translator.error(
                    .unexpected,
                    "permission denied: this tokenbroker serves uid \(ownUID) only",
                    code: .permissionDenied
                ),
                to: message
            )
            return 1
        }
        guard sd_bus_message_has_signature(message, "sss") > 0 else {
            let signature = sd_bus_message_get_signature(message, 1).map { String(cString: $0) } ?? ""
            reply(
                Broker1Translator.error(
                    .apiContractViolation,
                    "every Broker1 method takes three strings (protocol version, correlation id, request JSON); "
                        + "this call's signature is \"\(shown(signature))\"",
                    code: .invalidRequest
                ),
                to: message
            )
            return 1
        }
        guard let version = readString(message), let correlationId = readString(message),
            let request = readString(message)
        else {
            reply(Broker1Translator.error(.apiContractViolation, "the call's arguments could not be read"), to: message)
            return 1
        }
        guard admit(sender) else {
            reply(
                Broker1Translator.error(
                    .transientError,
                    "too many calls from this client are under way; retry when they are answered",
                    code: .brokerBusy
                ),
                to: message
            )
            return 1
        }
        if version != "0.0" {
            logger.debug(
                "a Broker1 call with an unknown protocol version",
                metadata: ["version": "\(shown(version))"]
            )
        }
        let call = PendingCall(
            message: message,
            sender: sender,
            caller: caller,
            method: member,
            correlationId: correlationId,
            request: request
        )
        guard member == Broker1.Method.acquireTokenInteractively.rawValue, let bus else {
            answer(call, session: nil)
            return 1
        }
        // A sign-in opens the browser in the user's graphical session, which the user manager's environment names:
        // asked without waiting, the call goes on when the answer comes (or at once, with the daemon's own).
        sd_bus_message_ref(message)
        let context = Unmanaged.passRetained(EnvironmentQuery(loop: self, call: call)).toOpaque()
        if tb_ask_manager_environment(bus, Self.environmentCallback, context) < 0 {
            Unmanaged<EnvironmentQuery>.fromOpaque(context).release()
            answer(call, session: Self.session(from: []))
            sd_bus_message_unref(message)
        }
        return 1
    }

    /// A call read and admitted, to be answered.
    private struct PendingCall {
        let message: OpaquePointer
        let sender: String
        let caller: Caller
        let method: String
        let correlationId: String
        let request: String
    }

    /// The user manager's environment asked for a sign-in's call: what its answer continues.
    private final class EnvironmentQuery {
        let loop: BusLoop
        let call: PendingCall

        init(loop: BusLoop, call: PendingCall) {
            self.loop = loop
            self.call = call
        }
    }

    private static let environmentCallback: sd_bus_message_handler_t = { reply, userdata, _ in
        guard let userdata else { return 0 }
        let query = Unmanaged<EnvironmentQuery>.fromOpaque(userdata).takeRetainedValue()
        var manager: [String] = []
        var entries: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        if let reply, sd_bus_message_is_method_error(reply, nil) == 0, tb_read_environment(reply, &entries) >= 0,
            let entries
        {
            var index = 0
            while let entry = entries[index] {
                manager.append(String(cString: entry))
                free(entry)
                index += 1
            }
            free(entries)
        }
        if query.loop.shared.withLock({ $0.stopping }) {
            // The broker began stopping while it waited: no sign-in starts now (its flows were already cancelled).
            query.loop.reply(
                Broker1Translator.error(
                    BrokerFailure(.brokerStopping, "the broker is stopping; start the sign-in again")
                ),
                to: query.call.message
            )
            query.loop.finish(query.call.sender)
        } else {
            query.loop.answer(query.call, session: session(from: manager))
        }
        sd_bus_message_unref(query.call.message)
        return 0
    }

    /// Answers `call` through the translator, at once or when its task ends; `session` is the graphical session a
    /// sign-in shows its browser in.
    private func answer(_ call: PendingCall, session: [String: String]?) {
        let answer = translator.answer(
            method: call.method,
            correlationId: call.correlationId,
            request: call.request,
            caller: call.caller
        ) { session }
        switch answer {
        case .now(let json):
            reply(json, to: call.message)
            finish(call.sender)
        case .later(let work):
            sd_bus_message_ref(call.message)
            let pointer = UInt(bitPattern: Int(bitPattern: call.message))
            let sender = call.sender
            Task {
                let json = await work()
                self.shared.withLock { $0.outbox.append((pointer, json, sender)) }
                self.signal()
            }
        }
    }

    private func send(_ answer: String, to call: UInt, from sender: String) {
        guard let message = OpaquePointer(bitPattern: call) else { return }
        reply(answer, to: message)
        sd_bus_message_unref(message)
        finish(sender)
    }

    private func reply(_ answer: String, to call: OpaquePointer) {
        var reply: OpaquePointer?
        guard sd_bus_message_new_method_return(call, &reply) >= 0, let reply else { return }
        defer { sd_bus_message_unref(reply) }
        let appended = answer.withCString { sd_bus_message_append_basic(reply, CChar(UInt8(ascii: "s")), $0) }
        guard appended >= 0 else { return }
        let sent = sd_bus_send(bus, reply, nil)
        if sent < 0 {
            logger.debug("a Broker1 answer could not be sent", metadata: ["error": "\(Self.errorText(-sent))"])
        }
    }

    private func readString(_ message: OpaquePointer) -> String? {
        var value: UnsafePointer<CChar>?
        guard sd_bus_message_read_basic(message, CChar(UInt8(ascii: "s")), &value) > 0, let value else { return nil }
        return String(cString: value)
    }

    /// Counts a call in, unless its sender (or everyone) has too many under way.
    private func admit(_ sender: String) -> Bool {
        shared.withLock { shared in
            guard shared.underWay[sender, default: 0] < Self.callsPerSender, shared.underWayInAll < Self.callsInAll
            else { return false }
            shared.underWay[sender, default: 0] += 1
            shared.underWayInAll += 1
            shared.calls += 1
            shared.lastActivity = clock.elapsed
            return true
        }
    }

    private func finish(_ sender: String) {
        shared.withLock { shared in
            let left = shared.underWay[sender, default: 1] - 1
            shared.underWay[sender] = left > 0 ? left : nil
            shared.underWayInAll -= 1
            shared.lastActivity = clock.elapsed
        }
    }

    /// The caller behind a unique name, from the bus's credentials of its connection (asked once per name).
    private func caller(of message: OpaquePointer, sender: String) -> Caller? {
        if let known = callers[sender] { return known }
        var creds: OpaquePointer?
        guard sd_bus_query_sender_creds(message, tb_creds_caller, &creds) >= 0, let creds else { return nil }
        defer { sd_bus_creds_unref(creds) }
        var uid: uid_t = 0
        guard sd_bus_creds_get_euid(creds, &uid) >= 0 || sd_bus_creds_get_uid(creds, &uid) >= 0 else { return nil }
        var pid: pid_t = 0
        _ = sd_bus_creds_get_pid(creds, &pid)
        var gid: gid_t = 0
        _ = sd_bus_creds_get_egid(creds, &gid)
        var exe: UnsafePointer<CChar>?
        _ = sd_bus_creds_get_exe(creds, &exe)
        let caller = Caller(pid: pid, uid: uid, gid: gid, executable: exe.map { String(cString: $0) }, via: .bus)
        if callers.count >= 1024 { callers.removeAll(keepingCapacity: true) }
        callers[sender] = caller
        return caller
    }

    /// Who owns `name`: `pid 123 (/usr/bin/program)`.
    private func owner(of name: String) -> String {
        var creds: OpaquePointer?
        guard let bus, sd_bus_get_name_creds(bus, name, tb_creds_owner, &creds) >= 0, let creds else {
            return "another program"
        }
        defer { sd_bus_creds_unref(creds) }
        var pid: pid_t = 0
        var exe: UnsafePointer<CChar>?
        var comm: UnsafePointer<CChar>?
        let hasPid = sd_bus_creds_get_pid(creds, &pid) >= 0
        _ = sd_bus_creds_get_exe(creds, &exe)
        _ = sd_bus_creds_get_comm(creds, &comm)
        let program = exe.map { String(cString: $0) } ?? comm.map { String(cString: $0) } ?? "an unknown program"
        return hasPid ? "pid \(pid) (\(program))" : program
    }

    /// The user's graphical session, where a sign-in asked over the bus shows its browser: the display variables
    /// of the user manager's environment `manager` (a graphical login imports them there) over the daemon's own;
    /// nil when neither has `DISPLAY` or `WAYLAND_DISPLAY`.
    private static func session(from manager: [String]) -> [String: String]? {
        var session: [String: String] = [:]
        let own = ProcessInfo.processInfo.environment
        for name in BrowserLauncher.displayVariables {
            if let value = own[name], !value.isEmpty { session[name] = value }
        }
        for entry in manager {
            guard let equals = entry.firstIndex(of: "=") else { continue }
            let name = String(entry[..<equals])
            let value = String(entry[entry.index(after: equals)...])
            if BrowserLauncher.displayVariables.contains(name), !value.isEmpty { session[name] = value }
        }
        return session["DISPLAY"] != nil || session["WAYLAND_DISPLAY"] != nil ? session : nil
    }

    private static func errorText(_ code: Int32) -> String {
        String(cString: strerror(code))
    }

}
