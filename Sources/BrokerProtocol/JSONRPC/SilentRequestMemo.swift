import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Silent requests read before, so that the same line with another id is not parsed again.
///
/// An app asks for its token over and over with one and the same line but for its `id`. The memo keeps the lines
/// ``SilentRequestReader`` took, split around the id's value, with what it read; a line whose bytes around its id
/// are those of a remembered one, and whose id is a plain integer or short ASCII string, is that request with this
/// id. Anything else goes to the reader, as before.
///
/// Only what the strict reader took is remembered, and only when this memo's own scan finds the id where the
/// parser found it: a line is answered from here only if the parser would have read it the same way.
package final class SilentRequestMemo: Sendable {
    /// A remembered request: what the reader read from its line, and the line's bytes around the id.
    ///
    /// Handed out by reference, so that a request answered from memory does not copy its parameters.
    package final class Request: Sendable {
        fileprivate let hash: UInt64
        fileprivate let beforeID: [UInt8]
        fileprivate let afterID: [UInt8]
        package let params: AcquireTokenSilentlyParams
        /// The key of `params.authParameters`.
        package let key: HashedAuthParameters

        fileprivate init(
            hash: UInt64,
            beforeID: [UInt8],
            afterID: [UInt8],
            params: AcquireTokenSilentlyParams,
            key: HashedAuthParameters
        ) {
            self.hash = hash
            self.beforeID = beforeID
            self.afterID = afterID
            self.params = params
            self.key = key
        }
    }

    /// Lines longer than this are not remembered (a silent request is a few hundred bytes).
    static let maximumLineBytes = 2048

    /// How a line is hashed: its bytes and where its id's value is.
    package typealias Hash = @Sendable (_ line: UnsafeRawBufferPointer, _ aroundID: Range<Int>) -> UInt64

    private let slots: Mutex<[Request?]>
    private let mask: Int
    private let hash: Hash

    /// A memo of `slots` lines (a power of two); a line takes the slot of its hash, replacing what was there.
    ///
    /// `hash` is for tests, which make lines collide to see that only equal bytes are taken.
    package init(slots: Int = 64, hash: @escaping Hash = SilentRequestMemo.hash) {
        precondition(slots > 0 && slots & (slots - 1) == 0, "slots must be a power of two")
        self.slots = Mutex([Request?](repeating: nil, count: slots))
        mask = slots - 1
        self.hash = hash
    }

    /// The request in `frame` when the memo has it; nil otherwise (without asking the reader).
    package func remembered(_ frame: UnsafeRawBufferPointer) -> (id: RequestID, request: Request)? {
        guard frame.count <= Self.maximumLineBytes, let idValue = Self.plainIDValue(in: frame) else { return nil }
        let hash = hash(frame, idValue.bytes)
        guard let request = slots.withLock({ $0[Int(truncatingIfNeeded: hash) & mask] }), request.hash == hash,
            Self.equal(request.beforeID, UnsafeRawBufferPointer(rebasing: frame[..<idValue.bytes.lowerBound])),
            Self.equal(request.afterID, UnsafeRawBufferPointer(rebasing: frame[idValue.bytes.upperBound...]))
        else { return nil }
        return (idValue.id, request)
    }

    /// Whether `remembered` and `bytes` are the same bytes.
    private static func equal(_ remembered: [UInt8], _ bytes: UnsafeRawBufferPointer) -> Bool {
        remembered.withUnsafeBytes { remembered in
            guard remembered.count == bytes.count else { return false }
            guard let left = remembered.baseAddress, let right = bytes.baseAddress else { return true }
            return memcmp(left, right, bytes.count) == 0
        }
    }

    /// The request in `frame` as ``SilentRequestReader`` reads it, remembered for the next line that differs from
    /// it only in its id; for a line ``remembered(_:)`` did not have.
    package func readAndRemember(
        _ frame: [UInt8]
    ) -> (id: RequestID, params: AcquireTokenSilentlyParams, key: HashedAuthParameters)? {
        guard let read = SilentRequestReader.readLocatingID(frame) else { return nil }
        let key = HashedAuthParameters(read.params.authParameters)
        let idValue = frame.count <= Self.maximumLineBytes ? frame.withUnsafeBytes { Self.plainIDValue(in: $0) } : nil
        if let idValue, idValue.bytes == read.idBytes, idValue.id == read.id {
            remember(frame, around: idValue.bytes, params: read.params, key: key)
        }
        return (read.id, read.params, key)
    }

    private func remember(
        _ frame: [UInt8],
        around idBytes: Range<Int>,
        params: AcquireTokenSilentlyParams,
        key: HashedAuthParameters
    ) {
        let hash = frame.withUnsafeBytes { self.hash($0, idBytes) }
        let request = Request(
            hash: hash,
            beforeID: Array(frame[..<idBytes.lowerBound]),
            afterID: Array(frame[idBytes.upperBound...]),
            params: params,
            key: key
        )
        slots.withLock { $0[Int(truncatingIfNeeded: hash) & mask] = request }
    }

    /// A fast hash of the bytes around the id (not for a table an attacker may flood: a slot only ever holds one
    /// line, and a collision just sends the line to the reader).
    package static func hash(_ bytes: UnsafeRawBufferPointer, around idBytes: Range<Int>) -> UInt64 {
        let seed = UInt64(truncatingIfNeeded: idBytes.lowerBound) &* 0x9E37_79B9_7F4A_7C15
        let before = add(bytes[..<idBytes.lowerBound], to: seed)
        return add(bytes[idBytes.upperBound...], to: before)
    }

    /// `hash` with `bytes` mixed in.
    ///
    /// Two running sums a word at a time (the second sums the first, so the words' order counts), mixed once at the
    /// end: a multiply and shift per word cost three times as much.
    private static func add(_ bytes: Slice<UnsafeRawBufferPointer>, to hash: UInt64) -> UInt64 {
        let bytes = UnsafeRawBufferPointer(rebasing: bytes)
        var sum = hash
        var sumOfSums: UInt64 = 0
        var position = 0
        // Four words a turn: the same sums, a third of the loop's own instructions.
        while position + 32 <= bytes.count {
            for offset in stride(from: position, to: position + 32, by: 8) {
                sum &+= bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                sumOfSums &+= sum
            }
            position += 32
        }
        while position + 8 <= bytes.count {
            sum &+= bytes.loadUnaligned(fromByteOffset: position, as: UInt64.self)
            sumOfSums &+= sum
            position += 8
        }
        var tail: UInt64 = 0
        while position < bytes.count {
            tail = tail << 8 | UInt64(bytes[position])
            position += 1
        }
        sum &+= tail
        sumOfSums &+= sum
        return mix(mix(sum, sumOfSums), UInt64(truncatingIfNeeded: bytes.count))
    }

    private static func mix(_ hash: UInt64, _ word: UInt64) -> UInt64 {
        let mixed = (hash ^ word) &* 0xFF51_AFD7_ED55_8CCD
        return mixed ^ (mixed >> 32)
    }

    struct IDValue {
        let id: RequestID
        /// The value's bytes in the line (a string's with its quotes).
        let bytes: Range<Int>
    }

    /// The value of the top-level `id` member when it is an integer (`-?(0|[1-9][0-9]*)`, in range) or a string of
    /// printable ASCII without escapes, of at most ``WireProtocol/maximumStringIdBytes``; nil for anything else.
    ///
    /// A scan, not a parse: it follows strings and nesting only far enough to find the first member named `id` of
    /// the outermost object. Its result is trusted only where the parser found the same.
    static func plainIDValue(in line: UnsafeRawBufferPointer) -> IDValue? {
        // The opening the broker's own clients write: the id's value follows at once, and the scan would find it there.
        let opening = line.count > commonOpening.count ? commonOpening.count : 0
        let common = opening > 0 && equal(commonOpening, UnsafeRawBufferPointer(rebasing: line[..<opening]))
        return line.withMemoryRebound(to: UInt8.self) { line -> IDValue? in
            if common { return value(in: line, at: opening) }
            var depth = 0
            var expectingKey = false
            var position = 0
            while position < line.count {
                switch line[position] {
                case UInt8(ascii: "\""):
                    let start = position
                    position += 1
                    while position < line.count, line[position] != UInt8(ascii: "\"") {
                        position += line[position] == UInt8(ascii: "\\") ? 2 : 1
                    }
                    guard position < line.count else { return nil }
                    position += 1
                    guard depth == 1, expectingKey else {
                        expectingKey = false
                        continue
                    }
                    expectingKey = false
                    guard position - start == 4, line[start + 1] == UInt8(ascii: "i"),
                        line[start + 2] == UInt8(ascii: "d")
                    else { continue }
                    skipWhitespace(line, &position)
                    guard position < line.count, line[position] == UInt8(ascii: ":") else { return nil }
                    position += 1
                    skipWhitespace(line, &position)
                    return value(in: line, at: position)
                case UInt8(ascii: "{"):
                    depth += 1
                    expectingKey = depth == 1
                    position += 1
                case UInt8(ascii: "["):
                    depth += 1
                    expectingKey = false
                    position += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    expectingKey = false
                    position += 1
                case UInt8(ascii: ","):
                    expectingKey = depth == 1
                    position += 1
                case 0x20, 0x09, 0x0A, 0x0D:
                    position += 1
                default:
                    expectingKey = false
                    position += 1
                }
            }
            return nil
        }
    }

    private static let commonOpening = Array(#"{"jsonrpc":"2.0","id":"#.utf8)

    private static func skipWhitespace(_ line: UnsafeBufferPointer<UInt8>, _ position: inout Int) {
        while position < line.count {
            switch line[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private static func value(in line: UnsafeBufferPointer<UInt8>, at start: Int) -> IDValue? {
        guard start < line.count else { return nil }
        var position = start
        if line[position] == UInt8(ascii: "\"") {
            position += 1
            while position < line.count, line[position] >= 0x20, line[position] <= 0x7E,
                line[position] != UInt8(ascii: "\""), line[position] != UInt8(ascii: "\\")
            {
                position += 1
            }
            guard position < line.count, line[position] == UInt8(ascii: "\""),
                position - start - 1 <= WireProtocol.maximumStringIdBytes
            else { return nil }
            let text = String(decoding: UnsafeBufferPointer(rebasing: line[start + 1..<position]), as: UTF8.self)
            return IDValue(id: .string(text), bytes: start..<position + 1)
        }
        let negative = line[position] == UInt8(ascii: "-")
        if negative { position += 1 }
        let digitsStart = position
        var value: Int64 = 0
        while position < line.count, line[position] >= UInt8(ascii: "0"), line[position] <= UInt8(ascii: "9") {
            guard let next = JSONTape.appending(digit: line[position], to: value, negative: negative) else {
                return nil
            }
            value = next
            position += 1
        }
        let digits = position - digitsStart
        // No digits, a leading zero, or a fraction or exponent next: not a plain integer.
        guard digits > 0, digits == 1 || line[digitsStart] != UInt8(ascii: "0") else { return nil }
        if position < line.count {
            switch line[position] {
            case UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"): return nil
            default: break
            }
        }
        return IDValue(id: .number(value), bytes: start..<position)
    }
}
