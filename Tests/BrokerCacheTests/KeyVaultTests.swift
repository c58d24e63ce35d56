import BrokerCache
import BrokerProtocol
import BrokerSettings
import BrokerTestSupport
import Foundation
import Logging
import Testing

/// The key vault with the stores a unit test can reach for real (the plain file and the passphrase); the keyring
/// and the TPM are proven by Tests/keys with gnome-keyring and swtpm.
struct KeyVaultTests {
    private func entries() throws -> [CacheEntry] {
        let document = CacheFixtures.msalCache(people: [CacheFixtures.ada], label: "1")
        return try MSALCacheDocument.read(Data(CacheFixtures.text(document).utf8)).entries
    }

    /// A cache as 0.4 left it: tokens sealed under a plain key file, no key record.
    private func legacyCache(in directory: TemporaryDirectory) async throws -> (CacheLocation, [CacheEntry]) {
        let location = CacheLocation(stateDirectory: directory.url)
        let written = try entries()
        let cache = try await TokenCache(store: try location.openStore())
        try await cache.commit(CacheChanges(upserts: written))
        return (location, written)
    }

    /// The vault of a legacy cache whose key moved to the passphrase `right`: locked, as a daemon starts on it.
    private func passphraseVault(
        in directory: TemporaryDirectory,
        clock: TestClock
    ) async throws -> (CacheVault, [CacheEntry]) {
        let (location, written) = try await legacyCache(in: directory)
        let keys = KeyVault(location: location, order: [.file])
        let current = try keys.open(passphrase: nil)
        _ = try keys.move(
            current.key,
            from: current.record,
            to: .passphrase,
            passphrase: Passphrase("right"),
            chosen: true
        )
        let vault = CacheVault(keys: keys, logger: Logger(label: "test"), clock: clock)
        #expect(await vault.open() == false)
        return (vault, written)
    }

    private func opened(_ vault: KeyVault, passphrase: String? = nil) async throws -> TokenCache {
        let opened = try vault.open(passphrase: passphrase.map(Passphrase.init))
        return try await vault.location.openCache(key: opened.key, keyIsNew: opened.isNew)
    }

    /// The names tokenbrokerd.conf and the CLI accept are the stores'.
    @Test func theConfigurationNamesEveryStore() {
        #expect(KeyStoreKind.allCases.map(\.rawValue) == ConfigurationFile.keyStoreNames)
    }

    /// A new cache with only the file store: the key in `cache.key`, a record naming it, the same key next time.
    @Test func aNewCacheKeepsItsKeyInTheFirstStoreThatTakesIt() async throws {
        let directory = try TemporaryDirectory()
        let vault = KeyVault(location: CacheLocation(stateDirectory: directory.url), order: [.file])
        let first = try vault.open(passphrase: nil)
        #expect(first.isNew && first.record.store == .file && !first.record.chosen)
        let cache = try await vault.location.openCache(key: first.key, keyIsNew: true)
        try await cache.commit(CacheChanges(upserts: try entries()))
        let again = try vault.open(passphrase: nil)
        #expect(!again.isNew && again.record == first.record)
        let count = try entries().count
        #expect(try await opened(vault).read { $0.count.total } == count)
    }

    /// A legacy key file moves to the passphrase store: the tokens open under the passphrase only, the key file
    /// is gone, and nothing in the state directory holds the key or the passphrase.
    @Test func aKeyFileMovesToAPassphrase() async throws {
        let directory = try TemporaryDirectory()
        let (location, written) = try await legacyCache(in: directory)
        let keyBytes = try Data(contentsOf: location.keyURL)
        let vault = KeyVault(location: location, order: [.file])
        let current = try vault.open(passphrase: nil)
        let moved = try vault.move(
            current.key,
            from: current.record,
            to: .passphrase,
            passphrase: Passphrase("a long passphrase"),
            chosen: true
        )
        #expect(moved.store == .passphrase && moved.chosen && moved.previous == nil && moved.wrapped != nil)
        #expect(!FileManager.default.fileExists(atPath: location.keyURL.path))
        do {
            _ = try vault.open(passphrase: nil)
            Issue.record("the key opened without its passphrase")
        } catch {
            guard case .locked = error.problem else { throw error }
            #expect(error.store == .passphrase)
        }
        do {
            _ = try vault.open(passphrase: Passphrase("not it"))
            Issue.record("a wrong passphrase opened the key")
        } catch {
            #expect(error.problem == .wrongPassphrase && error.store == .passphrase)
        }
        #expect(Set(try await opened(vault, passphrase: "a long passphrase").allEntriesWithSecrets()) == Set(written))
        for file in try FileManager.default.subpathsOfDirectory(atPath: location.stateDirectory.path) {
            let data = (try? Data(contentsOf: location.stateDirectory.appending(path: file))) ?? Data()
            #expect(data.range(of: keyBytes) == nil, "\(file) holds the key")
            #expect(data.range(of: Data("a long passphrase".utf8)) == nil, "\(file) holds the passphrase")
        }
    }

    /// A database with tokens and no key anywhere: locked, and no key is made up for it.
    @Test func aMissingKeyIsNeverMadeAnew() async throws {
        let directory = try TemporaryDirectory()
        let (location, _) = try await legacyCache(in: directory)
        try FileManager.default.removeItem(at: location.keyURL)
        let vault = KeyVault(location: location, order: [.file])
        #expect(throws: KeyUnavailable.self) { try vault.open(passphrase: nil) }
        #expect(!FileManager.default.fileExists(atPath: location.keyURL.path))
        #expect(!FileManager.default.fileExists(atPath: location.keyRecordURL.path))
    }

    /// A damaged record locks the cache and changes nothing.
    @Test func aDamagedRecordChangesNothing() async throws {
        let directory = try TemporaryDirectory()
        let (location, _) = try await legacyCache(in: directory)
        try Data("{not json".utf8).write(to: location.keyRecordURL)
        let before = try Data(contentsOf: location.keyURL)
        #expect(throws: KeyUnavailable.self) { try KeyVault(location: location).open(passphrase: nil) }
        #expect(try Data(contentsOf: location.keyURL) == before)
        #expect(try Data(contentsOf: location.keyRecordURL) == Data("{not json".utf8))
    }

    /// The vault of a passphrase cache: locked at start, wrong passphrases refused with a growing wait, the right
    /// one (after the wait) opens it.
    @Test func wrongPassphrasesWaitLonger() async throws {
        let directory = try TemporaryDirectory()
        let clock = TestClock()
        let (vault, written) = try await passphraseVault(in: directory, clock: clock)
        #expect(vault.lock?.store == .passphrase && vault.status.locked)
        await #expect(throws: KeyUnavailable.self) { try await vault.unlock(passphrase: Passphrase("wrong")) }
        do {
            _ = try await vault.unlock(passphrase: Passphrase("right"))
            Issue.record("a passphrase was tried within the wait")
        } catch {
            #expect(error.retryAfter == 1)
        }
        // Each wrong one doubles the wait: 1, 2, 4 … seconds.
        for wait in [1, 2, 4] {
            clock.advance(by: .seconds(wait))
            do {
                _ = try await vault.unlock(passphrase: Passphrase("wrong"))
                Issue.record("a wrong passphrase opened the cache")
            } catch {
                #expect(error.problem == .wrongPassphrase && error.retryAfter == nil)
            }
            do {
                _ = try await vault.unlock(passphrase: Passphrase("right"))
                Issue.record("a passphrase was tried within the wait")
            } catch {
                #expect(error.retryAfter == wait * 2)
            }
        }
        clock.advance(by: .seconds(8))
        #expect(try await vault.unlock(passphrase: Passphrase("right")))
        #expect(Set(try await vault.cache?.allEntriesWithSecrets() ?? []) == Set(written))
        #expect(vault.status.store == "passphrase" && !vault.status.locked)
    }

    /// Passphrases sent at once (a script guessing in parallel) are not tried side by side: one is, the others are
    /// told to wait, so the back-off bounds the guesses whatever the number of connections.
    @Test func passphrasesSentAtOnceAreTriedOneAtATime() async throws {
        let directory = try TemporaryDirectory()
        let (vault, _) = try await passphraseVault(in: directory, clock: TestClock())
        let outcomes = await withTaskGroup(of: KeyUnavailable?.self) { group in
            for guess in 0..<8 {
                group.addTask { () -> KeyUnavailable? in
                    do throws(KeyUnavailable) {
                        _ = try await vault.unlock(passphrase: Passphrase("guess \(guess)"))
                        return nil
                    } catch {
                        return error
                    }
                }
            }
            return await group.reduce(into: [KeyUnavailable?]()) { $0.append($1) }
        }
        let tried = outcomes.filter { $0?.problem == .wrongPassphrase && $0?.retryAfter == nil }
        let toldToWait = outcomes.filter { $0?.retryAfter != nil }
        #expect(tried.count == 1, "\(outcomes)")
        #expect(toldToWait.count == 7, "\(outcomes)")
        // Each is told why: the back-off after the wrong one, or the one still being tried (not called wrong).
        for refusal in toldToWait.compactMap({ $0 }) {
            let backOff = refusal.problem == .wrongPassphrase
            let another = refusal.problem == .locked("another passphrase is being tried") && refusal.retryAfter == 1
            #expect(backOff || another, "\(refusal)")
        }
        #expect(vault.cache == nil)
    }
}
