import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
@testable import URLTaskManager
import XCTest
import TestSupport

#if canImport(FoundationNetworking)
/// corelibs' `_Behaviour` with a case inserted in the middle: the same size, stride and alignment
/// (the only gates before the cast up to 0.2.0), so a toolchain that made this change would have
/// had its entries cast to ``RegisteredBehaviour`` with every later case misread.
private enum CaseInsertedInTheMiddle {
    case callDelegate
    case dataCompletionHandler(RegisteredBehaviour.DataCompletion)
    case inserted(RegisteredBehaviour.DataCompletion)
    case dataCompletionHandlerWithTaskDelegate(RegisteredBehaviour.DataCompletion, (any URLSessionTaskDelegate)?)
    case downloadCompletionHandler(RegisteredBehaviour.DownloadCompletion)
    case downloadCompletionHandlerWithTaskDelegate(RegisteredBehaviour.DownloadCompletion, (any URLSessionTaskDelegate)?)
}

/// The same cases, one renamed: the same layout, another enum.
private enum CaseRenamed {
    case callTheDelegate
    case dataCompletionHandler(RegisteredBehaviour.DataCompletion)
    case dataCompletionHandlerWithTaskDelegate(RegisteredBehaviour.DataCompletion, (any URLSessionTaskDelegate)?)
    case downloadCompletionHandler(RegisteredBehaviour.DownloadCompletion)
    case downloadCompletionHandlerWithTaskDelegate(RegisteredBehaviour.DownloadCompletion, (any URLSessionTaskDelegate)?)
}

/// A class whose fields change ownership the way a toolchain might change corelibs' own (a
/// `session` made `weak` to break a cycle): read by its declared type, a weak field would be
/// loaded as a strong reference (a crash).
private final class OwnershipSample {
    var strong: AnyObject?
    weak var weakReference: AnyObject?
    unowned(unsafe) var unsafeReference: AnyObject = OwnershipSample.self as AnyObject
    let value = 42
}

/// Each fallback of the bridge's reads of corelibs' task registry, forced on a manager's session,
/// with a request through every delivery mode: each still completes with the whole body, and
/// what the fallback costs is asserted (real HTTP over loopback).
final class CorelibsReadFallbackTests: XCTestCase {
    private var server: LoopbackServer!
    private let length = 300_000

    override func setUpWithError() throws {
        server = try LoopbackServer()
        let length = self.length
        server.route(nil, "/300kb") { _ in ServerResponse(body: .generated(length: length, chunkSize: 16 * 1024, chunked: true)) }
    }

    override func tearDown() {
        server.shutdown()
        server = nil
    }

    private func shape<Enum>(_ type: Enum.Type) -> EnumShape? { EnumShape(of: type) }

    private func isUsable(_ check: LayoutCheck, _ type: Any.Type) -> Bool {
        func open<Enum>(_ type: Enum.Type) -> Bool { check.isUsable(for: type) }
        return _openExistential(type, do: open)
    }

    /// The layout check compares the runtime's description of corelibs' enum with the one
    /// declared again, case by case, before any cast: equal on this toolchain, and different
    /// for an enum with a case inserted in the middle or renamed, although size, stride and
    /// alignment are the same.
    func testLayoutCheckRefusesACaseInsertedInTheMiddleOrRenamed() throws {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let reader = try XCTUnwrap(TaskRegistryReader(session: session), "the session's task registry is no longer found")
        let corelibs = reader.entryType
        XCTAssertEqual(_typeName(corelibs, qualified: true), LayoutCheck.corelibsName)
        let found = EnumShape.of(corelibs)
        let real = try XCTUnwrap(found, "the runtime no longer describes corelibs' enum as this reader expects")
        let declared = try XCTUnwrap(EnumShape(of: RegisteredBehaviour.self))
        XCTAssertEqual(
            real, declared, "corelibs' _Behaviour changed: RegisteredBehaviour must follow it (the Mirror fallback serves meanwhile)")
        XCTAssertEqual(
            declared.cases.map(\.name).sorted(),
            [
                "callDelegate", "dataCompletionHandler", "dataCompletionHandlerWithTaskDelegate", "downloadCompletionHandler",
                "downloadCompletionHandlerWithTaskDelegate",
            ])
        XCTAssertFalse(isUsable(LayoutCheck.shared, RegisteredBehaviour.self), "the check also checks the type's name")
        XCTAssertTrue(isUsable(LayoutCheck.shared, corelibs))

        for (name, other) in [("inserted", shape(CaseInsertedInTheMiddle.self)), ("renamed", shape(CaseRenamed.self))] {
            let other = try XCTUnwrap(other, name)
            XCTAssertEqual(
                [other.size, other.stride, other.alignment], [real.size, real.stride, real.alignment],
                "\(name): the gates checked before the cast up to 0.2.0 cannot tell it apart")
            XCTAssertNotEqual(other, real, name)
            let check = LayoutCheck(expected: other, typeName: LayoutCheck.corelibsName)
            XCTAssertFalse(isUsable(check, corelibs), name)
            XCTAssertTrue(check.hasRefused, name)
        }
        XCTAssertNil(EnumShape(of: Int.self), "not an enum")
        XCTAssertNil(EnumShape(of: Int?.self), "Optional is refused")
    }

    /// A field that is not a strong reference or a value is refused before anything is read
    /// (the caller then takes its fallback, as for a field that is gone); the others read.
    func testReflectionRefusesAWeakOrUnownedFieldBeforeReadingIt() {
        XCTAssertNil(StoredField(named: "weakReference", in: OwnershipSample.self), "a weak field is refused")
        XCTAssertNil(StoredField(named: "unsafeReference", in: OwnershipSample.self), "an unowned field is refused")
        XCTAssertNil(StoredField(named: "missing", in: OwnershipSample.self))
        let sample = OwnershipSample()
        sample.strong = sample
        XCTAssertEqual(Reflection.child(sample, "value") as? Int, 42)
        XCTAssertTrue(Reflection.unwrapOptional(Reflection.child(sample, "strong")) as AnyObject === sample)
        sample.strong = nil
        XCTAssertNil(Reflection.child(sample, "weakReference"))
    }

    /// What each delivery mode gave, on a session whose registry reads were made to fall back.
    private struct Delivered {
        var delegateBytes = 0
        var delegateChunks = 0
        var completionBytes = 0
        var asyncBytes = 0
        var asyncWithDelegateBytes = 0
        var taskDelegateBytes = 0
        var taskDelegateEvents: [String] = []
    }

    /// A request through every delivery mode: a delegate-driven data task, a completion-handler
    /// data task, async `data(for:)`, and async `data(for:delegate:)` with a per-task delegate.
    private func deliverEveryMode(prepare: (ManagedURLSession) -> Void) async throws -> Delivered {
        let sessionDelegate = RecordingDelegate()
        let manager = URLTaskManager(configuration: .ephemeral, delegate: sessionDelegate)
        let session = try XCTUnwrap(manager.session as? ManagedURLSession)
        defer { session.invalidateAndCancel() }
        prepare(session)
        let url = server.url("/300kb")
        var delivered = Delivered()

        let task = session.dataTask(with: url)
        task.resume()
        try await sessionDelegate.completion(of: task)
        let record = sessionDelegate.record(for: task)
        XCTAssertNil(record.error)
        XCTAssertNil(RecordingDelegate.firstMismatch(record.body, offset: 0), "delegate body")
        delivered.delegateBytes = record.body.count
        delivered.delegateChunks = record.chunkCount

        let done = Latch<Data?>("completion handler")
        session.dataTask(with: url) { data, _, error in
            XCTAssertNil(error)
            done.fulfill(data)
        }.resume()
        let completion = try await done.wait(timeout: .seconds(10)) ?? Data()
        XCTAssertNil(RecordingDelegate.firstMismatch(completion, offset: 0), "completion body")
        delivered.completionBytes = completion.count

        let (asyncData, _) = try await session.data(for: URLRequest(url: url))
        XCTAssertNil(RecordingDelegate.firstMismatch(asyncData, offset: 0), "async body")
        delivered.asyncBytes = asyncData.count

        let taskDelegate = RecordingDelegate()
        let (withDelegate, _) = try await session.data(for: URLRequest(url: url), delegate: taskDelegate)
        XCTAssertNil(RecordingDelegate.firstMismatch(withDelegate, offset: 0), "async body with a task delegate")
        delivered.asyncWithDelegateBytes = withDelegate.count
        let drained = Latch<Void>("delegate queue drained")
        session.delegateQueue.addOperation { drained.fulfill(()) }
        try await drained.wait(timeout: .seconds(10))
        delivered.taskDelegateBytes = taskDelegate.allRecords.first?.byteCount ?? 0
        delivered.taskDelegateEvents = taskDelegate.allRecords.first?.events ?? []
        return delivered
    }

    /// corelibs' enum no longer matches the one declared again (forced with a check expecting a
    /// case inserted in the middle): no entry is cast, each is read through a `Mirror`, and
    /// nothing is lost: the delegate is streamed chunk by chunk, completion handlers get the
    /// whole body, and the async API's task delegate is streamed the body.
    func testMirrorFallbackWhenTheLayoutCheckFailsServesEveryDeliveryMode() async throws {
        let refusing = LayoutCheck(expected: shape(CaseInsertedInTheMiddle.self), typeName: LayoutCheck.corelibsName)
        let delivered = try await deliverEveryMode { session in
            session.registryReader = TaskRegistryReader(session: session, layoutCheck: refusing)
        }
        XCTAssertTrue(refusing.hasRefused, "the layout check was not consulted")
        XCTAssertEqual(delivered.delegateBytes, length)
        XCTAssertGreaterThan(delivered.delegateChunks, 1, "the delegate is still streamed")
        XCTAssertEqual(delivered.completionBytes, length)
        XCTAssertEqual(delivered.asyncBytes, length)
        XCTAssertEqual(delivered.asyncWithDelegateBytes, length)
        XCTAssertEqual(delivered.taskDelegateBytes, length, "the task delegate (found through the Mirror) is streamed the body")
    }

    /// corelibs' task registry cannot be found at all (forced by removing the session's reader):
    /// every caller still gets the whole body, and the delegate is still streamed chunk by chunk
    /// (its task was made by a factory the session overrides, which recorded how it reports).
    /// The stated loss: the async APIs' per-task delegates are not called for the body.
    func testRegistryNotFoundLosesOnlyTheAsyncTaskDelegate() async throws {
        let delivered = try await deliverEveryMode { session in session.registryReader = nil }
        XCTAssertEqual(delivered.delegateBytes, length)
        XCTAssertGreaterThan(delivered.delegateChunks, 1, "the delegate is streamed without the registry")
        XCTAssertEqual(delivered.completionBytes, length)
        XCTAssertEqual(delivered.asyncBytes, length)
        XCTAssertEqual(delivered.asyncWithDelegateBytes, length)
        XCTAssertEqual(delivered.taskDelegateBytes, 0, "the loss: the task delegate is not streamed the body")
    }

    /// The task's upload body cannot be found (forced by renaming the field the session looks
    /// for): the uploads of the open factories still send their bodies (recorded when the task
    /// was made), and an async `upload(for:from:)` fails with `.uploadBodyUnavailable` before
    /// anything is sent, never as an empty POST.
    func testUploadBodyNotFoundFailsTheAsyncUploadInsteadOfSendingItEmpty() async throws {
        let received = Latch<Int>("upload received")
        server.route("POST", "/upload") { request in
            received.fulfill(request.bodyLength)
            return .text("ok")
        }
        let manager = URLTaskManager(configuration: .ephemeral)
        let session = try XCTUnwrap(manager.session as? ManagedURLSession)
        defer { session.invalidateAndCancel() }
        session.uploadBodyField = "renamedByAFutureToolchain"
        var request = URLRequest(url: server.url("/upload"))
        request.httpMethod = "POST"
        let payload = Data(GeneratedBody.bytes(offset: 0, count: 70_000))

        let done = Latch<Int?>("completion-handler upload")
        session.uploadTask(with: request, from: payload) { data, _, error in
            XCTAssertNil(error)
            done.fulfill(data?.count)
        }.resume()
        let answered = try await done.wait(timeout: .seconds(10))
        XCTAssertEqual(answered, 2)
        let sent = try await received.wait(timeout: .seconds(10))
        XCTAssertEqual(sent, payload.count, "the factory's upload sent its whole body")

        do {
            _ = try await session.upload(for: request, from: payload)
            XCTFail("an async upload whose body cannot be found must fail")
        } catch {
            XCTAssertEqual((error as? URLTaskError)?.code, .uploadBodyUnavailable, "\(error)")
        }
        XCTAssertEqual(server.requests(path: "/upload").count, 1, "nothing was sent for the async upload")
    }

    /// Neither session's work queue can be found (forced by renaming the field corelibs keeps it
    /// in, before the manager makes its sessions): the transport's callbacks keep a serial queue
    /// of their own instead of libcurl's, the finishing barrier falls back to corelibs'
    /// `getAllTasks`, and nothing else changes. Every delivery mode still gets the whole body,
    /// tasks resumed right before `finishTasksAndInvalidate()` complete with 200, and the
    /// pipeline ends (its streams of events end, the inner session is released).
    func testWorkQueueNotFoundKeepsEveryModeAndTheFinishingPath() async throws {
        let fieldName = CorelibsPlatform.workQueueField
        CorelibsPlatform.workQueueField = "renamedByAFutureToolchain"
        defer { CorelibsPlatform.workQueueField = fieldName }

        let delivered = try await deliverEveryMode { session in
            XCTAssertNil(session.foundWorkQueue, "the forced rename did not take")
        }
        XCTAssertEqual(delivered.delegateBytes, length)
        XCTAssertGreaterThan(delivered.delegateChunks, 1, "the delegate is still streamed")
        XCTAssertEqual(delivered.completionBytes, length)
        XCTAssertEqual(delivered.asyncBytes, length)
        XCTAssertEqual(delivered.asyncWithDelegateBytes, length)

        let manager = URLTaskManager(configuration: .ephemeral)
        let session = try XCTUnwrap(manager.session as? ManagedURLSession)
        XCTAssertNil(session.foundWorkQueue)
        XCTAssertFalse(
            CorelibsPlatform.runCallbacksOnWorkQueue(of: URLSession(configuration: .ephemeral), delegateQueue: OperationQueue()),
            "a transport would still run its callbacks on a work queue it cannot find")
        let events = manager.events()
        let ended = Latch<Void>("the pipeline finished")
        let reader = Task {
            for await _ in events {}
            ended.fulfill(())
        }
        defer { reader.cancel() }
        let statuses = LockedBox<[Int]>([])
        let answered = Latch<Void>("8 tasks answered")
        let length = self.length
        for _ in 0..<8 {
            session.dataTask(with: server.url("/300kb")) { data, response, _ in
                let count = statuses.withLock {
                    $0.append(data?.count == length ? (response as? HTTPURLResponse)?.statusCode ?? -1 : -2)
                    return $0.count
                }
                if count == 8 { answered.fulfill(()) }
            }.resume()
        }
        session.finishTasksAndInvalidate()
        try await answered.wait(timeout: .seconds(20))
        try await ended.wait(timeout: .seconds(20))
        XCTAssertEqual(statuses.withLock { $0 }, Array(repeating: 200, count: 8), "each task's whole body, 200")
        XCTAssertTrue(session.pipeline.isInvalidated, "the inner session is released")
    }
}
#endif
