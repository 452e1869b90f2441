import Foundation
import XCTest
@testable import URLTaskManager
@testable import URLTaskOAuth2

/// ``URLOrigin/plainDescription(of:)`` reads a request's origin straight from its URL's string
/// (the bearer's origin check, the refresh reactor's exemption and the per-host slots ask it on
/// every request). A pure function: it must agree with `URLOrigin` on every URL it answers for,
/// and leave every other spelling to it.
final class URLOriginPlainSpellingTests: XCTestCase {
    func testPlainSpellingsAgreeWithURLOrigin() throws {
        let plain = [
            "http://127.0.0.1:43847/", "http://127.0.0.1:43847", "https://api.example.com/v1/me?x=1#f",
            "https://api.example.com", "http://h/a@b", "http://a-b.c.d:8080?q", "https://x.y:443/", "http://h#frag",
            "http://h:1/", "https://api.example.com.evil.com/",
        ]
        for string in plain {
            let url = try XCTUnwrap(URL(string: string))
            XCTAssertEqual(URLOrigin.plainDescription(of: url), URLOrigin(url)?.description, string)
            XCTAssertNotNil(URLOrigin.plainDescription(of: url), "\(string) is spelled plainly")
        }
    }

    func testOtherSpellingsAreLeftToURLOrigin() throws {
        let other = [
            "https://API.Example.com/", "http://user:pw@h.com:81/", "http://[::1]:8080/", "http://a%2Eb.com/", "ftp://h/",
            "http://h:080/", "http://h:0/", "HTTP://h/", "http://h_x/", "httpx://h/", "mailto:a@b.c", "http:/h", "file:///tmp/x",
        ]
        for string in other {
            let url = try XCTUnwrap(URL(string: string), string)
            XCTAssertNil(URLOrigin.plainDescription(of: url), string)
        }
        // And the callers' answers for them are URLOrigin's.
        XCTAssertEqual(URLOrigin.description(of: URL(string: "https://API.Example.com/")), "https://api.example.com:443")
        XCTAssertEqual(URLOrigin.description(of: URL(string: "http://h:080/")), "http://h:80")
        XCTAssertEqual(
            URLOrigin.description(of: URL(string: "http://[::1]:8080/")), URLOrigin(URL(string: "http://[::1]:8080/"))?.description)
        XCTAssertNil(URLOrigin.description(of: URL(string: "/relative")))
    }

    /// The token goes to the same URLs whichever way their origin was read.
    func testAuthorizationAgreesOnBothPaths() throws {
        let auth = OAuth2Authenticator(origins: [URL(string: "https://api.example.com")!, URL(string: "http://127.0.0.1:8080")!]) { $0 }
        let cases: [(String, Bool)] = [
            ("https://api.example.com/v1", true), ("https://api.example.com:443/v1", true), ("https://API.example.com/v1", true),
            ("http://api.example.com/v1", false), ("https://api.example.com:8443/", false), ("https://api.example.com.evil.com/", false),
            ("https://api.example.com@evil.com/", false), ("http://127.0.0.1:8080/x", true), ("http://127.0.0.1:08080/x", true),
            ("http://127.0.0.1/x", false),
        ]
        for (string, expected) in cases {
            let url = try XCTUnwrap(URL(string: string), string)
            XCTAssertEqual(auth.authorizes(url), expected, string)
            XCTAssertEqual(
                auth.authorizes(url),
                URLOrigin(url).map {
                    [URLOrigin(URL(string: "https://api.example.com")!), URLOrigin(URL(string: "http://127.0.0.1:8080")!)].contains($0)
                } ?? false, string)
        }
    }
}
