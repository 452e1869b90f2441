import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest

@testable import URLTaskManager
import TestSupport

/// ``ReactorRunner``: what a reactor's work ends as for the tasks that wait on it, by the error
/// rule (a `URLError` as itself, naming the reactor; a `URLTaskError` as it is, the reactor
/// filled in; anything else wrapped `reactorFailed`; past the timeout `reactorTimedOut`), and
/// what it reads of the reactor once, when the manager is made.
final class ReactorRunnerTests: XCTestCase {
    private struct Refused: Error {}

    /// A reactor whose work is `work`, with `timeout`, reporting `version` as its current one.
    private struct Scripted: URLTaskReactor {
        let configuration: URLTaskReactorConfiguration
        let version: Int?
        let work: @Sendable () async throws -> Void

        init(timeout: Duration? = .seconds(30), version: Int? = nil, work: @escaping @Sendable () async throws -> Void) {
            configuration = URLTaskReactorConfiguration(mode: .perTask(afterwards: .sendAgain), timeout: timeout)
            self.version = version
            self.work = work
        }

        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool { true }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws { try await work() }
        func currentCredentialVersion() -> Int? { version }
    }

    private static let component = URLTaskError.Component(kind: .reactor, index: 2, name: "Scripted")
    private static let task = URLTask(request: URLRequest(url: URL(string: "http://127.0.0.1:1/r")!))
    private static let outcome = URLTaskOutcome.failure(URLError(.badServerResponse))

    private func run(_ reactor: Scripted) async -> ReactorRunner.Outcome {
        await ReactorRunner(reactor: reactor, component: Self.component).runWork(outcome: Self.outcome, body: Data(), task: Self.task)
    }

    func testWhatItReadsOfTheReactorWhenTheManagerIsMade() {
        let plain = ReactorRunner(reactor: Scripted {}, component: Self.component)
        XCTAssertEqual(plain.index, 2)
        XCTAssertEqual(plain.name, "Scripted")
        XCTAssertFalse(plain.reportsCredentialVersions, "no version of its own: a slot handed over needs no reading")
        let versioned = ReactorRunner(reactor: Scripted(version: 7) {}, component: Self.component)
        XCTAssertTrue(versioned.reportsCredentialVersions)
    }

    func testWorkThatSucceeds() async {
        guard case .succeeded = await run(Scripted {}) else { return XCTFail("expected succeeded") }
    }

    func testAURLErrorReachesTheTasksAsItselfNamingTheReactor() async {
        guard case .failed(let error) = await run(Scripted { throw URLError(.notConnectedToInternet) }) else {
            return XCTFail("expected failed")
        }
        let urlError = error as? URLError
        XCTAssertEqual(urlError?.code, .notConnectedToInternet)
        XCTAssertEqual(urlError?.userInfo[URLTaskError.componentUserInfoKey] as? String, "Scripted")
    }

    func testAURLTaskErrorIsDeliveredAsItIsWithTheReactorFilledIn() async {
        let own = URLTaskError.Code("ReactorRunnerTests.own")
        guard case .failed(let error) = await run(Scripted { throw URLTaskError(code: own) }) else { return XCTFail("expected failed") }
        let taskError = error as? URLTaskError
        XCTAssertEqual(taskError?.code, own, "not wrapped")
        XCTAssertEqual(taskError?.component, Self.component)
    }

    func testAnyOtherErrorIsWrappedReactorFailed() async {
        guard case .failed(let error) = await run(Scripted { throw Refused() }) else { return XCTFail("expected failed") }
        let taskError = error as? URLTaskError
        XCTAssertEqual(taskError?.code, .reactorFailed)
        XCTAssertEqual(taskError?.component, Self.component)
        XCTAssertTrue(taskError?.underlying is Refused)
    }

    /// Work that never ends on its own fails its tasks `reactorTimedOut` at the timeout, naming
    /// the limit.
    func testWorkPastItsTimeoutFailsReactorTimedOut() async {
        let release = Latch<Void>("the work may end")
        defer { release.fulfill(()) }
        let outcome = await run(Scripted(timeout: .milliseconds(100)) { try await release.wait(timeout: .seconds(60)) })
        guard case .failed(let error) = outcome else { return XCTFail("expected failed") }
        let taskError = error as? URLTaskError
        XCTAssertEqual(taskError?.code, .reactorTimedOut)
        XCTAssertEqual(taskError?.limit, .milliseconds(100))
        XCTAssertEqual(taskError?.component, Self.component)
    }
}
