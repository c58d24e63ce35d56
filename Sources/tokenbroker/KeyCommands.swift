import ArgumentParser
import BrokerClient
import BrokerProtocol
import BrokerSettings
import Glibc

/// `tokenbroker key …`: where the cache key is kept.
struct Key: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show or change where the cache key is kept (keyring, TPM, passphrase or a plain file).",
        discussion: """
            Every token in the cache is sealed with one key. Where that key is kept decides who can read
            the tokens from a copy of the state directory (a backup, a synced home, a stolen disk):

              secret-service  the desktop keyring (GNOME Keyring, KWallet, KeePassXC) on the session bus
              tpm             sealed to this machine's TPM 2.0 (/dev/tpmrm0): useless on another machine
              passphrase      wrapped with your passphrase (Argon2id); `tokenbroker unlock` after each start
              file            a plain 0600 file beside the database: a copy of the directory reads every token

            A new cache key goes to the first of key-stores in tokenbrokerd.conf that takes it (default:
            secret-service tpm file); a plain key file not chosen with `key move` moves to a better store
            at the next start. Moves never re-create the key, and a `kill -9` during one loses nothing.
            """,
        subcommands: [KeyStatusCommand.self, KeyMove.self],
        defaultSubcommand: KeyStatusCommand.self
    )

    /// Prints `status` as JSON, or in lines for people.
    static func show(_ status: KeyStoreStatus, json: Bool) throws {
        if json { return try Output.json(status) }
        for line in describe(status) { Output.line(line) }
    }

    /// The status, in lines for people.
    static func describe(_ status: KeyStoreStatus) -> [String] {
        var lines: [String] = []
        let store = status.store ?? "none yet"
        lines.append("key store:   \(store)\(status.chosen ? " (chosen)" : "")\(status.locked ? ", LOCKED" : "")")
        if let protection = status.protection { lines.append("protection:  \(protection)") }
        if let problem = status.problem { lines.append("locked:      \(problem)") }
        if let hint = status.hint { lines.append("to unlock:   \(hint)") }
        if let warning = status.warning { lines.append("warning:     \(warning)") }
        if !status.order.isEmpty { lines.append("order:       \(status.order.joined(separator: " "))") }
        return lines
    }
}

struct KeyStatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show where the cache key is kept, what that protects against, and why the cache is locked."
    )

    @OptionGroup var connection: ConnectionOptions
    @Flag(help: "Print the status as JSON.") var json = false

    func run() async throws {
        try await withBroker(connection) { broker in
            try Key.show(try await broker.keyStatus(), json: json)
        }
    }
}

struct KeyMove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "move",
        abstract: "Keep the cache key in another store from now on (the tokens stay; nothing is re-created).",
        discussion: """
            For --to passphrase, the new passphrase is asked for twice on the terminal, or read as one line
            from standard input when that is not a terminal.
            """
    )

    @OptionGroup var connection: ConnectionOptions
    @Option(help: "secret-service, tpm, passphrase or file.") var to: String
    @Flag(help: "Print the status after the move as JSON.") var json = false

    func validate() throws {
        let stores = ConfigurationFile.keyStoreNames
        guard stores.contains(to) else { throw ValidationError("--to takes one of \(stores.joined(separator: ", "))") }
    }

    func run() async throws {
        let passphrase = to == "passphrase" ? try PassphraseInput.read(prompt: "New passphrase", confirm: true) : nil
        try await withBroker(connection) { broker in
            try Key.show(try await broker.moveCacheKey(to: to, passphrase: passphrase), json: json)
        }
    }
}

struct Unlock: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Unlock the cache: give its passphrase, or have the broker try the locked keyring again.",
        discussion: """
            With the key in the passphrase store, the passphrase is asked for on the terminal (or read as one
            line from standard input when that is not a terminal). Wrong passphrases make the broker wait
            longer before the next try (1 s, 2 s, 4 s … 5 min). With the key in a locked keyring, the
            keyring is asked to unlock (on a desktop, with its own prompt) and the broker tries again.
            """
    )

    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        try await withBroker(connection) { broker in
            let before = try await broker.keyStatus()
            guard before.locked else { return try Key.show(before, json: false) }
            let passphrase =
                before.store == "passphrase" ? try PassphraseInput.read(prompt: "Passphrase", confirm: false) : nil
            try Key.show(try await broker.unlockCache(passphrase: passphrase), json: false)
        }
    }
}

/// Reading a passphrase: from the terminal without echo, else one line of standard input.
enum PassphraseInput {
    static func read(prompt: String, confirm: Bool) throws -> String {
        guard isatty(0) == 1 else {
            guard let line = readLine(strippingNewline: true), !line.isEmpty else {
                throw Failure("no passphrase on standard input", exitCode: ExitCode(64))
            }
            return line
        }
        let first = try readHidden(prompt + ": ")
        guard !first.isEmpty else { throw Failure("the passphrase is empty", exitCode: ExitCode(64)) }
        if confirm, try readHidden(prompt + " (again): ") != first {
            throw Failure("the two passphrases differ", exitCode: ExitCode(64))
        }
        return first
    }

    /// One line from the terminal with echo off (restored even when reading fails).
    private static func readHidden(_ prompt: String) throws -> String {
        Output.write(2, prompt)
        var saved = termios()
        guard tcgetattr(0, &saved) == 0 else { throw Failure("cannot read the terminal", exitCode: ExitCode(74)) }
        var quiet = saved
        quiet.c_lflag &= ~tcflag_t(ECHO)
        tcsetattr(0, TCSAFLUSH, &quiet)
        defer {
            tcsetattr(0, TCSAFLUSH, &saved)
            Output.write(2, "\n")
        }
        return readLine(strippingNewline: true) ?? ""
    }
}
