import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
@testable import URLTaskManager
import XCTest

#if canImport(FoundationNetworking)
/// One test per swift-corelibs-foundation change the bridge was written against, named after
/// the behaviour and the upstream change: each says what this toolchain does, what the library
/// assumes, and what to revisit when a toolchain does otherwise. The expectation that differs
/// by toolchain is the only `#if compiler(...)` of each test.
final class CorelibsChangePinTests: XCTestCase {
    private var server: LoopbackServer!
    private var sessions: [URLSession] = []

    override func setUpWithError() throws {
        server = try LoopbackServer()
        server.route(nil, "/basic") { _ in
            ServerResponse(status: 401, headers: ["WWW-Authenticate": "Basic realm=\"pin\""], body: .data(Data("denied".utf8)))
        }
        // Answers long after any test here is done: the tasks it serves are cancelled.
        server.route(nil, "/held") { _ in .text("late").with { $0.delay = .seconds(20) } }
    }

    override func tearDown() {
        for session in sessions { session.invalidateAndCancel() }
        sessions = []
        server.shutdown()
        server = nil
    }

    private func plainSession() -> URLSession {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCredentialStorage = nil
        let session = URLSession(configuration: configuration)
        sessions.append(session)
        return session
    }

    /// corelibs #5457 (cherry-picked as 6da8413b9, in 6.3.2 and later): a plain session's task
    /// that gets a 401 with a `WWW-Authenticate: Basic` challenge, and has no credential to
    /// answer it with, completes with the 401. On 6.3.1 it never completes.
    ///
    /// The library assumes neither: the transport cancels the inner task's challenge and reports
    /// that as the end of the 401 (`Transport`), and the bridge hands the caller the 401 without
    /// its `WWW-Authenticate` header (`AuthenticationChallenge`), so a manager's caller gets the
    /// 401 on both, as asserted here. If this fails, the toolchain's behaviour moved: update the
    /// expectation and the Linux notes; the manager's half must keep passing as it is.
    func testCorelibs5457_A401WithoutCredentialCompletes() async throws {
        #if compiler(>=6.3.2)
        let plainCompletes = true
        #else
        let plainCompletes = false
        #endif
        let done = Latch<Int?>("a plain task answered 401 with no credential")
        plainSession().dataTask(with: server.url("/basic")) { _, response, _ in
            _ = done.fulfill((response as? HTTPURLResponse)?.statusCode)
        }.resume()
        do {
            // Long enough for the answer on a loaded machine; the wait is the price of a 6.3.1 hang.
            let status = try await done.wait(timeout: .seconds(3))
            XCTAssertTrue(plainCompletes, "a 401 with no credential completed: corelibs #5457 is in this toolchain")
            XCTAssertEqual(status, 401)
        } catch is WaitTimedOut {
            XCTAssertFalse(plainCompletes, "a 401 with no credential never completed: corelibs #5457 is not in this toolchain")
        }

        let manager = URLTaskManager(configuration: URLSessionConfiguration.ephemeral)
        sessions.append(manager.session)
        let (data, response) = try await manager.session.data(from: server.url("/basic"))
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 401, "a manager's caller gets the 401 on every toolchain")
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "denied")
    }

    /// corelibs #5417 (`main`, in the 6.4 snapshots): `URLSessionTask.cancel()` queues the
    /// cancellation on the task's work queue (`workQueue.async`) instead of performing its first
    /// step inside the call (`workQueue.sync`, 6.3 and earlier): the task is `.canceling`, and
    /// `stopLoading` runs, only some time after `cancel()` returned.
    ///
    /// Shown here by holding the sessions' shared work queue while another thread cancels: on
    /// 6.3 `cancel()` cannot return until the queue is free, then the task is `.canceling`; on
    /// 6.4 it returns at once and the task is still `.running`.
    ///
    /// The library is right either way: it never cancels a task on the work queue (`Transport`,
    /// `BoundedDataRequest` hop to another thread, which 6.4 makes merely unneeded), never waits
    /// for a cancellation to take effect, and decides whether a task is being cancelled only on
    /// the work queue, where it sees either both of the cancellation's steps or neither
    /// (`ProtocolSink.isBeingCancelled`). If this fails, update the expectation and the Linux
    /// notes, and re-read those three places.
    func testCorelibs5417_CancelReturnsBeforeTheTaskIsCanceling() async throws {
        let session = plainSession()
        let workQueue = try XCTUnwrap(Reflection.child(session, "workQueue") as? DispatchQueue, "the session's work queue")
        let task = session.dataTask(with: server.url("/held"))
        task.resume()

        let parked = Latch<Void>("the work queue is held")
        let free = DispatchSemaphore(value: 0)
        workQueue.async {
            _ = parked.fulfill(())
            // Freed by the cancelling thread once `cancel()` returned, or by this deadline when
            // `cancel()` waits for this very queue (6.3).
            _ = free.wait(timeout: .now() + 2)
        }
        try await parked.wait(timeout: .seconds(10))
        let returned = Latch<URLSessionTask.State>("cancel() returned")
        DispatchQueue.global().async {
            task.cancel()
            // Read before the queue is freed: on 6.4 nothing of the cancellation has run yet.
            let state = task.state
            free.signal()
            _ = returned.fulfill(state)
        }
        let state = try await returned.wait(timeout: .seconds(10))
        #if compiler(>=6.4)
        XCTAssertEqual(state, .running, "cancel() waited for the work queue: corelibs #5417 is not in this toolchain")
        #else
        XCTAssertEqual(state, .canceling, "cancel() returned before its first step ran: corelibs #5417 is in this toolchain")
        #endif
    }
}
#endif
