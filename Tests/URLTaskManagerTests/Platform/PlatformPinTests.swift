import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
@testable import URLTaskManager
import XCTest
import TestSupport

#if canImport(FoundationNetworking)
/// Pins the swift-corelibs-foundation facts the bridge works around (see
/// `Platform/` and the team's linux-foundation notes), using `PinProtocol`, a
/// deliberately naive protocol of the tests' own. If a toolchain changes one of these, the
/// matching test fails and says which workaround to revisit.
final class PlatformPinTests: XCTestCase {
    private var sessions: [URLSession] = []

    override func tearDown() {
        for session in sessions { session.invalidateAndCancel() }
        sessions = []
    }

    private func pinSession(
        delegate: (any URLSessionDelegate)? = nil, configure: (URLSessionConfiguration) -> Void = { _ in }
    ) -> URLSession {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.protocolClasses = [PinProtocol.self]
        configure(configuration)
        let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        sessions.append(session)
        return session
    }

    private func runCompletionTask(
        _ make: (@escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> URLSessionTask
    ) async throws -> Data? {
        let done = Latch<Data?>("pin task completion")
        make { data, _, error in
            XCTAssertNil(error)
            done.fulfill(data)
        }.resume()
        return try await done.wait(timeout: .seconds(10))
    }

    private func post(_ id: String) -> URLRequest {
        var request = URLRequest(url: PinProtocol.url(id))
        request.httpMethod = "POST"
        return request
    }

    /// (1) Upload tasks: the protocol sees neither `httpBody` nor `httpBodyStream`; forwarded
    /// naively, the server would receive an empty POST. Data tasks do expose `httpBody`.
    func testUploadTaskBodyIsInvisibleToAProtocol() async throws {
        let session = pinSession()
        let payload = Data("upload payload".utf8)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("pin-\(UUID().uuidString)")
        try payload.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }

        let fromData = UUID().uuidString
        _ = try await runCompletionTask { session.uploadTask(with: post(fromData), from: payload, completionHandler: $0) }
        let fromFile = UUID().uuidString
        _ = try await runCompletionTask { session.uploadTask(with: post(fromFile), fromFile: file, completionHandler: $0) }
        let asyncUpload = UUID().uuidString
        _ = try await session.upload(for: post(asyncUpload), from: payload)
        for id in [fromData, fromFile, asyncUpload] {
            let seen = try XCTUnwrap(PinProtocol.observation(id))
            XCTAssertEqual(
                seen.startSawHTTPBody, false,
                "an upload task's body became visible as httpBody: Platform's knownBody reflection may be unnecessary")
            XCTAssertEqual(seen.startSawBodyStream, false, "an upload task's body became visible as httpBodyStream")
        }

        let dataTask = UUID().uuidString
        var request = post(dataTask)
        request.httpBody = payload
        _ = try await runCompletionTask { session.dataTask(with: request, completionHandler: $0) }
        XCTAssertEqual(PinProtocol.observation(dataTask)?.startSawHTTPBody, true, "a data task's httpBody is visible")
    }

    /// (2) A task with a completion handler (or async `data(for:)`) keeps only the LAST
    /// `didLoad` chunk; a delegate gets every chunk.
    func testCompletionHandlerKeepsOnlyTheLastChunk() async throws {
        let session = pinSession()
        let url = PinProtocol.url(UUID().uuidString, chunks: ["first-half|", "second-half"])
        let data = try await runCompletionTask { session.dataTask(with: url, completionHandler: $0) }
        XCTAssertEqual(
            data.map { String(decoding: $0, as: UTF8.self) }, "second-half",
            "completion handlers now get every chunk: the bridge could stream to them instead of buffering")

        let (asyncData, _) = try await session.data(from: PinProtocol.url(UUID().uuidString, chunks: ["first-half|", "second-half"]))
        XCTAssertEqual(String(decoding: asyncData, as: UTF8.self), "second-half")

        let delegate = RecordingDelegate()
        let delegateSession = pinSession(delegate: delegate)
        let task = delegateSession.dataTask(with: PinProtocol.url(UUID().uuidString, chunks: ["first-half|", "second-half"]))
        task.resume()
        try await delegate.completion(of: task)
        XCTAssertEqual(String(decoding: delegate.record(for: task).body, as: UTF8.self), "first-half|second-half")
        XCTAssertEqual(delegate.record(for: task).chunkCount, 2)
    }

    /// (3) `URLProtocol.setProperty` values do not reach the protocol: they are already lost
    /// when the `NSMutableURLRequest` is bridged to `URLRequest`.
    func testSetPropertyValuesAreLost() async throws {
        let session = pinSession()
        let id = UUID().uuidString
        let mutable = NSMutableURLRequest(url: PinProtocol.url(id))
        URLProtocol.setProperty("marked", forKey: PinProtocol.propertyKey, in: mutable)
        XCTAssertEqual(
            URLProtocol.property(forKey: PinProtocol.propertyKey, in: mutable as URLRequest) as? String, nil,
            "properties now survive bridging to URLRequest")
        let request = mutable as URLRequest
        _ = try await runCompletionTask { session.dataTask(with: request, completionHandler: $0) }
        let seen = try XCTUnwrap(PinProtocol.observation(id))
        XCTAssertEqual(seen.canInitSawProperty, false, "setProperty now reaches canInit: it could mark requests")
        XCTAssertEqual(seen.startSawProperty, false, "setProperty now reaches startLoading")
    }

    /// (4) The configuration's `httpAdditionalHeaders` are not visible to `canInit` or
    /// `startLoading` (they are merged later, by the native protocol); request headers are.
    func testAdditionalHeadersAreInvisibleToAProtocol() async throws {
        let session = pinSession { $0.httpAdditionalHeaders = [PinProtocol.markerHeader: "1"] }
        let id = UUID().uuidString
        var request = URLRequest(url: PinProtocol.url(id))
        request.setValue("1", forHTTPHeaderField: PinProtocol.requestHeader)
        _ = try await runCompletionTask { session.dataTask(with: request, completionHandler: $0) }
        let seen = try XCTUnwrap(PinProtocol.observation(id))
        XCTAssertEqual(seen.canInitSawMarkerHeader, false, "additional headers now reach canInit")
        XCTAssertEqual(seen.startSawMarkerHeader, false, "additional headers now reach startLoading")
        XCTAssertEqual(seen.startSawRequestHeader, true)
    }

    /// corelibs puts the stored cookies for a URL on a request as it makes the task, replacing
    /// the request's own `Cookie` (whatever `httpShouldHandleCookies` says), and the task's
    /// `originalRequest` shows them: what ``CorelibsPlatform/cookieHeaderOnTheWire(own:stored:request:)``
    /// and ``CorelibsPlatform/cookieHeaderSent(by:)`` answer for sharing (plain session, real HTTP).
    func testStoredCookiesReplaceARequestsOwnCookie() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("/c") { .text($0.headers["cookie"] ?? "-") }
        let configuration = URLSessionConfiguration.ephemeral
        let storage = try XCTUnwrap(configuration.httpCookieStorage)
        let session = URLSession(configuration: configuration)
        sessions.append(session)
        let url = server.url("/c")
        var request = URLRequest(url: url)
        request.setValue("own=1", forHTTPHeaderField: "Cookie")
        let (alone, _) = try await session.data(for: request)
        XCTAssertEqual(String(decoding: alone, as: UTF8.self), "own=1", "no stored cookie: the request's own goes out")

        storage.setCookie(HTTPCookie(properties: [.name: "stored", .value: "2", .domain: url.host!, .path: "/"])!)
        request.httpShouldHandleCookies = false
        let task = session.dataTask(with: request)
        XCTAssertEqual(task.originalRequest?.value(forHTTPHeaderField: "Cookie"), "stored=2", "the task is made with the stored cookie")
        task.cancel()
        let (replaced, _) = try await session.data(for: request)
        XCTAssertEqual(String(decoding: replaced, as: UTF8.self), "stored=2", "the stored cookies replace the request's own")
    }

    /// corelibs counts request timeouts in whole seconds: below 1 s a request fails at once
    /// with -1001 (plain session, real HTTP). Tests therefore use 1 s timeouts.
    func testSubSecondTimeoutsFailImmediately() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route(nil, "/slow") { _ in .text("late").with { $0.delay = .seconds(3) } }
        let session = URLSession(configuration: .ephemeral)
        sessions.append(session)
        var request = URLRequest(url: server.url("/slow"))
        request.timeoutInterval = 0.5
        let start = ContinuousClock.now
        do {
            _ = try await session.data(for: request)
            XCTFail("expected a timeout")
        } catch {
            XCTAssertEqual((error as NSError).code, NSURLErrorTimedOut)
        }
        XCTAssertLessThan(
            ContinuousClock.now - start, .milliseconds(400), "a 0.5 s timeout is now honoured: tests may use sub-second timeouts")
    }

    // MARK: The library's reflection (Platform/Corelibs) works on this toolchain

    /// A listener of a shared transfer is timed as corelibs times a request
    /// (`CorelibsPlatform.idleTimeout(of:sessionDefault:)`): the request's own `timeoutInterval`
    /// only if it was set on the `URLRequest` (its internal `isTimeoutIntervalSet`, read from the
    /// struct's layout), else the session's; in whole seconds.
    func testIdleTimeoutReadsWhetherTheRequestSetItsOwn() {
        let url = URL(string: "http://127.0.0.1/x")!
        var own = URLRequest(url: url)
        own.timeoutInterval = 5
        XCTAssertEqual(Platform.idleTimeout(of: own, sessionDefault: 30), .seconds(5))
        XCTAssertEqual(Platform.idleTimeout(of: URLRequest(url: url), sessionDefault: 30), .seconds(30), "not set: the session's")
        XCTAssertEqual(
            Platform.idleTimeout(of: URLRequest(url: url, timeoutInterval: 5), sessionDefault: 30), .seconds(30),
            "the initializer's timeout does not count as set in corelibs")
        var explicitDefault = URLRequest(url: url)
        explicitDefault.timeoutInterval = 60
        XCTAssertEqual(Platform.idleTimeout(of: explicitDefault, sessionDefault: 30), .seconds(60), "set, even to the default")
        var half = URLRequest(url: url)
        half.timeoutInterval = 1.5
        XCTAssertEqual(Platform.idleTimeout(of: half, sessionDefault: 30), .seconds(1), "whole seconds")
        half.timeoutInterval = .infinity
        XCTAssertNil(Platform.idleTimeout(of: half, sessionDefault: 30))
    }

    func testReflectionFindsDeliveryAndWorkQueue() async throws {
        let session = pinSession()
        let completion = UUID().uuidString
        _ = try await runCompletionTask { session.dataTask(with: PinProtocol.url(completion), completionHandler: $0) }
        let async = UUID().uuidString
        _ = try await session.data(from: PinProtocol.url(async))

        let delegate = RecordingDelegate()
        let delegateSession = pinSession(delegate: delegate)
        let streamed = UUID().uuidString
        let task = delegateSession.dataTask(with: PinProtocol.url(streamed))
        task.resume()
        try await delegate.completion(of: task)

        for (id, expected, kind) in [
            (completion, BodyDelivery.buffer, "completion handler"), (async, .buffer, "async data(for:)"), (streamed, .stream, "delegate"),
        ] {
            let seen = try XCTUnwrap(PinProtocol.observation(id), kind)
            XCTAssertEqual(seen.delivery, expected, "\(kind): Platform misreads the task's behaviour")
            XCTAssertTrue(seen.workQueueFound, "\(kind): Platform no longer finds the task's workQueue")
            XCTAssertTrue(seen.ranOnWorkQueue, "\(kind): startLoading did not run on the queue Platform found")
            XCTAssertEqual(seen.isDownload, false)
            XCTAssertEqual(seen.bodyMissing, false)
        }
        XCTAssertNotNil(Platform.nativeHTTPProtocol, "the native HTTP protocol (for download tasks) is not found")
    }

    /// A manager's session reads its work queue and task registry once, when it is made, and
    /// the transport's callbacks run on the inner session's libcurl queue, which targets its
    /// work queue, which every session's work queue shares: the bridge calls the caller's client
    /// from there.
    func testManagedSessionFindsItsInternalsAndTransportCallbacksShareTheWorkQueue() throws {
        let session = URLTaskManager().session
        defer { session.invalidateAndCancel() }
        let managed = try XCTUnwrap(session as? ManagedURLSession)
        XCTAssertNotNil(managed.foundWorkQueue, "the session's workQueue is no longer found")
        XCTAssertNotNil(managed.registryReader, "the session's taskRegistry is no longer found")
        let inner: URLSession = managed.pipeline.transport.session
        let innerQueue = try XCTUnwrap(Reflection.child(inner, "workQueue") as? DispatchQueue)
        let libcurlQueue = try XCTUnwrap(Platform.libcurlQueue(of: inner), "the inner session's multi handle queue is no longer found")
        XCTAssertTrue(inner.delegateQueue.underlyingQueue === libcurlQueue, "transport callbacks no longer run on libcurl's queue")
        XCTAssertTrue(innerQueue.sync { Platform.isOnSessionWorkQueue })
        XCTAssertTrue(libcurlQueue.sync { Platform.isOnSessionWorkQueue }, "libcurl's queue no longer targets the work queue")
        XCTAssertFalse(Platform.isOnSessionWorkQueue)
    }

    /// Every case of corelibs' task registry entry reads the same through
    /// ``RegisteredBehaviour`` (corelibs' enum declared again, read without a `Mirror`) as
    /// through a `Mirror`, delegate of the async APIs included. Real tasks of each kind on a
    /// plain session, two of them held in flight by the server.
    func testRegisteredBehaviourReadsEveryCaseOfTheRegistry() async throws {
        let server = try LoopbackServer()
        let gate = Gate()
        defer {
            gate.open()
            server.shutdown()
        }
        server.route("/held") { _ in
            _ = gate.wait(timeout: .seconds(10))
            return .text("released")
        }
        let sessionDelegate = RecordingDelegate()
        let session = pinSession(delegate: sessionDelegate) { $0.protocolClasses = [] }
        let held = server.url("/held")
        let delegated = session.dataTask(with: held)
        let data = session.dataTask(with: held) { _, _, _ in }
        let download = session.downloadTask(with: held) { _, _, _ in }
        let taskDelegate = RecordingDelegate()
        let asyncData = Task { try await session.data(from: held, delegate: taskDelegate) }
        let asyncDownload = Task { try await session.download(from: held, delegate: taskDelegate) }
        _ = try await server.waitForRequests(path: "/held", count: 2)
        let all = await withCheckedContinuation { continuation in session.getAllTasks { continuation.resume(returning: $0) } }
        let known = Set([delegated, data, download].map(\.taskIdentifier))
        // The two async calls run concurrently, so either may have made its task first: tell
        // them apart by kind, not by identifier.
        let started = all.filter { !known.contains($0.taskIdentifier) }
        XCTAssertEqual(started.count, 2, "the two async tasks")
        let startedData = try XCTUnwrap(started.first { !($0 is URLSessionDownloadTask) })
        let startedDownload = try XCTUnwrap(started.first { $0 is URLSessionDownloadTask })

        let expected: [(URLSessionTask, String, BodyDelivery, Bool)] = [
            (delegated, "callDelegate", .stream, false), (data, "dataCompletionHandler", .buffer, false),
            (download, "downloadCompletionHandler", .buffer, false),
            (startedData, "dataCompletionHandlerWithTaskDelegate", .buffer, true),
            (startedDownload, "downloadCompletionHandlerWithTaskDelegate", .buffer, true),
        ]
        let reader = try XCTUnwrap(TaskRegistryReader(session: session), "the session's task registry is no longer found")
        let workQueue = try XCTUnwrap(Reflection.child(session, "workQueue") as? DispatchQueue)
        for (task, name, delivery, hasTaskDelegate) in expected {
            let entry = workQueue.sync { reader.entry(for: task.taskIdentifier) }
            guard case .found(let behaviour) = entry else { return XCTFail("\(name): read as \(entry), not as RegisteredBehaviour") }
            let read = String("\(behaviour)".prefix { $0 != "(" })
            XCTAssertEqual(read, name, "RegisteredBehaviour's cases no longer match corelibs' order")
            XCTAssertEqual(behaviour.delivery, delivery, name)
            XCTAssertEqual(behaviour.taskDelegate === taskDelegate, hasTaskDelegate, "\(name): the async API's delegate")
        }
        XCTAssertTrue(workQueue.sync { if case .absent = reader.entry(for: -1) { true } else { false } })

        gate.open()
        _ = try await asyncData.value
        _ = try await asyncDownload.value
        for task in [delegated, data, download] { task.cancel() }
    }

    func testReflectionRecoversUploadBodies() async throws {
        let session = pinSession()
        let payload = Data(GeneratedBody.bytes(offset: 0, count: 70_000))
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("pin-\(UUID().uuidString).bin")
        try payload.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let expectedData = "data(\(payload.count) bytes, sha \(SHA256Hex.of(payload)))"

        let fromData = UUID().uuidString
        _ = try await runCompletionTask { session.uploadTask(with: post(fromData), from: payload, completionHandler: $0) }
        let fromFile = UUID().uuidString
        _ = try await runCompletionTask { session.uploadTask(with: post(fromFile), fromFile: file, completionHandler: $0) }
        let asyncData = UUID().uuidString
        _ = try await session.upload(for: post(asyncData), from: payload)
        let asyncFile = UUID().uuidString
        _ = try await session.upload(for: post(asyncFile), fromFile: file)
        let httpBody = UUID().uuidString
        var bodyRequest = post(httpBody)
        bodyRequest.httpBody = payload
        _ = try await runCompletionTask { session.dataTask(with: bodyRequest, completionHandler: $0) }
        let stream = UUID().uuidString
        var streamRequest = post(stream)
        streamRequest.httpBodyStream = InputStream(data: payload)
        _ = try await runCompletionTask { session.dataTask(with: streamRequest, completionHandler: $0) }

        let expectations = [
            (fromData, expectedData, "uploadTask(with:from:)"),
            (fromFile, "file(\(file.lastPathComponent))", "uploadTask(with:fromFile:)"),
            (asyncData, expectedData, "upload(for:from:)"),
            (asyncFile, "file(\(file.lastPathComponent))", "upload(for:fromFile:)"),
            (httpBody, expectedData, "httpBody"),
            (stream, "stream", "httpBodyStream"),
        ]
        for (id, expected, kind) in expectations {
            let seen = try XCTUnwrap(PinProtocol.observation(id), kind)
            XCTAssertEqual(seen.body, expected, "\(kind): Platform no longer recovers the body")
            XCTAssertEqual(seen.bodyMissing, false, kind)
            XCTAssertEqual(seen.bodyFromDelegate, false, kind)
        }

        // uploadTask(withStreamedRequest:): no body yet; it is the delegate's to give.
        let streamed = UUID().uuidString
        let delegate = RecordingDelegate(bodyStream: { InputStream(data: payload) })
        let delegateSession = pinSession(delegate: delegate)
        let task = delegateSession.uploadTask(withStreamedRequest: post(streamed))
        task.resume()
        try await delegate.completion(of: task)
        let seen = try XCTUnwrap(PinProtocol.observation(streamed))
        XCTAssertEqual(seen.body, "none")
        XCTAssertEqual(seen.bodyFromDelegate, true, "Platform no longer recognises a streamed-request upload (knownBody == nil)")
        XCTAssertEqual(seen.bodyMissing, false)
    }
}
#endif
