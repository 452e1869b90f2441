import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
import TestSupport

/// `httpBodyStream` bodies across a requeue: replayed byte for byte up to
/// ``URLTaskManager/Options/maximumReplayableBodySize``, sent whole once and then refused with a
/// typed error beyond it, never sent empty.
final class BodyReplayTests: XCTestCase {
    typealias Kit = ReactorTestKit

    /// Refreshes on 401: the first run makes the token valid.
    struct Refresh: URLTaskReactor {
        let token: LockedBox<String>
        var configuration: URLTaskReactorConfiguration { .authentication }
        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { outcome.statusCode == 401 }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws { token.withLock { $0 = "new" } }
    }

    static let size = 2_000_000

    private var server: LoopbackServer!
    private let token = LockedBox("old")

    override func setUp() async throws {
        server = try LoopbackServer()
        server.route("POST", "/upload") { request in
            request.headers["authorization"] == "Bearer new" ? .text("\(request.bodyLength)") : .status(401)
        }
    }

    override func tearDown() async throws {
        server.shutdown()
    }

    private func manager(options: URLTaskManager.Options = .default, reactors: Bool = true) -> URLTaskManager {
        let token = token
        return URLTaskManager(
            interceptors: [HeaderInterceptor(["Authorization": .computed { _ in "Bearer \(token.snapshot)" }])],
            reactors: reactors ? [Refresh(token: token)] : [],
            options: options
        )
    }

    private func upload(_ stream: InputStream) -> URLRequest {
        var request = URLRequest(url: server.url("/upload"))
        request.httpMethod = "POST"
        request.httpBodyStream = stream
        return request
    }

    private static var body: Data { Data(GeneratedBody.bytes(offset: 0, count: size)) }

    func testATwoMegabyteStreamBodySurvivesA401RequeueByteForByte() async throws {
        let manager = manager()
        let result = await Kit.fetch(manager.session, upload(InputStream(data: Self.body)))
        XCTAssertEqual(result.status, 200, result.label)
        XCTAssertEqual(result.text, "\(Self.size)")
        let sent = server.requests(path: "/upload")
        XCTAssertEqual(sent.map(\.headers["authorization"]), ["Bearer old", "Bearer new"])
        let expected = GeneratedBody.sha256(length: Self.size)
        XCTAssertEqual(sent.map(\.bodyLength), [Self.size, Self.size])
        XCTAssertEqual(sent.map(\.bodySHA256), [expected, expected])
    }

    func testAStreamOverTheLimitIsSentWholeOnceThenARequeueFailsTyped() async throws {
        let manager = manager(options: .init(maximumReplayableBodySize: 1 << 20))
        let result = await Kit.fetch(manager.session, upload(InputStream(data: Self.body)))
        guard result.taskError?.code == .bodyNotReplayable else { return XCTFail(result.label) }
        let sent = server.requests(path: "/upload")
        XCTAssertEqual(sent.count, 1, "the resend is refused, not sent empty")
        XCTAssertEqual(sent.first?.bodyLength, Self.size, "the bytes read while probing the limit were sent too")
        XCTAssertEqual(sent.first?.bodySHA256, GeneratedBody.sha256(length: Self.size))
    }

    func testAStreamThatCannotBeReadFailsTypedWithoutBeingSent() async throws {
        #if canImport(FoundationNetworking)
        let stream: InputStream = UnreadableStream()
        #else
        // On Apple platforms URLSession may schedule a body stream on a run loop, which a Swift
        // subclass of InputStream is not made for: the stream of a missing file there.
        let missing = FileManager.default.temporaryDirectory.appendingPathComponent("no-such-body-\(UUID().uuidString)")
        let stream = try XCTUnwrap(InputStream(url: missing))
        #endif
        let manager = manager()
        let result = await Kit.fetch(manager.session, upload(stream))
        guard result.taskError?.code == .bodyNotReplayable else { return XCTFail(result.label) }
        XCTAssertEqual(server.requestCount(path: "/upload"), 0)
    }

    func testAStreamIsBufferedOnlyWhenAReactorMightResendIt() async throws {
        token.withLock { $0 = "new" }
        let small = Data("a small body".utf8)
        let withReactor = manager()
        let withoutReactors = manager(reactors: false)
        let buffered = await Kit.fetch(withReactor.session, upload(InputStream(data: small)))
        let streamed = await Kit.fetch(withoutReactors.session, upload(InputStream(data: small)))
        XCTAssertEqual(buffered.status, 200)
        XCTAssertEqual(streamed.status, 200)
        let sent = server.requests(path: "/upload")
        XCTAssertEqual(sent.map(\.bodyText), ["a small body", "a small body"])
        XCTAssertEqual(sent.map(\.wasChunked), [false, true], "replayable: sent with a length; no reactors: streamed as given")
    }
}

#if canImport(FoundationNetworking)
/// A body stream whose reads fail with `EIO`, as a file that cannot be read does. A Swift
/// subclass rather than `InputStream(url:)` of a missing file: the first failing CoreFoundation
/// stream in a process makes corelibs look for Apple's CFNetwork, which Linux does not have,
/// and print three "CoreFoundation: failed to dynamically link symbol" lines; a subclass fails
/// the same way for the pipeline without that noise in the test log.
private final class UnreadableStream: InputStream {
    private var status = Stream.Status.notOpen
    private var failure: (any Error)?

    init() { super.init(data: Data()) }

    override func open() { status = .open }
    override func close() { status = .closed }
    override var streamStatus: Stream.Status { status }
    override var streamError: (any Error)? { failure }
    override var hasBytesAvailable: Bool { status == .open }

    override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength length: Int) -> Int {
        failure = POSIXError(.EIO)
        status = .error
        return -1
    }
}
#endif
