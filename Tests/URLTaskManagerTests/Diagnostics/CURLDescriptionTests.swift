import Foundation
import LoopbackServer
import XCTest

@testable import URLTaskManager
@testable import URLTaskResilience

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `CURLDescription`: the command line, its redaction and its shell quoting (checked by running
/// the command with the system's `curl` against a loopback server), and the command of the
/// request as last sent, in a reactor and in the task's events.
final class CURLDescriptionTests: XCTestCase {
    func testARequestRendersWithItsMethodHeadersAndBodyAndItsSecretsRedacted() throws {
        var request = URLRequest(url: URL(string: "https://user:pa55@api.example.com/items?api_key=k-123&page=2#top")!)
        request.httpMethod = "POST"
        request.setValue("Bearer tok-123", forHTTPHeaderField: "Authorization")
        request.setValue("session=abc", forHTTPHeaderField: "Cookie")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(#"{"name":"it's"}"#.utf8)

        let command = CURLDescription(request, options: .init(redactingQueryItems: ["api_key"])).command

        XCTAssertEqual(
            command,
            #"curl -X 'POST' 'https://REDACTED:REDACTED@api.example.com/items?api_key=REDACTED&page=2' -H 'Authorization: Bearer REDACTED' "#
                + #"-H 'Content-Type: application/json' -H 'Cookie: REDACTED' --data-binary '{"name":"it'\''s"}'"#)
        XCTAssertFalse(command.contains("tok-123") || command.contains("k-123") || command.contains("pa55") || command.contains("abc"))
        XCTAssertFalse(command.contains("user"), "a URL's user may be a token (git hosts, Stripe)")
    }

    func testFormBodiesHaveTheirSecretFieldsRedactedByDefault() {
        var request = URLRequest(url: URL(string: "https://auth.example.com/token")!)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data("grant_type=refresh_token&refresh_token=r-secret&client_id=app".utf8)

        let command = CURLDescription(request).command

        XCTAssertTrue(command.hasSuffix("--data-binary 'grant_type=refresh_token&refresh_token=REDACTED&client_id=app'"), command)
    }

    func testMethodsAndBodiesThatAreNotShown() throws {
        var head = URLRequest(url: URL(string: "http://127.0.0.1/a")!)
        head.httpMethod = "HEAD"
        XCTAssertEqual(CURLDescription(head).command, "curl --head 'http://127.0.0.1/a'")

        var getWithBody = URLRequest(url: URL(string: "http://127.0.0.1/a")!)
        getWithBody.httpBody = Data("q".utf8)
        XCTAssertEqual(CURLDescription(getWithBody).command, "curl -X 'GET' 'http://127.0.0.1/a' --data-binary 'q'")

        var large = URLRequest(url: URL(string: "http://127.0.0.1/a")!)
        large.httpMethod = "PUT"
        large.httpBody = Data(repeating: 0x61, count: 5000)
        XCTAssertEqual(CURLDescription(large).command, "curl -X 'PUT' 'http://127.0.0.1/a' # body not shown: 5000 bytes")

        var binary = large
        binary.httpBody = Data([0x1b, 0x5b, 0x32, 0x4a])  // an escape sequence: clears a terminal
        XCTAssertEqual(CURLDescription(binary).command, "curl -X 'PUT' 'http://127.0.0.1/a' # body not shown: 4 bytes")

        var streamed = large
        streamed.httpBodyStream = InputStream(data: Data("x".utf8))
        XCTAssertEqual(CURLDescription(streamed).command, "curl -X 'PUT' 'http://127.0.0.1/a' # body not shown: a stream")

        let file = URL(fileURLWithPath: "/tmp/upload it's.bin")
        let task = URLTask(request: URLRequest(url: URL(string: "http://127.0.0.1/up")!), body: .file(file))
        XCTAssertEqual(task.curlDescription(), #"curl -X 'GET' 'http://127.0.0.1/up' --data-binary '@/tmp/upload it'\''s.bin'"#)
    }

    /// The quoting is proven by a shell: the command, run by `sh` with the system's `curl`,
    /// sends what the request holds, byte for byte.
    func testTheCommandRunByAShellSendsTheSameRequest() async throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/curl") else { throw XCTSkip("no /usr/bin/curl") }
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(prefix: "/") { _ in .text("ok") }
        let tricky = #"it's $HOME `id` "q" \ $(echo no) ; & | * ~ é"#
        var request = URLRequest(url: server.url("/echo?note=a%20b&x=$y"))
        request.httpMethod = "PATCH"
        request.setValue(tricky, forHTTPHeaderField: "X-Tricky")
        request.setValue("text/plain", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data((tricky + "\nline two").utf8)
        var options = CURLDescription.Options()
        options.redactedHeaders = []

        let command = CURLDescription(request, options: options).command
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command + " --silent --noproxy '*' --output /dev/null"]
        process.environment = ["PATH": "/usr/bin:/bin", "HOME": "/nonexistent"]
        try process.run()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0, command)

        let received = try XCTUnwrap(server.requests(path: "/echo").first)
        XCTAssertEqual(received.method, "PATCH")
        XCTAssertEqual(received.query, "note=a%20b&x=$y")
        XCTAssertEqual(received.headers["x-tricky"], tricky)
        XCTAssertEqual(received.bodyText, tricky + "\nline two")
    }

    /// A reactor sees the request as last sent: the interceptors' headers included, the
    /// token redacted.
    func testAReactorDescribesTheRequestAsLastSentAfterTheInterceptors() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(prefix: "/") { _ in .text("ok") }
        let seen = LockedList<String>()
        let manager = URLTaskManager(
            interceptors: [HeaderInterceptor(["Authorization": "Bearer tok-9", "X-App": "7"])],
            reactors: [DescribingReactor(seen: seen)])
        defer { manager.invalidateAndCancel() }

        _ = try await manager.session.data(from: server.url("/a"))

        let url = server.url("/a").absoluteString
        XCTAssertEqual(seen.all, ["curl '\(url)' -H 'Authorization: Bearer REDACTED' -H 'X-App: 7'"])
    }

    /// `CURLDescriptionInterceptor` puts each send's command in the task's events, after the
    /// interceptors before it, and never the token.
    func testTheInterceptorPutsEachAttemptsCommandInTheEvents() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let calls = LockedList<Int>()
        server.route("POST", "/orders") { _ in
            calls.append(1)
            return calls.all.count == 1 ? .status(503).with { $0.headers["Retry-After"] = "0" } : .text("created")
        }
        var policy = RetryPolicy.default
        policy.retryableMethods.insert("POST")
        let manager = URLTaskManager(
            interceptors: [HeaderInterceptor(["Authorization": "Bearer tok-55"]), CURLDescriptionInterceptor()],
            reactors: [RetryReactor(policy: policy)])
        defer { manager.invalidateAndCancel() }
        let collector = URLTaskEventTests.Collector(manager.events())
        var request = URLRequest(url: server.url("/orders"))
        request.httpMethod = "POST"
        request.httpBody = Data(#"{"n":1}"#.utf8)

        let (data, _) = try await manager.session.data(for: request)
        try await collector.waitForCompletions(1)

        XCTAssertEqual(String(decoding: data, as: UTF8.self), "created")
        let commands = collector.all.compactMap { event -> String? in
            guard case .annotated("curl", let value) = event.kind else { return nil }
            return value
        }
        let expected =
            "curl -X 'POST' '\(server.url("/orders").absoluteString)' -H 'Authorization: Bearer REDACTED' --data-binary '{\"n\":1}'"
        XCTAssertEqual(commands, [expected, expected], "one command per attempt")
        XCTAssertFalse(collector.all.map(\.description).joined().contains("tok-55"))
        // In order: each command right after the send it describes (only a request sent has one).
        let names = collector.all.map { event -> String in
            switch event.kind {
            case .annotated: return "curl"
            case .sent: return "sent"
            default: return ""
            }
        }.filter { !$0.isEmpty }
        XCTAssertEqual(names, ["sent", "curl", "sent", "curl"])
    }

    /// While nobody reads the events, an annotation's value is never computed.
    func testAnAnnotationCostsNothingWhileNobodyListens() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(prefix: "/") { _ in .text("ok") }
        let evaluated = LockedList<Int>()
        let manager = URLTaskManager(interceptors: [AnnotatingInterceptor(evaluated: evaluated)])
        defer { manager.invalidateAndCancel() }

        _ = try await manager.session.data(from: server.url("/quiet"))
        XCTAssertEqual(evaluated.all.count, 0)

        let collector = URLTaskEventTests.Collector(manager.events())
        _ = try await manager.session.data(from: server.url("/heard"))
        try await collector.waitForCompletions(1)
        XCTAssertEqual(evaluated.all.count, 1)
        XCTAssertTrue(collector.all.contains { $0.description.hasSuffix("note: computed") })
    }
}

/// Records `task.curlDescription()` for every outcome, and never reacts.
private struct DescribingReactor: URLTaskReactor {
    let seen: LockedList<String>

    func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
        seen.append(task.curlDescription())
        return false
    }

    func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
}

/// Annotates each task, counting how often the value is computed.
private struct AnnotatingInterceptor: URLTaskInterceptor {
    let evaluated: LockedList<Int>

    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        task.annotate(
            "note",
            {
                evaluated.append(1)
                return "computed"
            }())
        return .execute
    }
}

/// A list several threads append to.
final class LockedList<Element: Sendable>: @unchecked Sendable {  // `items` is guarded by `lock`.
    private let lock = NSLock()
    private var items: [Element] = []

    func append(_ item: Element) { lock.withLock { items.append(item) } }

    var all: [Element] { lock.withLock { items } }
}
