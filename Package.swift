// swift-tools-version:6.2
import Foundation
import PackageDescription

// Every target of ours gets the same settings: Swift 6 mode, explicit public imports, warnings as errors.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .treatAllWarnings(as: .error),
]

let nioCore = Target.Dependency.product(name: "NIOCore", package: "swift-nio")
let nioPosix = Target.Dependency.product(name: "NIOPosix", package: "swift-nio")
let nioHTTP1 = Target.Dependency.product(name: "NIOHTTP1", package: "swift-nio")
let nioEmbedded = Target.Dependency.product(name: "NIOEmbedded", package: "swift-nio")
let logging = Target.Dependency.product(name: "Logging", package: "swift-log")
let argumentParser = Target.Dependency.product(name: "ArgumentParser", package: "swift-argument-parser")
let serviceLifecycle = Target.Dependency.product(name: "ServiceLifecycle", package: "swift-service-lifecycle")
let unixSignals = Target.Dependency.product(name: "UnixSignals", package: "swift-service-lifecycle")
let grdb = Target.Dependency.product(name: "GRDB", package: "GRDB.swift")
let crypto = Target.Dependency.product(name: "Crypto", package: "swift-crypto")
let cryptoExtras = Target.Dependency.product(name: "CryptoExtras", package: "swift-crypto")
let asyncHTTPClient = Target.Dependency.product(name: "AsyncHTTPClient", package: "async-http-client")
let nioSSL = Target.Dependency.product(name: "NIOSSL", package: "swift-nio-ssl")
let x509 = Target.Dependency.product(name: "X509", package: "swift-certificates")
let asn1 = Target.Dependency.product(name: "SwiftASN1", package: "swift-asn1")

// libsecret's header directories (GLib's are spread over /usr/include and an architecture's /usr/lib), from pkg-config
// as the manifest is read. Not a `systemLibrary`: that would link libsecret and GLib into the daemon, which opens them
// only when it finds a session bus (Sources/CKeyStores/Library.h).
let secretServiceIncludes: [String] = {
    let pkgConfig = Process()
    pkgConfig.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    pkgConfig.arguments = ["pkg-config", "--cflags-only-I", "libsecret-1"]
    let output = Pipe()
    pkgConfig.standardOutput = output
    pkgConfig.standardError = FileHandle.nullDevice
    // Debian's directories when pkg-config is missing or does not know libsecret yet: a manifest read before
    // libsecret-1-dev was installed is kept by SwiftPM, and must still hold once it is.
    #if arch(arm64)
    let glibConfig = "/usr/lib/aarch64-linux-gnu/glib-2.0/include"
    #else
    let glibConfig = "/usr/lib/x86_64-linux-gnu/glib-2.0/include"
    #endif
    let debian = ["-I/usr/include/libsecret-1", "-I/usr/include/glib-2.0", "-I\(glibConfig)"]
    guard (try? pkgConfig.run()) != nil else { return debian }
    let flags = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    pkgConfig.waitUntilExit()
    guard pkgConfig.terminationStatus == 0 else { return debian }
    return flags.split(whereSeparator: \.isWhitespace).map(String.init)
}()

// The release daemon's link (lld): a long-running process pays for every page of its 170 MB executable it touches,
// so the link keeps that small (BENCHMARKS.md, "Memory, second pass"). Relative relocations packed (DT_RELR, glibc
// 2.36) instead of a 3 MB table read at every start; no dynamic symbol table (nothing links against the daemon: exports.map);
// and the functions that start-up, a cached answer and a refresh run, in the order they first run, placed together
// (Sources/tokenbrokerd/start-up.order, written by scripts/order-file.sh), not spread over 30 MB of code. The linker
// moves sections, not functions: the order only holds for code compiled a function to a section, as the release
// builds of scripts/ do (RELEASE_BUILD in scripts/lib.sh). The compiler's private functions (closure contexts'
// destroy functions, thunks of merged functions: `.text..L…` sections) have no symbol to order by:
// private-functions.ld puts all of them, 256 KiB, in one block before the rest; spread over the code, the few that
// start-up runs had kept 3.7 MiB of it in memory.
let daemonSources = "\(Context.packageDirectory)/Sources/tokenbrokerd"

let daemonReleaseLinkFlags = [
    "-use-ld=lld",
    "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
    "-Xlinker", "--version-script=\(daemonSources)/exports.map",
    "-Xlinker", "--symbol-ordering-file=\(daemonSources)/start-up.order",
    "-Xlinker", "--script=\(daemonSources)/private-functions.ld",
    "-Xlinker", "--no-warn-symbol-ordering",
]

// The release CLI's link: a static executable, its functions placed as the daemon's are, in the order `token`,
// `kube-credential` and `git-credential get` first run them (Sources/tokenbroker/fast-path.order, written by
// scripts/order-file.sh), private functions in one block. A process per token pays a page fault for every page of code
// it touches: 138 faults before, 93 after (BENCHMARKS.md, "sixth pass").
let cliSources = "\(Context.packageDirectory)/Sources/tokenbroker"

let cliReleaseLinkFlags = [
    "-static-executable",
    "-use-ld=lld",
    "-Xlinker", "--symbol-ordering-file=\(cliSources)/fast-path.order",
    "-Xlinker", "--no-warn-symbol-ordering",
    "-Xlinker", "--script=\(daemonSources)/private-functions.ld",
]

// libFuzzer (scripts/fuzz.sh sets TOKENBROKER_FUZZING=1): the modules whose code the fuzzer drives (the request
// decoder, the cache import, the framer) are compiled with its coverage and AddressSanitizer, in the debug build's own
// tree. The dependencies keep the objects `swift build` made there: instrumenting them too meant building every one of
// them a second time, ten minutes of a CI run. `swift build` without the variable compiles the three again as before.
let fuzzing = ProcessInfo.processInfo.environment["TOKENBROKER_FUZZING"] == "1"
let sanitizers = ["-sanitize=fuzzer,address"]
let fuzzed: [SwiftSetting] = fuzzing ? [.unsafeFlags(sanitizers)] : []
// The harness's own entry point is libFuzzer's driver (Tests/Fuzz/Fuzz.swift); it links with lld, which does not warn
// about AddressSanitizer's local symbols as gold does.
let fuzzHarness: [SwiftSetting] =
    fuzzing ? [.unsafeFlags(sanitizers + ["-parse-as-library"]), .define("TOKENBROKER_FUZZING")] : []
let fuzzHarnessLink: [LinkerSetting] = fuzzing ? [.unsafeFlags(sanitizers + ["-use-ld=lld"])] : []

let package = Package(
    name: "TokenBroker",
    platforms: [.macOS(.v15)],  // Linux is the target; this only keeps Duration/Clock available on macOS.
    products: [
        .library(name: "BrokerProtocol", targets: ["BrokerProtocol"]),
        .library(name: "BrokerClient", targets: ["BrokerClient"]),
        .executable(name: "tokenbrokerd", targets: ["tokenbrokerd"]),
        .executable(name: "tokenbroker", targets: ["tokenbroker"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
    ],
    targets: [
        // The wire contract: JSON-RPC envelope, params and results, error codes, limits. Foundation only.
        .target(name: "BrokerProtocol", swiftSettings: swiftSettings + fuzzed),
        // The one clock every time-dependent part takes (wall time, monotonic time, sleeping). Foundation only.
        .target(name: "BrokerTime", swiftSettings: swiftSettings),
        // The user's configuration file (tokenbrokerd.conf), which the daemon reads and the CLI adds browser profiles
        // to. Foundation only.
        .target(name: "BrokerSettings", swiftSettings: swiftSettings),
        // The async Swift client apps link: no cache, OAuth or server code.
        .target(
            name: "BrokerClient",
            dependencies: ["BrokerProtocol", nioCore, nioPosix],
            swiftSettings: swiftSettings
        ),
        // The MSAL unified cache model, freshness rules, the SQLite store, sealing, MSAL/ADAL interchange.
        .target(
            name: "BrokerCache",
            dependencies: [
                "BrokerProtocol", "BrokerTime", "CLinuxSupport", "CKeyStores", "CArgon2", grdb, crypto, logging,
            ],
            swiftSettings: swiftSettings + fuzzed
        ),
        // The OAuth/OIDC client side: authorities, discovery, grants, id_token checks, loopback redirect, browsers.
        .target(
            name: "BrokerOAuth",
            dependencies: [
                "BrokerProtocol", "BrokerTime", "CLinuxSupport", asyncHTTPClient, nioCore, nioPosix, nioHTTP1, nioSSL,
                crypto,
                cryptoExtras, logging,
            ],
            swiftSettings: swiftSettings
        ),
        // The broker itself: TokenBroker and its method handlers. No sockets, no NIO.
        .target(
            name: "BrokerCore",
            dependencies: ["BrokerProtocol", "BrokerCache", "BrokerOAuth", "BrokerTime", crypto, logging],
            swiftSettings: swiftSettings
        ),
        // libsystemd (pkg-config `libsystemd`, Debian's libsystemd-dev): listen fds, sd_notify, the journal.
        .systemLibrary(
            name: "CSystemd",
            path: "Sources/CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        // The cache key's stores, in C over their libraries: the Secret Service (libsecret, Debian's libsecret-1-dev)
        // and the TPM 2.0 (tpm2-tss's ESAPI, libtss2-dev). Compiled against their headers, never linked: CKeyStores
        // opens the libraries on first use (Library.h), so a daemon that uses neither store does not map them.
        .target(
            name: "CKeyStores",
            cSettings: [.unsafeFlags(secretServiceIncludes)]
        ),
        // Argon2id (Debian's libargon2-dev), the memory-hard function a passphrase is stretched with.
        .systemLibrary(
            name: "CArgon2",
            path: "Sources/CArgon2",
            pkgConfig: "libargon2",
            providers: [.apt(["libargon2-dev"])]
        ),
        // Linux calls Swift's Glibc module does not declare (_GNU_SOURCE, variadic): closefrom in posix_spawn, prctl,
        // madvise, SO_PEERPIDFD.
        .target(name: "CLinuxSupport"),
        // The daemon's side of systemd: socket activation, notify and watchdog, the journald log handler, and what
        // a daemon does to itself before it serves (private files, no core dump, no inherited descriptor leaking).
        .target(
            name: "BrokerSystemd",
            dependencies: ["CSystemd", "CLinuxSupport", "BrokerTime", logging, serviceLifecycle, unixSignals],
            swiftSettings: swiftSettings
        ),
        // Microsoft's Broker1 interface on the session bus (sd-bus): a second door into the same broker.
        .target(
            name: "BrokerDBus",
            dependencies: [
                "BrokerCore", "BrokerOAuth", "BrokerProtocol", "BrokerTime", "CSystemd", logging, serviceLifecycle,
            ],
            swiftSettings: swiftSettings
        ),
        // The managed-identity HTTP endpoint (App Service form) for containers and sandboxes, per grant.
        .target(
            name: "BrokerManagedIdentity",
            dependencies: [
                "BrokerCore", "BrokerProtocol", "BrokerTime", nioCore, nioPosix, nioHTTP1, logging, serviceLifecycle,
            ],
            swiftSettings: swiftSettings
        ),
        // The Unix-socket server: framing, peer credentials, limits, JSON-RPC dispatch.
        .target(
            name: "BrokerServer",
            dependencies: [
                "BrokerCore", "BrokerProtocol", "BrokerTime", "CLinuxSupport", nioCore, nioPosix, logging,
                serviceLifecycle,
            ],
            swiftSettings: swiftSettings + fuzzed
        ),
        // Thin executables: configuration and wiring only.
        .executableTarget(
            name: "tokenbrokerd",
            dependencies: [
                "BrokerServer", "BrokerCore", "BrokerCache", "BrokerOAuth", "BrokerProtocol", "BrokerSystemd",
                "BrokerDBus", "BrokerManagedIdentity", "BrokerSettings", "BrokerTime", "CLinuxSupport", argumentParser,
                logging,
                serviceLifecycle, unixSignals,
                nioCore,
                nioPosix,
            ],
            exclude: ["exports.map", "start-up.order", "private-functions.ld"],
            swiftSettings: swiftSettings,
            linkerSettings: [.unsafeFlags(daemonReleaseLinkFlags, .when(platforms: [.linux], configuration: .release))]
        ),
        .executableTarget(
            name: "tokenbroker",
            dependencies: ["BrokerClient", "BrokerProtocol", "BrokerSettings", argumentParser],
            exclude: ["fast-path.order"],
            swiftSettings: swiftSettings,
            // A fully static release CLI: no dynamic loader, no relocations of a large position-independent binary,
            // so a process per token (scripts, git, kubectl) starts in about a millisecond (BENCHMARKS.md).
            linkerSettings: [.unsafeFlags(cliReleaseLinkFlags, .when(platforms: [.linux], configuration: .release))]
        ),
        // Benchmark driver (release build, never a test).
        .executableTarget(
            name: "tokenbroker-bench",
            dependencies: ["BrokerClient", "BrokerProtocol", "BrokerCache", "BrokerCore", logging, argumentParser],
            path: "Benchmarks/tokenbroker-bench",
            swiftSettings: swiftSettings
        ),
        // The Entra-shaped identity provider the tests start (test support, never a product).
        .executableTarget(
            name: "tokenbroker-test-idp",
            dependencies: [
                "BrokerProtocol", nioCore, nioPosix, nioHTTP1, nioSSL, x509, asn1, crypto, cryptoExtras, argumentParser,
            ],
            path: "Tests/TestIdentityProvider",
            exclude: ["README.md", "smoke_test.sh"],
            swiftSettings: swiftSettings
        ),
        // A libFuzzer target over the framer, the request decoder and the cache import (scripts/fuzz.sh).
        .executableTarget(
            name: "tokenbroker-fuzz",
            dependencies: ["BrokerProtocol", "BrokerCache", "BrokerServer", nioCore, nioEmbedded],
            path: "Tests/Fuzz",
            // Inputs that once broke an invariant, replayed by every run (scripts/fuzz.sh).
            exclude: ["regressions"],
            swiftSettings: swiftSettings + fuzzHarness,
            linkerSettings: fuzzHarnessLink
        ),
        // Test-only helpers: temporary directories, starting the built daemon, cache fixtures.
        .target(
            name: "BrokerTestSupport",
            dependencies: [
                "BrokerProtocol", "BrokerClient", "BrokerCache", "BrokerOAuth", "BrokerSettings", "BrokerTime",
                "CLinuxSupport", logging,
            ],
            path: "Tests/BrokerTestSupport",
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "BrokerProtocolTests", dependencies: ["BrokerProtocol"], swiftSettings: swiftSettings),
        .testTarget(
            name: "BrokerTimeTests",
            dependencies: ["BrokerTime", "BrokerTestSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BrokerSettingsTests",
            dependencies: ["BrokerSettings", "BrokerTestSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BrokerCacheTests",
            dependencies: [
                "BrokerCache", "BrokerProtocol", "BrokerSettings", "BrokerTestSupport", "CLinuxSupport", grdb,
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BrokerOAuthTests",
            dependencies: ["BrokerOAuth", "BrokerProtocol", "BrokerTestSupport", "BrokerTime", crypto, cryptoExtras],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BrokerCoreTests",
            dependencies: [
                "BrokerCore", "BrokerCache", "BrokerOAuth", "BrokerProtocol", "BrokerTestSupport", "BrokerTime",
                logging,
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BrokerServerTests",
            dependencies: [
                "BrokerServer", "BrokerCore", "BrokerCache", "BrokerProtocol", "BrokerTestSupport", nioCore, nioPosix,
                nioEmbedded, logging,
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BrokerSystemdTests",
            dependencies: [
                "BrokerSystemd", "BrokerProtocol", "BrokerTestSupport", "BrokerTime", "CLinuxSupport", logging,
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BrokerDBusTests",
            dependencies: ["BrokerDBus", "BrokerCore", "BrokerCache", "BrokerProtocol", "BrokerTestSupport", logging],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BrokerManagedIdentityTests",
            dependencies: [
                "BrokerManagedIdentity", "BrokerCore", "BrokerCache", "BrokerProtocol", "BrokerTestSupport", nioCore,
                nioHTTP1, logging,
            ],
            swiftSettings: swiftSettings
        ),
        // The CLI's own logic (git's credential protocol, kubectl's ExecCredential, the start-up path's reading):
        // unit tests of the executable's code; Tests/tools runs the built CLI with the real git and kubectl client.
        .testTarget(
            name: "TokenbrokerCLITests",
            dependencies: ["tokenbroker", "BrokerClient", "BrokerProtocol"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BrokerClientTests",
            dependencies: ["BrokerClient", "BrokerProtocol", "BrokerTestSupport", nioCore, nioEmbedded],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["BrokerClient", "BrokerProtocol", "BrokerCache", "BrokerOAuth", "BrokerTestSupport", grdb],
            swiftSettings: swiftSettings
        ),
    ]
)
