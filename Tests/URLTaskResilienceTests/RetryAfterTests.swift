import Foundation
import URLTaskResilience
import XCTest

/// The one `Retry-After` parser (pure: the tests pass `now`, no I/O).
final class RetryAfterTests: XCTestCase {
    /// Sun, 06 Nov 1994 08:49:37 GMT.
    private let now = Date(timeIntervalSince1970: 784_111_777)

    private func delay(_ value: String) -> Duration? { RetryAfter(headerValue: value, now: now)?.delay }

    func testDelaySecondsAndEveryHTTPDateForm() {
        XCTAssertEqual(delay("120"), .seconds(120))
        XCTAssertEqual(delay(" \t0 "), .zero, "optional whitespace around the value")
        XCTAssertEqual(delay("007"), .seconds(7))
        XCTAssertEqual(delay("Sun, 06 Nov 1994 08:49:47 GMT"), .seconds(10), "IMF-fixdate")
        XCTAssertEqual(delay("Sunday, 06-Nov-94 08:49:47 GMT"), .seconds(10), "RFC 850")
        XCTAssertEqual(delay("Sun Nov  6 08:49:47 1994"), .seconds(10), "asctime, one-digit day")
        XCTAssertEqual(delay("Sat Nov 26 08:49:37 1994"), .seconds(20 * 86_400), "asctime, two-digit day")
        XCTAssertEqual(delay("Sun, 06 Nov 1994 08:00:00 GMT"), .zero, "a past date: no wait")
        XCTAssertEqual(delay("Thu, 01 Jan 1970 00:00:00 GMT"), .zero)
        XCTAssertEqual(delay("Sat, 31 Dec 1994 23:59:60 GMT"), .seconds(4_806_623), "a leap second")
        XCTAssertEqual(delay("Thu, 29 Feb 1996 00:00:00 GMT"), .seconds(41_440_223), "a leap day")
        XCTAssertEqual(
            RetryAfter(headerValue: "Sun, 06 Nov 1994 08:49:47 GMT", now: now)?.date, Date(timeIntervalSince1970: 784_111_787))
        XCTAssertNil(RetryAfter(headerValue: "10", now: now)?.date)
    }

    /// RFC 9110 §5.6.7: a two-digit year more than 50 years ahead is the most recent past year
    /// with those digits.
    func testATwoDigitYearIsReadAgainstNow() {
        let in2026 = Date(timeIntervalSince1970: 1_780_000_000)  // May 2026
        XCTAssertEqual(RetryAfter(headerValue: "Friday, 01-Jan-27 00:00:00 GMT", now: in2026)?.date?.timeIntervalSince1970, 1_798_761_600)
        XCTAssertEqual(RetryAfter(headerValue: "Saturday, 01-Jan-94 00:00:00 GMT", now: in2026)?.delay, .zero, "1994, not 2094")
        XCTAssertEqual(
            RetryAfter(headerValue: "Wednesday, 01-Jan-76 00:00:00 GMT", now: in2026)?.date?.timeIntervalSince1970, 3_345_062_400,
            "2076: 50 years ahead")
        XCTAssertEqual(RetryAfter(headerValue: "Saturday, 01-Jan-77 00:00:00 GMT", now: in2026)?.delay, .zero, "1977: 51 years ahead")
    }

    /// An integer too large for any type is a huge wait, 100 years, which every part cuts to
    /// its cap; 0.2.0's reactor waited its cap and its limiter ignored the header.
    func testHugeIntegersAreTheLongestWait() {
        let longest = Duration.seconds(3_155_760_000)
        XCTAssertEqual(delay("3155760000"), longest)
        XCTAssertEqual(delay("3155760001"), longest)
        XCTAssertEqual(delay("9223372036854775807"), longest, "Int64.max")
        XCTAssertEqual(delay("9223372036854775808"), longest, "Int64.max + 1")
        XCTAssertEqual(delay(String(repeating: "9", count: 400)), longest, "1e400")
        XCTAssertEqual(delay("Fri, 31 Dec 9999 23:59:59 GMT"), longest, "the last date there is")
    }

    func testInvalidValuesAreRefused() {
        for value in [
            "", " ", "-5", "+5", "-0", "1.5", "1e3", "soon", "5 s", "0x10", "١٢",  // numbers that are not delay-seconds
            "Sun, 06 Nov -5000 08:49:47 GMT", "Sun, 06 Nov 10000 08:49:47 GMT", "Sun, 06 Nov 94 08:49:47 GMT",  // years
            "Tue, 31 Feb 1995 00:00:00 GMT", "Thu, 29 Feb 1900 00:00:00 GMT", "Mon, 00 Nov 1994 08:49:47 GMT",  // days
            "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT", "Sun, 06 Nov 1994 08:49:61 GMT",  // times
            "Mon, 06 Nov 1994 08:49:47 GMT", "Sun Nov  7 08:49:47 1994",  // a weekday that does not match the date
            "sun, 06 nov 1994 08:49:47 gmt", "Sun, 06 Nov 1994 08:49:47 UTC", "Sun, 06 Nov 1994 08:49:47 +0000",  // names
            "Sun, 6 Nov 1994 08:49:47 GMT", "Sun, 06 Nov 1994 8:49:47 GMT", "Sun, 06 Nov 1994 08:49:47 GMT junk",  // widths
            "Sunday, 06-Nov-1994 08:49:47 GMT", "Sun, 06-Nov-94 08:49:47 GMT", "Sun Nov 6 08:49:47 1994",
        ] {
            XCTAssertNil(RetryAfter(headerValue: value, now: now), value)
        }
    }

    /// An absurd `now` (the caller's) is no trap either.
    func testAnAbsurdNowIsNoTrap() {
        for now in [
            Date(timeIntervalSince1970: .nan), Date(timeIntervalSince1970: 1e300), Date(timeIntervalSince1970: -1e300), .distantFuture,
        ] {
            _ = RetryAfter(headerValue: "Sunday, 06-Nov-94 08:49:47 GMT", now: now)
            _ = RetryAfter(headerValue: "Sun, 06 Nov 1994 08:49:47 GMT", now: now)
        }
    }

    /// ``RetryPolicy/retryAfter(_:now:)`` is the same parser.
    func testRetryPolicyReadsTheSame() {
        for value in ["120", "99999999999999999999", "Sun, 06 Nov -5000 08:49:47 GMT", "Sun, 06 Nov 1994 08:49:47 GMT", "x"] {
            XCTAssertEqual(RetryPolicy.retryAfter(value, now: now), delay(value), value)
        }
    }
}
