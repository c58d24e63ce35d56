public import Foundation

/// ADAL Python's `expiresOn`: `str(datetime.now() + expires_in)`, a local time without a zone, such as
/// `2020-11-13 14:44:42.492318` (no fraction when the microseconds are zero).
///
/// Reading also takes `T` between date and time and an explicit zone (`Z`, `+01:00`, `+0100`), as other ADALs
/// wrote; a time without a zone is read in `timeZone`, the local zone of the machine that wrote it.
public enum LocalTime {
    /// The epoch seconds of `text`, rounded down; nil when it is not such a time.
    public static func epochSeconds(_ text: String, timeZone: TimeZone) -> Int64? {
        var scanner = DigitScanner(Array(text.utf8))
        guard let year = scanner.number(digits: 4), scanner.skip("-"), let month = scanner.number(digits: 2),
            scanner.skip("-"), let day = scanner.number(digits: 2), scanner.skip(" ") || scanner.skip("T"),
            let hour = scanner.number(digits: 2), scanner.skip(":"), let minute = scanner.number(digits: 2),
            scanner.skip(":"), let second = scanner.number(digits: 2),
            (1970...9999).contains(year), (1...12).contains(month), (1...31).contains(day), (0...23).contains(hour),
            (0...59).contains(minute), (0...60).contains(second)
        else { return nil }
        if scanner.skip(".") {
            guard let fraction = scanner.digits(), (1...9).contains(fraction) else { return nil }
        }
        var zone = timeZone
        if scanner.skip("Z") {
            zone = TimeZone(secondsFromGMT: 0) ?? timeZone
        } else if let sign = scanner.skip("+") ? 1 : scanner.skip("-") ? -1 : nil {
            guard let hours = scanner.number(digits: 2) else { return nil }
            _ = scanner.skip(":")
            guard let minutes = scanner.number(digits: 2), hours < 24, minutes < 60,
                let fixed = TimeZone(secondsFromGMT: sign * (hours * 3600 + minutes * 60))
            else { return nil }
            zone = fixed
        }
        guard scanner.isAtEnd else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let calendarDay = DateComponents(year: year, month: month, day: day)
        // Calendar rolls an impossible date (February 30) over to the next month: such a date is refused. The
        // seconds are added afterwards, so that a leap second (60) stays readable.
        guard let midnight = calendar.date(from: calendarDay),
            calendar.dateComponents([.year, .month, .day], from: midnight) == calendarDay,
            let date = calendar.date(bySettingHour: hour, minute: minute, second: 0, of: midnight)
        else { return nil }
        return Int64(date.timeIntervalSince1970.rounded(.down)) + Int64(second)
    }

    /// `seconds` as ADAL Python writes it in `timeZone`: `2020-11-13 14:44:42.000000`.
    public static func text(_ seconds: Int64, timeZone: TimeZone) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let parts = calendar.dateComponents(
            [.year, .month, .day, .hour, .minute, .second],
            from: Date(timeIntervalSince1970: TimeInterval(seconds))
        )
        func two(_ value: Int?) -> String {
            let text = String(value ?? 0)
            return text.count < 2 ? "0" + text : text
        }
        let year = String(parts.year ?? 1970)
        return "\(year)-\(two(parts.month))-\(two(parts.day)) \(two(parts.hour)):\(two(parts.minute)):"
            + "\(two(parts.second)).000000"
    }

}

/// Reads ASCII digits and separators from the front of a string.
private struct DigitScanner {
    private let bytes: [UInt8]
    private var position = 0

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    var isAtEnd: Bool {
        position == bytes.count
    }

    /// Consumes `character` when it comes next.
    mutating func skip(_ character: Unicode.Scalar) -> Bool {
        guard position < bytes.count, bytes[position] == UInt8(ascii: character) else { return false }
        position += 1
        return true
    }

    /// Consumes exactly `digits` digits and returns their value.
    mutating func number(digits count: Int) -> Int? {
        guard position + count <= bytes.count else { return nil }
        var value = 0
        for byte in bytes[position..<(position + count)] {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        position += count
        return value
    }

    /// Consumes a run of digits and returns how many there were.
    mutating func digits() -> Int? {
        let start = position
        while position < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position]) {
            position += 1
        }
        return position > start ? position - start : nil
    }
}
