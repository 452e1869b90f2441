import Foundation
import XCTest

@testable import URLTaskManager

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `Redaction`, the one redaction every surface calls (crossed with the surfaces in
/// `RedactionSurfaceTests`): which names are secret, the option to add your own, and the text
/// shapes it reads (a pure function: no I/O).
final class RedactionTests: XCTestCase {
    func testNamesAreComparedAcrossSnakeCamelAndKebabCaseAndByTheirEnding() {
        let redaction = Redaction.standard
        for name in [
            "access_token", "accessToken", "ACCESS-TOKEN", "refreshToken", "id_token", "token", "api_key", "apiKey", "api-key", "APIKEY",
            "key", "client_secret", "clientSecret", "password", "passwd", "session", "sessionId", "JSESSIONID", "code", "code_verifier",
            "assertion", "auth", "authorization", "signature", "sig", "csrf_token", "X-Amz-Signature", "X-Amz-Security-Token",
            "github_token", "db_password", "user[password]", "access%5Ftoken",
        ] {
            XCTAssertTrue(redaction.isSecret(name: name), name)
        }
        for name in [
            "page", "grant_type", "token_type", "client_id", "username", "code_challenge", "state", "expires_in", "monkey", "scope",
        ] {
            XCTAssertFalse(redaction.isSecret(name: name), name)
        }
        for header in [
            "Authorization", "proxy-authorization", "Cookie", "Set-Cookie", "X-API-Key", "X-Auth-Token", "Api-Key", "X-CSRF-Token",
        ] {
            XCTAssertTrue(redaction.isSecret(headerName: header), header)
        }
        for header in ["Content-Type", "Accept", "X-Request-ID", "Idempotency-Key", "User-Agent", "WWW-Authenticate"] {
            XCTAssertFalse(redaction.isSecret(headerName: header), header)
        }
    }

    /// The documented option: names of your own, in `Redaction` and in `CURLDescription.Options`.
    func testNamesOfYourOwnAreAdded() {
        let redaction = Redaction(addingNames: ["tenant_ref"], addingHeaders: ["X-Tenant"])
        XCTAssertFalse(Redaction.standard.isSecret(name: "tenantRef"))
        XCTAssertTrue(redaction.isSecret(name: "tenantRef"))
        XCTAssertEqual(redaction.headerValue("t-1", name: "x-tenant"), "REDACTED")
        XCTAssertEqual(
            redaction.url(URL(string: "https://api.example.com/a?tenant-ref=t-9&page=2")),
            "https://api.example.com/a?tenant-ref=REDACTED&page=2")
        var request = URLRequest(url: URL(string: "https://api.example.com/a?tenantRef=t-9")!)
        request.httpMethod = "POST"
        request.httpBody = Data(#"{"tenant_ref":"t-8","name":"n"}"#.utf8)
        let command = CURLDescription(request, options: .init(redactingQueryItems: ["tenant_ref"])).command
        XCTAssertEqual(
            command, #"curl -X 'POST' 'https://api.example.com/a?tenantRef=REDACTED' --data-binary '{"tenant_ref":"REDACTED","name":"n"}'"#)
    }

    func testURLs() {
        let redaction = Redaction.standard
        let cases = [
            ("https://api.example.com/a/b?page=2", "https://api.example.com/a/b?page=2"),
            ("https://tok_123@github.example/repo.git", "https://REDACTED@github.example/repo.git"),
            ("https://sk_live_1:@api.stripe.example/v1", "https://REDACTED:REDACTED@api.stripe.example/v1"),
            ("https://u:p@h.example/x#access_token=t", "https://REDACTED:REDACTED@h.example/x"),
            (
                "https://h.example/a;jsessionid=s1/b;v=2;token=s2?sig=s3;page=2",
                "https://h.example/a;jsessionid=REDACTED/b;v=2;token=REDACTED?sig=REDACTED;page=2"
            ),
        ]
        for (given, shown) in cases { XCTAssertEqual(redaction.url(URL(string: given)), shown, given) }
        XCTAssertEqual(
            redaction.location(of: URL(string: "https://u:p@h.example/a;jsessionid=s1;v=2?page=2#f"))?.absoluteString,
            "https://h.example/a;jsessionid=REDACTED;v=2")
    }

    func testTextShapes() {
        let redaction = Redaction.standard
        let cases = [
            // A form, whatever its declared type; empty values stay empty.
            (
                "grant_type=refresh_token&refresh_token=r1&client_id=app&token=",
                "grant_type=refresh_token&refresh_token=REDACTED&client_id=app&token="
            ),
            // JSON: an escaped quote and an escaped backslash inside, a number, nested names, spaces.
            (#"{"access_token":"a\"b\\","n":1}"#, #"{"access_token":"REDACTED","n":1}"#),
            (
                #"{"otp": 123456, "user": {"password" : "p", "name": "kept"}}"#,
                #"{"otp": "REDACTED", "user": {"password" : "REDACTED", "name": "kept"}}"#
            ),
            // A prefix cut inside a value.
            (#"{"refreshToken":"r-cut-sh"#, #"{"refreshToken":"REDACTED"#),
            // An error page: a query and a header line quoted in it.
            (
                "bad request GET /a?api_key=k1&page=2\nAuthorization: Bearer t1\nX-App: kept",
                "bad request GET /a?api_key=REDACTED&page=2\nAuthorization: Bearer REDACTED\nX-App: kept"
            ),
            ("nothing secret: token_type=Bearer, expires_in=3600", "nothing secret: token_type=Bearer, expires_in=3600"),
        ]
        for (given, shown) in cases { XCTAssertEqual(redaction.text(given), shown, given) }
    }
}
