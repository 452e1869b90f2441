import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A `Retry-After` value (RFC 9110 §10.2.3), read one way by every part that obeys it.
///
/// ``RetryReactor`` (through ``RetryPolicy``) and ``RateLimiter`` both read the header with this
/// type, so one answer makes them wait alike: 0.2.0 parsed it twice, and an overflowing integer
/// made the reactor wait its cap while the limiter ignored the header. Use it in a part of your
/// own that honours the header, to wait as they do.
///
/// What it accepts, and how it reads it:
/// - **delay-seconds**, one or more digits: that many seconds. A number beyond 100 years (one
///   too large for any integer type included) reads as 100 years, so each part cuts it to its
///   own cap (``RetryPolicy/maximumRetryAfter``, ``RateLimiter/Policy/maximumPause``) as it
///   would any long wait.
/// - **An HTTP-date** in any of the three forms RFC 9110 §5.6.7 has recipients accept:
///   IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the obsolete RFC 850 form
///   (`Sunday, 06-Nov-94 08:49:37 GMT`; a two-digit year more than 50 years ahead is read as the
///   most recent past year with those digits, as the RFC says) and asctime
///   (`Sun Nov  6 08:49:37 1994`). Names are case-sensitive, as the grammar says; the day must
///   exist in its month, the time of day must be valid (second 60 for a leap second), the
///   weekday must match the date, and the year has four digits. A date in the past means no
///   wait.
/// - **Anything else is refused** (`nil`): a negative or signed number, a fraction, a year such
///   as `-5000`, a 31 February, a date with the wrong weekday, text. A part that finds no valid
///   value behaves as if the header were absent.
///
/// Parsing is pure: no formatter, locale, calendar or clock is consulted besides `now`.
public struct RetryAfter: Sendable, Hashable, CustomStringConvertible {
    /// How long the server asks to wait, counted from the `now` given: zero for a date in the
    /// past, at most 100 years.
    public let delay: Duration
    /// The moment the value named, when it was an HTTP-date; `nil` for delay-seconds.
    public let date: Date?

    /// Reads a header value; `nil` if it is neither delay-seconds nor a valid HTTP-date.
    /// - Parameters:
    ///   - headerValue: The field's value; spaces and tabs around it are ignored.
    ///   - now: The moment a date is measured from (the answer's arrival).
    public init?(headerValue: String, now: Date = Date()) {
        var bytes = Array(headerValue.utf8)[...]
        while let first = bytes.first, first == 0x20 || first == 0x09 { bytes.removeFirst() }
        while let last = bytes.last, last == 0x20 || last == 0x09 { bytes.removeLast() }
        guard !bytes.isEmpty else { return nil }
        if bytes.allSatisfy(Self.isDigit) {
            var seconds: Int64 = 0
            for byte in bytes where seconds <= Self.longestSeconds {
                seconds = seconds * 10 + Int64(byte - 0x30)
            }
            self.delay = seconds > Self.longestSeconds ? .seconds(Self.longestSeconds) : .seconds(seconds)
            self.date = nil
            return
        }
        let now = now.timeIntervalSince1970
        guard let epoch = Self.httpDate(Array(bytes), now: now) else { return nil }
        let wait = Double(epoch) - now
        self.delay = !(wait > 0) ? .zero : wait >= Double(Self.longestSeconds) ? .seconds(Self.longestSeconds) : .seconds(wait)
        self.date = Date(timeIntervalSince1970: TimeInterval(epoch))
    }

    /// Reads `response`'s `Retry-After` header; `nil` if it has none or an invalid one.
    public init?(response: HTTPURLResponse, now: Date = Date()) {
        guard let value = response.value(forHTTPHeaderField: "Retry-After") else { return nil }
        self.init(headerValue: value, now: now)
    }

    /// The wait, and the date it came from if any.
    public var description: String {
        date.map { "\(delay) (until \($0))" } ?? "\(delay)"
    }

    /// 100 years in seconds: the longest wait a value reads as.
    private static let longestSeconds: Int64 = 3_155_760_000

    private static func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }

    private static let shortDays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"].map { Array($0.utf8) }
    private static let longDays = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"].map {
        Array($0.utf8)
    }
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].map {
        Array($0.utf8)
    }

    /// Seconds since 1970 of an HTTP-date in one of its three forms, if valid.
    private static func httpDate(_ text: [UInt8], now: Double) -> Int64? {
        var reader = Reader(bytes: text)
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
        if let weekday = reader.oneOf(shortDays), reader.literal(", "), let day = reader.digits(2), reader.literal(" "),
            let month = reader.oneOf(months), reader.literal(" "), let year = reader.digits(4), reader.literal(" "),
            let time = reader.timeOfDay(), reader.literal(" GMT"), reader.atEnd
        {
            return epoch(year: year, month: month + 1, day: day, time: time, weekday: weekday)
        }
        reader = Reader(bytes: text)
        // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
        if let weekday = reader.oneOf(longDays), reader.literal(", "), let day = reader.digits(2), reader.literal("-"),
            let month = reader.oneOf(months), reader.literal("-"), let shortYear = reader.digits(2), reader.literal(" "),
            let time = reader.timeOfDay(), reader.literal(" GMT"), reader.atEnd
        {
            // RFC 9110 §5.6.7: more than 50 years ahead is the most recent past year with those digits.
            // `now` is the caller's: an absurd one (NaN, 1e300) reads as 1970 rather than trapping.
            let today = (now / 86_400).rounded(.down)
            let thisYear = civil(days: abs(today) < 1e12 ? Int64(today) : 0)
            var year = thisYear - thisYear % 100 + Int64(shortYear)
            if year > thisYear + 50 { year -= 100 }
            return epoch(year: year, month: month + 1, day: day, time: time, weekday: weekday)
        }
        reader = Reader(bytes: text)
        // asctime: Sun Nov  6 08:49:37 1994
        if let weekday = reader.oneOf(shortDays), reader.literal(" "), let month = reader.oneOf(months), reader.literal(" "),
            let day = reader.literal(" ") ? reader.digits(1) : reader.digits(2), reader.literal(" "), let time = reader.timeOfDay(),
            reader.literal(" "), let year = reader.digits(4), reader.atEnd
        {
            return epoch(year: year, month: month + 1, day: day, time: time, weekday: weekday)
        }
        return nil
    }

    /// Seconds since 1970, if the day exists in its month and falls on `weekday` (0 = Sunday).
    private static func epoch(year: Int64, month: Int, day: Int64, time: Int64, weekday: Int) -> Int64? {
        let lengths: [Int64] = [31, isLeap(year) ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard day >= 1, day <= lengths[month - 1] else { return nil }
        let days = daysFromCivil(year: year, month: Int64(month), day: day)
        // 1 January 1970 was a Thursday (4).
        guard ((days % 7) + 11) % 7 == Int64(weekday) else { return nil }
        return days * 86_400 + time
    }

    private static func isLeap(_ year: Int64) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    /// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
    private static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The year of a day counted from 1970-01-01 (H. Hinnant's `civil_from_days`, year only).
    private static func civil(days: Int64) -> Int64 {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    }

    /// Reads an HTTP-date left to right; every method consumes only on success.
    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        var atEnd: Bool { index == bytes.count }

        mutating func literal(_ text: StaticString) -> Bool {
            let expected = UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount)
            guard bytes.count - index >= expected.count, bytes[index..<index + expected.count].elementsEqual(expected) else {
                return false
            }
            index += expected.count
            return true
        }

        /// The index in `names` of the name found here.
        mutating func oneOf(_ names: [[UInt8]]) -> Int? {
            for (position, name) in names.enumerated()
            where bytes.count - index >= name.count && bytes[index..<index + name.count].elementsEqual(name) {
                index += name.count
                return position
            }
            return nil
        }

        mutating func digits(_ count: Int) -> Int64? {
            guard bytes.count - index >= count, bytes[index..<index + count].allSatisfy(RetryAfter.isDigit) else { return nil }
            let value = bytes[index..<index + count].reduce(Int64(0)) { $0 * 10 + Int64($1 - 0x30) }
            index += count
            return value
        }

        /// `HH:MM:SS` as seconds into the day; hour 0-23, minute 0-59, second 0-60.
        mutating func timeOfDay() -> Int64? {
            let start = index
            guard let hour = digits(2), literal(":"), let minute = digits(2), literal(":"), let second = digits(2),
                hour <= 23, minute <= 59, second <= 60
            else {
                index = start
                return nil
            }
            return hour * 3_600 + minute * 60 + second
        }
    }
}
