import Foundation
import XCTest
@testable import URLTaskManager

/// `URLTaskEvent.redacted(_:)`, the one place events show a URL.
final class URLTaskEventRedactionTests: XCTestCase {
    /// What an event shows of a URL: no query, fragment or user info, and a URL without any of
    /// them as it was.
    func testRedactedURLsKeepNothingATokenCouldHideIn() {
        let cases = [
            ("http://127.0.0.1:8080/a/b", "http://127.0.0.1:8080/a/b"),
            ("https://api.example.com/p?access_token=s3cret", "https://api.example.com/p"),
            ("https://api.example.com/p#token=s3cret", "https://api.example.com/p"),
            ("https://user:s3cret@api.example.com/p", "https://api.example.com/p"),
            ("https://s3cret@api.example.com/p?q=1#f", "https://api.example.com/p"),
        ]
        for (given, shown) in cases {
            XCTAssertEqual(URLTaskEvent.redacted(URL(string: given))?.absoluteString, shown, given)
        }
        let relative = URL(string: "p?token=s3cret", relativeTo: URL(string: "https://api.example.com/base/"))
        XCTAssertFalse(URLTaskEvent.redacted(relative)?.absoluteString.contains("s3cret") ?? false)
    }
}
