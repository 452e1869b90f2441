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

    /// Issue 37, finding 5 (a): a name is secret by its last word (`X-Auth-Key`,
    /// `Ocp-Apim-Subscription-Key`, `x-functions-key`, `X-Session`, `X-Upstream-Authorization`),
    /// not by a word it merely contains (`Keep-Alive`, `WWW-Authenticate`, `token_type`,
    /// `key_id`), and a key that is an identifier by its standard (`Idempotency-Key`,
    /// `Sec-WebSocket-Key`, a public key) is not a secret.
    func testNamesAreSecretByTheirLastWord() {
        let redaction = Redaction.standard
        for header in [
            "X-Auth-Key", "Ocp-Apim-Subscription-Key", "x-functions-key", "X-Session", "X-Upstream-Authorization", "X-Client-Credential",
            "X-Hub-Signature", "X-Api-Secret", "X-Refresh-Tokens", "X-Forwarded-Cookie", "X-Basic-Auth", "X-Master-Key",
        ] {
            XCTAssertTrue(redaction.isSecret(headerName: header), header)
        }
        for name in [
            "subscriptionKey", "functions_key", "AuthKey", "stripeSecretKey", "APIKey", "user[auth_key]", "session", "userPassword",
            "subscriptionkey", "functionskey", "authkey",
        ] {
            XCTAssertTrue(redaction.isSecret(name: name), name)
        }
        for header in [
            "Keep-Alive", "WWW-Authenticate", "Authentication-Info", "Idempotency-Key", "Sec-WebSocket-Key", "X-Key-Id", "Content-Type",
        ] {
            XCTAssertFalse(redaction.isSecret(headerName: header), header)
        }
        for name in [
            "token_type", "key_id", "keyId", "signature_method", "session_timeout", "public_key", "publicKey", "monkey", "keyboard",
            "auth_type", "author", "password_policy", "keep_alive",
        ] {
            XCTAssertFalse(redaction.isSecret(name: name), name)
        }
        XCTAssertEqual(redaction.headerValue("S3CR3T", name: "Ocp-Apim-Subscription-Key"), "REDACTED")
    }

    /// Issue 37, finding 5 (b): the shapes a rejected body's prefix showed secrets in: JSON
    /// escaped in a JSON string (twice over too), `[name, value]` arrays, HTML inputs (either
    /// attribute order, quoted or not) and meta tags, XML elements (namespaced, CDATA). The
    /// secret goes; the structure around it stays as it was.
    func testTextShapesOfIssue37() {
        let redaction = Redaction.standard
        let cases = [
            // JSON escaped inside a JSON string, once and twice.
            (
                #"{"payload":"{\"access_token\":\"S3CR3T-1\",\"scope\":\"read\"}"}"#,
                #"{"payload":"{\"access_token\":\"REDACTED\",\"scope\":\"read\"}"}"#
            ),
            (
                #"{"outer":"{\"inner\":\"{\\\"password\\\":\\\"S3CR3T-2\\\",\\\"n\\\":1}\"}"}"#,
                #"{"outer":"{\"inner\":\"{\\\"password\\\":\\\"REDACTED\\\",\\\"n\\\":1}\"}"}"#
            ),
            // A prefix cut inside the escaped value.
            (#"{"payload":"{\"refresh_token\":\"S3CR3T-3-cut"#, #"{"payload":"{\"refresh_token\":\"REDACTED"#),
            // Nothing secret inside: left byte for byte as it was (escapes included).
            (#"{"payload":"{\"a\":\"\u00e9\\\/\"}"}"#, #"{"payload":"{\"a\":\"\u00e9\\\/\"}"}"#),
            // [name, value] arrays.
            (#"[["password","S3CR3T-4"],["user","visible"]]"#, #"[["password","REDACTED"],["user","visible"]]"#),
            (
                #"{"headers":[["Authorization","Bearer S3CR3T-5"],[ "X-Auth-Key" , "S3CR3T-6" ],["Accept","text/html"]]}"#,
                #"{"headers":[["Authorization","Bearer REDACTED"],[ "X-Auth-Key" , "REDACTED" ],["Accept","text/html"]]}"#
            ),
            (#"[["otp",123456],["page",2]]"#, #"[["otp","REDACTED"],["page",2]]"#),
            // HTML inputs, either attribute order, quoted or not; a meta tag; a password input.
            (
                #"<form><input type="hidden" name="csrf_token" value="S3CR3T-7"><input type="hidden" name="page" value="2"></form>"#,
                #"<form><input type="hidden" name="csrf_token" value="REDACTED"><input type="hidden" name="page" value="2"></form>"#
            ),
            (
                #"<input value='S3CR3T-8' type=hidden name=authenticity_token/>"#,
                #"<input value='REDACTED' type=hidden name=authenticity_token/>"#
            ),
            (#"<INPUT VALUE=S3CR3T-9 NAME="_csrf">"#, #"<INPUT VALUE=REDACTED NAME="_csrf">"#),
            (#"<meta name="csrf-token" content="S3CR3T-10">"#, #"<meta name="csrf-token" content="REDACTED">"#),
            (#"<input type="password" name="pw" value="S3CR3T-11">"#, #"<input type="password" name="pw" value="REDACTED">"#),
            (#"<div data-token="S3CR3T-12" title="visible">"#, #"<div data-token="REDACTED" title="visible">"#),
            // XML elements, a namespace, CDATA, nesting; a prefix cut inside.
            (
                "<user><name>visible</name><password>S3CR3T-13</password></user>",
                "<user><name>visible</name><password>REDACTED</password></user>"
            ),
            ("<AccessToken>S3CR3T-14</AccessToken>", "<AccessToken>REDACTED</AccessToken>"),
            (
                #"<wsse:Password Type="PasswordText">S3CR3T-15</wsse:Password>"#,
                #"<wsse:Password Type="PasswordText">REDACTED</wsse:Password>"#
            ),
            ("<client_secret><![CDATA[S3CR3T-16]]></client_secret>", "<client_secret>REDACTED</client_secret>"),
            ("<pwd>\n  <![CDATA[S3CR3T-19]]>\n</pwd>", "<pwd>\n  REDACTED\n</pwd>"),
            (#"<textarea name="private_key">S3CR3T-20</textarea>"#, #"<textarea name="private_key">REDACTED</textarea>"#),
            ("<credentials>\n  <token>S3CR3T-17</token>\n</credentials>", "<credentials>\n  <token>REDACTED</token>\n</credentials>"),
            ("<refreshToken>S3CR3T-18-cut", "<refreshToken>REDACTED"),
            // Not markup: a comparison, a closing tag, a comment.
            ("a < b and c<d; </token> <!-- token -->", "a < b and c<d; </token> <!-- token -->"),
        ]
        for (given, shown) in cases {
            let redacted = redaction.text(given)
            XCTAssertEqual(redacted, shown, given)
            XCTAssertFalse(redacted.contains("S3CR3T"), given)
        }
    }

    /// Adversarial input stays linear: deep escapes, unclosed tags and quotes, many arrays (each
    /// shape is 40 KB or more: a pass that rescanned it from each tag or quote would take
    /// billions of steps; a linear one takes well under a second even in a debug build).
    func testAdversarialTextIsRedactedInLinearTime() {
        let shapes = [
            String(repeating: "<a b=\"", count: 20_000), String(repeating: "[\"", count: 20_000),
            String(repeating: "\\\"", count: 20_000), String(repeating: "<password>", count: 20_000),
            "{\"p\":\"" + String(repeating: "\\\\\\\"", count: 10_000) + "\"}",
            String(repeating: "<input name=\"password\" value=\"x\">", count: 10_000),
            String(repeating: "[\"password\",", count: 20_000), String(repeating: "<![CDATA[", count: 20_000),
            "<password>" + String(repeating: "<![CDATA[", count: 20_000), String(repeating: " ", count: 100_000) + "\"",
        ]
        let clock = ContinuousClock()
        for shape in shapes {
            let elapsed = clock.measure { _ = Redaction.standard.text(shape) }
            XCTAssertLessThan(elapsed, .seconds(10), String(shape.prefix(20)))
        }
    }
}
