import BrokerProtocol
import Glibc

/// What the systemd user manager says about the broker's units, for `tokenbroker status`.
enum UnitStates {
    /// `tokenbrokerd.socket active (listening)`-style descriptions of both units; nil without a user manager or
    /// when the units are not installed.
    static func describe() -> String? {
        guard let runtime = runtimeDirectory, access("\(runtime)/systemd/private", F_OK) == 0 else { return nil }
        let output = run(
            [
                "systemctl", "--user", "show", "--property=Id,LoadState,ActiveState,SubState", "tokenbrokerd.socket",
                "tokenbrokerd.service",
            ],
            runtimeDirectory: runtime
        )
        guard let output else { return nil }
        var units: [[String: String]] = [[:]]
        for line in output.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.isEmpty {
                units.append([:])
                continue
            }
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { units[units.count - 1][parts[0]] = parts[1] }
        }
        let described = units.filter { !$0.isEmpty }.compactMap { unit -> String? in
            guard let id = unit["Id"], unit["LoadState"] == "loaded" else { return nil }
            return "\(id) \(unit["ActiveState"] ?? "?") (\(unit["SubState"] ?? "?"))"
        }
        return described.isEmpty ? nil : described.joined(separator: ", ")
    }

    /// Where the user manager listens: `$XDG_RUNTIME_DIR`, else `/run/user/<uid>` when it is the user's (a shell
    /// without a login session can still reach a lingering user manager there).
    private static var runtimeDirectory: String? {
        if let runtime = getenv("XDG_RUNTIME_DIR").map({ String(cString: $0) }), runtime.hasPrefix("/") {
            return runtime
        }
        let socket = SocketLocation.resolve(environment: [:])
        let fallback = SocketLocation.userRuntimeDirectory()
        return socket.hasPrefix(fallback + "/") ? fallback : nil
    }

    /// Runs a program from PATH with `XDG_RUNTIME_DIR` set, and returns its stdout, or nil when it cannot run or
    /// fails.
    private static func run(_ argv: [String], runtimeDirectory: String) -> String? {
        var pipe: [Int32] = [-1, -1]
        guard Glibc.pipe(&pipe) == 0 else { return nil }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, pipe[1], 1)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addclose(&actions, pipe[0])
        let arguments = argv.map { strdup($0) } + [nil]
        defer { for argument in arguments { free(argument) } }
        var pid = pid_t()
        var environment: [String] = []
        var entry = environ
        while let variable = entry.pointee {
            let text = String(cString: variable)
            if !text.hasPrefix("XDG_RUNTIME_DIR=") { environment.append(text) }
            entry += 1
        }
        environment.append("XDG_RUNTIME_DIR=\(runtimeDirectory)")
        let environmentPointers = environment.map { strdup($0) } + [nil]
        defer { for variable in environmentPointers { free(variable) } }
        let spawned = posix_spawnp(&pid, argv[0], &actions, nil, arguments, environmentPointers)
        close(pipe[1])
        defer { close(pipe[0]) }
        guard spawned == 0 else { return nil }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(pipe[0], &chunk, chunk.count)
            if count <= 0 { break }
            bytes += chunk[0..<count]
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        return status == 0 ? String(decoding: bytes, as: UTF8.self) : nil
    }
}
