/// Runs of bytes that stand for themselves inside a JSON string, found sixteen bytes at a time.
///
/// Tokens are long runs of such bytes: the provider's answer parsed and the broker's answer written both walk some
/// 4 KB of them in every refresh. Eight bytes at a time (a 64-bit word and bit tricks) took 17 instructions for each
/// eight; sixteen at a time with SIMD compares (SSE2's `pcmpeqb`, `pcmpgtb` and `pmovmskb` on x86-64) take about as
/// many for each sixteen (callgrind, over runs of 4 KB), and the escaping of a refresh's answer went from 13,400
/// instructions to 7,200. The constants are made before the loop: written inside the compares, the standard
/// library's generic SIMD operators were at times left uninlined and compared lane by lane, through memory.
enum PlainBytes {
    /// The first offset at or after `start` whose byte is a quote, a backslash or a control character (below 0x20),
    /// or with `nonASCII` also any byte of 0x80 or above; `buffer.count` when there is none.
    ///
    /// The bytes before it are written as they are in a JSON string; with `nonASCII`, they are also ASCII, so a
    /// parser need not validate them as UTF-8.
    @inline(__always)
    static func end(in buffer: UnsafeRawBufferPointer, from start: Int, nonASCII: Bool) -> Int {
        var index = start
        if let base = buffer.baseAddress {
            // As signed bytes, everything at 0x80 or above is negative, so one signed compare finds both the control
            // characters and the non-ASCII bytes; the latter are then let through when they need no escape.
            let quote = SIMD16<Int8>(repeating: 0x22)
            let backslash = SIMD16<Int8>(repeating: 0x5C)
            let space = SIMD16<Int8>(repeating: 0x20)
            let minusOne = SIMD16<Int8>(repeating: -1)
            while index + 16 <= buffer.count {
                let chunk = base.loadUnaligned(fromByteOffset: index, as: SIMD16<Int8>.self)
                let special = (chunk .== quote) .| (chunk .== backslash) .| (chunk .< space)
                // Without `nonASCII`, of the bytes below 0x20 as signed ones, only the control characters stop.
                let stops = nonASCII ? special : special .& (minusOne .< chunk)
                if any(stops) { break }
                index += 16
            }
        }
        while index < buffer.count {
            let byte = buffer[index]
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 || (nonASCII && byte >= 0x80) {
                break
            }
            index += 1
        }
        return index
    }
}
