import Foundation
import URLTaskOAuth2
import XCTest

@testable import URLTaskRedis

/// Every surface a value shows itself on (`"\(value)"`, `String(describing:)`,
/// `String(reflecting:)`, `dump(_:)`, `Mirror` children all the way down) for every type that
/// holds a Redis password: the password never shows (plain or percent-encoded, set directly or
/// read from a `redis://` URL), and what is not a secret still does (a redaction that blanked
/// everything would pass a one-sided test).
final class RedisRedactionTests: XCTestCase {
    static let password = "Hunter2-REDIS-PW-7f3a"
    /// A password that a URL carries percent-encoded.
    static let awkwardPassword = "p@ss:w/rd%Hunter3"

    /// Every text `value` shows on any surface, with the surface's name.
    static func surfaces(of value: Any) -> [(surface: String, text: String)] {
        var texts: [(String, String)] = [
            ("interpolation", "\(value)"), ("String(describing:)", String(describing: value)),
            ("String(reflecting:)", String(reflecting: value)),
        ]
        var dumped = ""
        dump(value, to: &dumped)
        texts.append(("dump", dumped))
        var mirrored: [String] = []
        walk(Mirror(reflecting: value), path: "", depth: 0, into: &mirrored)
        texts.append(("Mirror", mirrored.joined(separator: "\n")))
        return texts
    }

    /// The labels and values of `mirror`'s children, recursively (12 levels at most).
    private static func walk(_ mirror: Mirror, path: String, depth: Int, into texts: inout [String]) {
        guard depth < 12 else { return }
        var current: Mirror? = mirror
        while let level = current {
            for child in level.children {
                let name = "\(path).\(child.label ?? "_")"
                texts.append("\(name) = \(String(describing: child.value)) | \(String(reflecting: child.value))")
                walk(Mirror(reflecting: child.value), path: name, depth: depth + 1, into: &texts)
            }
            current = level.superclassMirror
        }
    }

    /// Asserts that no surface of `value` shows a secret, and that each of `visible` shows
    /// on `String(describing:)`.
    private func assertRedacted(
        _ value: Any, _ name: String, secrets: [String], visible: [String], file: StaticString = #filePath, line: UInt = #line
    ) {
        for (surface, text) in Self.surfaces(of: value) {
            for secret in secrets {
                XCTAssertFalse(text.contains(secret), "\(name), \(surface) shows the password:\n\(text)", file: file, line: line)
            }
        }
        let described = String(describing: value)
        for text in visible {
            XCTAssertTrue(described.contains(text), "\(name): \(text) is not shown in \(described)", file: file, line: line)
        }
    }

    private static func encoded(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
    }

    func testAConfigurationShowsNoPassword() throws {
        let secrets = [Self.password, Self.awkwardPassword, Self.encoded(Self.awkwardPassword)]
        let direct = RedisClient.Configuration(
            endpoint: .tcp(host: "redis.internal", port: 6390), username: "fleet-user", password: Self.password, database: 2)
        assertRedacted(direct, "a configuration", secrets: secrets, visible: ["redis.internal", "6390", "fleet-user"])
        let url = try XCTUnwrap(URL(string: "redis://fleet-user:\(Self.encoded(Self.awkwardPassword))@redis.internal:6390/2"))
        let fromURL = try XCTUnwrap(RedisClient.Configuration(url: url))
        XCTAssertEqual(fromURL.password, Self.awkwardPassword)
        assertRedacted(fromURL, "a configuration from a redis:// URL", secrets: secrets, visible: ["redis.internal", "fleet-user"])
        let passwordOnly = try XCTUnwrap(RedisClient.Configuration(url: URL(string: "redis://:\(Self.password)@redis.internal")!))
        assertRedacted(
            passwordOnly, "a configuration from a redis:// URL with a password alone", secrets: secrets, visible: ["redis.internal"])
        let unix = RedisClient.Configuration(endpoint: .unixSocket(path: "/run/redis/redis.sock"), password: Self.password)
        assertRedacted(unix, "a Unix socket's configuration", secrets: secrets, visible: ["/run/redis/redis.sock"])
    }

    func testAClientShowsNoPassword() {
        let client = RedisClient(
            configuration: .init(endpoint: .tcp(host: "redis.internal", port: 6390), username: "fleet-user", password: Self.password))
        defer { client.close() }
        assertRedacted(client, "a client", secrets: [Self.password], visible: ["redis.internal", "fleet-user"])
    }

    func testAFleetCredentialAndAFleetRateLimiterShowNoPassword() {
        let client = RedisClient(
            configuration: .init(endpoint: .tcp(host: "redis.internal", port: 6390), username: "fleet-user", password: Self.password))
        defer { client.close() }
        let fleet = FleetCredential(client: client, configuration: .init(keyPrefix: "urltask:cred:{api}"), refresh: { $0 })
        assertRedacted(fleet, "a fleet credential", secrets: [Self.password], visible: ["urltask:cred:{api}", "redis.internal"])
        let limiter = FleetRateLimiter(redis: client, policy: .init(rate: 50, burst: 10, processCount: 8))
        assertRedacted(limiter, "a fleet rate limiter", secrets: [Self.password], visible: ["urltask:ratelimit", "50"])
    }
}
