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

    /// Secrets are shown only when asked for by name: emptying the options' sets still hides
    /// every secret-like name, while `.revealingSecrets` shows every value, a URL's user and
    /// password and a password input included, and still hides a name put back into its sets.
    func testOnlyRevealingSecretsShowsThemAndItStillHidesANameYouList() {
        var request = URLRequest(url: URL(string: "https://user:pa55@api.example.com/items?api_key=k-123&tenant=t-9&page=2")!)
        request.httpMethod = "POST"
        request.setValue("Bearer tok-123", forHTTPHeaderField: "Authorization")
        request.setValue("tk-7", forHTTPHeaderField: "X-Tenant-Key")
        request.httpBody = Data(#"<input type="password" name="p" value="pw-1">"#.utf8)

        var emptied = CURLDescription.Options()
        emptied.redactedHeaders = []
        emptied.redactedQueryItems = []
        XCTAssertFalse(emptied.revealsSecrets)
        let redacted = CURLDescription(request, options: emptied).command
        for secret in ["tok-123", "k-123", "tk-7", "pa55", "pw-1"] {
            XCTAssertFalse(redacted.contains(secret), "emptied sets showed \(secret): \(redacted)")
        }

        XCTAssertTrue(CURLDescription.Options.revealingSecrets.revealsSecrets)
        XCTAssertEqual(
            CURLDescription(request, options: .revealingSecrets).command,
            #"curl -X 'POST' 'https://user:pa55@api.example.com/items?api_key=k-123&tenant=t-9&page=2' "#
                + #"-H 'Authorization: Bearer tok-123' -H 'X-Tenant-Key: tk-7' --data-binary '<input type="password" name="p" value="pw-1">'"#
        )

        var hidingTwo = CURLDescription.Options.revealingSecrets
        hidingTwo.redactedHeaders.insert("x-tenant-key")
        hidingTwo.redactedQueryItems.insert("tenant")
        XCTAssertTrue(hidingTwo.revealsSecrets)
        XCTAssertEqual(
            CURLDescription(request, options: hidingTwo).command,
            #"curl -X 'POST' 'https://user:pa55@api.example.com/items?api_key=k-123&tenant=REDACTED&page=2' "#
                + #"-H 'Authorization: Bearer tok-123' -H 'X-Tenant-Key: REDACTED' --data-binary '<input type="password" name="p" value="pw-1">'"#
        )
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
        XCTAssertEqual(try runInShell(command + " --silent --noproxy '*' --output /dev/null"), 0, command)

        let received = try XCTUnwrap(server.requests(path: "/echo").first)
        XCTAssertEqual(received.method, "PATCH")
        XCTAssertEqual(received.query, "note=a%20b&x=$y")
        XCTAssertEqual(received.headers["x-tricky"], tricky)
        XCTAssertEqual(received.bodyText, tricky + "\nline two")
    }

    /// The system's `curl`, or a skip that says how to install it.
    private static func curlOrSkip() throws -> String {
        let which = Process()
        which.executableURL = URL(fileURLWithPath: "/bin/sh")
        which.arguments = ["-c", "command -v curl"]
        let output = Pipe()
        which.standardOutput = output
        try which.run()
        let path = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        which.waitUntilExit()
        guard which.terminationStatus == 0, !path.isEmpty else {
            throw XCTSkip("no curl on this machine to replay the command: apt-get install curl")
        }
        return path
    }

    /// The command of `.revealingSecrets` replays an authenticated request: the request as the
    /// manager sent it (an interceptor's `Authorization` and API key, a secret query item, a
    /// cookie, a JSON body with a password), logged by ``CURLDescriptionInterceptor`` and run by
    /// `sh` with the real `curl`, reaches the server with the same method, target, headers and
    /// body as the manager's own request.
    func testARevealingCommandRunByCurlSendsWhatTheManagerSent() async throws {
        _ = try Self.curlOrSkip()
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("POST", "/orders") { _ in .text("created") }
        // Ephemeral: with the default configuration a cookie another test's server stored for
        // 127.0.0.1 in the shared cookie storage replaces the request's own (corelibs does so for
        // a plain session too), and the replay, which has no storage, would differ.
        let manager = URLTaskManager(
            interceptors: [
                HeaderInterceptor(["Authorization": "Bearer s3cr3t-token", "X-API-Key": "k3y-42"]),
                CURLDescriptionInterceptor(options: .revealingSecrets),
            ], configuration: .ephemeral)
        defer { manager.invalidateAndCancel() }
        let collector = URLTaskEventTests.Collector(manager.events())
        var request = URLRequest(url: server.url("/orders?api_key=s3cr3t-key&page=2"))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue("session=s3cr3t-cookie", forHTTPHeaderField: "Cookie")
        request.httpBody = Data(#"{"item":"tea","password":"hunter2","note":"it's $HOME"}"#.utf8)

        let (data, _) = try await manager.session.data(for: request)
        try await collector.waitForCompletions(1)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "created")
        let commands = curlAnnotations(collector.all)
        let command = try XCTUnwrap(commands.first, "no curl annotation")
        XCTAssertEqual(commands.count, 1)
        XCTAssertFalse(command.contains(Redaction.replacement), command)

        XCTAssertEqual(try runInShell(command + " --silent --show-error --noproxy '*' --max-time 20 --output /dev/null"), 0, command)

        let received = server.requests(path: "/orders")
        XCTAssertEqual(received.count, 2, "the manager's request, then curl's")
        guard received.count == 2 else { return }
        let (sent, replayed) = (received[0], received[1])
        XCTAssertEqual(sent.headers["Authorization"], "Bearer s3cr3t-token", "the manager sent the interceptor's token")
        XCTAssertEqual(replayed.method, sent.method)
        XCTAssertEqual(replayed.target, sent.target)
        XCTAssertEqual(replayed.body, sent.body)
        XCTAssertEqual(replayed.bodyText, #"{"item":"tea","password":"hunter2","note":"it's $HOME"}"#)
        for name in ["Authorization", "X-API-Key", "Cookie", "Content-Type"] {
            XCTAssertNotNil(sent.headers[name], "the manager sent \(name)")
            XCTAssertEqual(replayed.headers[name], sent.headers[name], name)
        }
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
        let commands = curlAnnotations(collector.all)
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

/// Runs `command` with `/bin/sh` (no proxy settings, no home directory) and returns its exit
/// status: a rendered command must work as a user would paste it.
private func runInShell(_ command: String) throws -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = ["-c", command]
    process.environment = ["PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent"]
    try process.run()
    process.waitUntilExit()
    return process.terminationStatus
}

/// The `curl` commands a ``CURLDescriptionInterceptor`` annotated `events` with, in order.
private func curlAnnotations(_ events: [URLTaskEvent]) -> [String] {
    events.compactMap { event in
        guard case .annotated("curl", let value) = event.kind else { return nil }
        return value
    }
}
