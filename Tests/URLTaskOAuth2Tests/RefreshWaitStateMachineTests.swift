import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
@testable import URLTaskOAuth2
import TestSupport

/// Every race of one caller's wait for a refresh: the refresh's end, the caller's deadline and
/// its cancellation, without I/O. Whichever comes first answers the caller, once; the others
/// find the wait ended.
final class RefreshWaitStateMachineTests: XCTestCase {
    private typealias Machine = RefreshWaitStateMachine
    private let url = URL(string: "http://127.0.0.1:9/token")!
    private let credential = OAuth2Credential(
        accessToken: "a", refreshToken: "r", expiresAt: Date(timeIntervalSince1970: 2_000_000_000), scope: nil)

    /// Runs `events` with a real continuation; returns what the caller received and the names
    /// of the actions, in order.
    private func run(_ events: @escaping (inout Machine, Machine.Continuation) -> [Machine.Action]) async -> (Machine.Answer, [String]) {
        let names = LockedBox<[String]>([])
        do {
            let value = try await withCheckedThrowingContinuation { continuation in
                var machine = Machine(url: url)
                for action in events(&machine, continuation) {
                    switch action {
                    case .none: names.withLock { $0.append("none") }
                    case .answer(let waiting, let answer):
                        names.withLock { $0.append("answer") }
                        waiting.resume(with: answer)
                    }
                }
            }
            return (.success(value), names.snapshot)
        } catch {
            return (.failure(error), names.snapshot)
        }
    }

    func testTheRefreshEndingFirstAnswersAndTheDeadlineFindsTheWaitEnded() async {
        let credential = self.credential
        let (answer, actions) = await run { machine, continuation in
            [machine.started(continuation), machine.refreshEnded(.success(credential)), machine.deadlinePassed(), machine.cancelled()]
        }
        XCTAssertEqual(try? answer.get(), credential)
        XCTAssertEqual(actions, ["none", "answer", "none", "none"])
    }

    func testTheDeadlineFirstAnswersTimedOutNamingTheEndpointAndTheLateEndIsDropped() async {
        let credential = self.credential
        let (answer, actions) = await run { machine, continuation in
            [machine.started(continuation), machine.deadlinePassed(), machine.refreshEnded(.success(credential))]
        }
        guard case .failure(let error as URLError) = answer else { return XCTFail("\(answer)") }
        XCTAssertEqual(error.code, URLError.Code.timedOut)
        XCTAssertEqual(error.failingURL, url)
        XCTAssertEqual(actions, ["none", "answer", "none"])
    }

    func testACancelBeforeTheWaitStartsAnswersAsItStarts() async {
        let (answer, actions) = await run { machine, continuation in
            [machine.cancelled(), machine.started(continuation), machine.deadlinePassed()]
        }
        guard case .failure(let error) = answer else { return XCTFail("\(answer)") }
        XCTAssertTrue(error is CancellationError, "\(error)")
        XCTAssertEqual(actions, ["none", "answer", "none"])
    }

    func testACancelWhileWaitingAnswersAtOnceAndTheRefreshsEndIsDropped() async {
        let credential = self.credential
        let (answer, actions) = await run { machine, continuation in
            [machine.started(continuation), machine.cancelled(), machine.refreshEnded(.success(credential))]
        }
        guard case .failure(let error) = answer else { return XCTFail("\(answer)") }
        XCTAssertTrue(error is CancellationError, "\(error)")
        XCTAssertEqual(actions, ["none", "answer", "none"])
    }
}
