// A libFuzzer target over what a client's bytes reach first: the framer (split into lines, bounded in size), the
// request decoder (strict JSON, the JSON-RPC envelope, every method's params), and the cache import (MSAL and ADAL
// documents). `scripts/fuzz.sh` builds it with `-sanitize=fuzzer,address` and runs it for a bounded time; built
// without it (as `swift build` does), it is a program that says how to run it.
//
// The first byte of an input picks the target; the rest is the input. Besides not crashing, each target checks
// what must hold for every input: frames are the input's lines and never longer than the limit, a request the
// decoder rejects is classified as JSON-RPC says, and an MSAL document read back from what was written holds the
// same entries.

import BrokerCache
import BrokerProtocol
import Foundation
import NIOCore
import NIOEmbedded

@testable import BrokerServer

#if TOKENBROKER_FUZZING
/// libFuzzer's driver (the body of its own `main`), declared here: SwiftPM names this program's entry point
/// `tokenbroker_fuzz_main` and points `main` at it, which hides libFuzzer's `main`.
@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

@_cdecl("tokenbroker_fuzz_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return runFuzzerDriver(&count, &arguments) { start, count in fuzz(start, count) }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    guard let start else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    guard let selector = bytes.first else { return 0 }
    let input = Array(bytes.dropFirst())
    switch selector % 4 {
    case 0: Targets.frames(input, chunking: selector)
    case 1: Targets.request(input)
    case 2: Targets.msalImport(input)
    default: Targets.adalImport(input)
    }
    return 0
}
#else
@main
enum FuzzEntry {
    static func main() {
        FileHandle.standardError.write(Data("this is a libFuzzer target: run scripts/fuzz.sh\n".utf8))
        exit(64)
    }
}
#endif

enum Targets {
    static let frameLimit = 512
    static let utc = TimeZone(secondsFromGMT: 0) ?? .current

    /// The framer, fed in chunks whose sizes come from the selector: every frame it passes on is a line of the
    /// input, within the limit, in order; a longer line ends the connection.
    static func frames(_ input: [UInt8], chunking selector: UInt8) {
        let channel = EmbeddedChannel()
        let collector = Collector()
        let limits = FrameLimits(
            maximumFrameBytes: frameLimit,
            idleTimeout: .seconds(10),
            frameDeadline: .seconds(30),
            outputBudget: 1 << 20
        )
        do {
            try channel.pipeline.syncOperations.addHandlers(FrameHandler(limits: limits), collector)
        } catch {
            preconditionFailure("cannot set up the framer: \(error)")
        }
        let chunk = Int(selector >> 2) + 1
        var offset = 0
        while offset < input.count, !collector.ended {
            let end = min(input.count, offset + chunk)
            do {
                try channel.writeInbound(ByteBuffer(bytes: input[offset..<end]))
            } catch {
                preconditionFailure("the framer threw: \(error)")
            }
            offset = end
        }
        // What follows the last newline (nothing, or an unfinished line) is no frame.
        let lines = input.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).dropLast()
            .map(Array.init)
        let expected = Array(lines.prefix { $0.count <= frameLimit })
        precondition(collector.frames == Array(expected.prefix(collector.frames.count)), "a frame is no input line")
        precondition(collector.frames.allSatisfy { $0.count <= frameLimit }, "a frame over the limit")
        if !collector.ended {
            precondition(collector.frames == expected, "frames \(collector.frames), wanted \(expected)")
        }
        _ = try? channel.finish()
    }

    /// The request decoder: an answer for everything, and the classification JSON-RPC asks for.
    static func request(_ input: [UInt8]) {
        switch RequestDecoder().decode(input) {
        case .success: break
        case .failure(let rejection):
            let code = rejection.error.errorCode
            precondition(
                [ErrorCode.parseError, .invalidRequest, .methodNotFound, .invalidParams].contains(code),
                "a rejection classified \(code)"
            )
            if code == .parseError { precondition(rejection.id == nil, "a parse error with an id") }
        }
    }

    /// The MSAL import: what it reads, written and read again, is the same.
    static func msalImport(_ input: [UInt8]) {
        guard let read = try? MSALCacheDocument.read(Data(input)) else { return }
        do {
            let again = try MSALCacheDocument.read(try MSALCacheDocument.write(read.entries))
            precondition(Set(again.entries) == Set(read.entries), "an MSAL document changed in a round trip")
        } catch {
            preconditionFailure("what the MSAL import read cannot be written and read again: \(error)")
        }
    }

    /// The ADAL import.
    static func adalImport(_ input: [UInt8]) {
        _ = try? ADALCacheDocument.read(Data(input), timeZone: utc, now: 1_800_000_000)
    }
}

/// Collects the framer's frames, and whether it ended the connection.
final class Collector: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    var frames: [[UInt8]] = []
    var ended = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var frame = unwrapInboundIn(data)
        frames.append(frame.readBytes(length: frame.readableBytes) ?? [])
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is FrameCondition { ended = true }
    }
}
