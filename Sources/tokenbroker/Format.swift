import ArgumentParser
import BrokerClient
import BrokerProtocol
import BrokerSettings
import Glibc

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Text formatting for people.
enum Format {
    static func table(header: [String], rows: [[String]]) -> String {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        return all.map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell + String(repeating: " ", count: max(0, widths[index] - cell.count))
            }.joined(separator: "  ")
        }.joined(separator: "\n")
    }

    static func duration(_ seconds: Int64) -> String {
        if seconds < 60 { return "\(seconds)s" }
        if seconds < 3600 { return "\(seconds / 60)m \(seconds % 60)s" }
        if seconds < 86400 { return "\(seconds / 3600)h \(seconds % 3600 / 60)m" }
        return "\(seconds / 86400)d \(seconds % 86400 / 3600)h"
    }

    static func time(_ date: Date) -> String {
        utcTimestamp(epochSeconds: Int64(date.timeIntervalSince1970.rounded(.down)))
    }

    /// `2026-11-24T18:05:09Z`: RFC 3339 in UTC, whole seconds (what `Date.ISO8601Format()` writes), without
    /// Foundation's calendar, so the CLI's start-up path can print it.
    static func utcTimestamp(epochSeconds: Int64) -> String {
        var time = time_t(epochSeconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func digits(_ value: Int32, _ count: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, count - text.count)) + text
        }
        return digits(parts.tm_year + 1900, 4) + "-" + digits(parts.tm_mon + 1, 2) + "-" + digits(parts.tm_mday, 2)
            + "T" + digits(parts.tm_hour, 2) + ":" + digits(parts.tm_min, 2) + ":" + digits(parts.tm_sec, 2) + "Z"
    }

    /// The `tokenbroker login` command that signs in for `request`.
    static func loginCommand(for request: TokenRequest) -> String {
        loginCommand(
            clientId: request.clientId,
            authority: request.authority,
            scopes: request.scopes,
            resources: request.resource.map { [$0] } ?? []
        )
    }

    /// The `tokenbroker login` command that signs in for `clientId` with these scopes and resources.
    static func loginCommand(clientId: String, authority: String?, scopes: [String], resources: [String]) -> String {
        var parts = ["tokenbroker", "login", "--client-id", clientId]
        if let authority { parts += ["--authority", authority] }
        for scope in scopes { parts += ["--scope", ShellWords.quote(scope)] }
        for resource in resources { parts += ["--resource", ShellWords.quote(resource)] }
        return parts.joined(separator: " ")
    }
}

extension Broker {
    /// A token without any UI; the broker's refusal as ``Failure/init(refusing:)``.
    func silentToken(_ request: TokenRequest) async throws -> TokenResult {
        do {
            return try await acquireTokenSilent(request)
        } catch {
            throw Failure(refusing: request, error)
        }
    }
}

extension Failure {
    /// The broker's refusal of a silent `request`, as `token`, the git helper and the kube plugin report it (on their
    /// start-up path too): when a sign-in is needed, with the `tokenbroker login` command as a hint.
    init(refusing request: TokenRequest, _ error: BrokerError) {
        let needsSignIn = error.code == .interactionRequired || error.code == .noAccount
        self.init(error, hint: needsSignIn ? "sign in with: " + Format.loginCommand(for: request) : nil)
    }
}

enum Files {
    /// A file's bytes, or why they cannot be read.
    ///
    /// Not a `Result`: a `Result` of an error type of ours is a generic type whose first use has the runtime check the
    /// error's conformance through every conformance record, on the start-up path of the credential helpers.
    enum Contents {
        case read([UInt8])
        case unreadable(String)
    }

    /// The bytes of the file at `path` (stdin when nil), or why they cannot be read.
    static func contents(_ path: String?) -> Contents {
        let fd = path.map { open($0, O_RDONLY | O_CLOEXEC) } ?? 0
        guard fd >= 0 else { return .unreadable(String(cString: strerror(errno))) }
        defer { if path != nil { close(fd) } }
        var bytes: [UInt8] = []
        // Uninitialized, as BlockingConnection's: a short input touches a page or two of it.
        let chunk = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: 1 << 16)
        defer { chunk.deallocate() }
        while true {
            let count = Glibc.read(fd, chunk.baseAddress, chunk.count)
            if count == 0 { return .read(bytes) }
            guard count > 0 else { return .unreadable(String(cString: strerror(errno))) }
            bytes += chunk[0..<count]
            // Larger than any export: stop reading, the caller refuses it.
            if bytes.count > WireProtocol.maximumResponseBytes { return .read(bytes) }
        }
    }

    /// Writes `data` to a new file at `path` with mode 0600, refusing to follow a symlink or overwrite.
    static func writePrivately(_ data: Data, to path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            Output.error("cannot create \(path): \(String(cString: strerror(errno)))")
            throw ExitCode(73)
        }
        defer { close(fd) }
        let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == data.count else {
            Output.error("cannot write \(path): \(String(cString: strerror(errno)))")
            throw ExitCode(74)
        }
    }
}
