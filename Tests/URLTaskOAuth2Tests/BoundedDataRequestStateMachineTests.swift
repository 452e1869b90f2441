import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
@testable import URLTaskOAuth2

/// Every race of a token request's answer, deadline and cancellation, without I/O: the task is
/// made but never resumed, and each test resumes the continuation the machine hands back.
final class BoundedDataRequestStateMachineTests: XCTestCase {
    private typealias Machine = BoundedDataRequestStateMachine
    private let url = URL(string: "http://127.0.0.1:9/token")!

    /// Runs `events` with a real continuation and a task that is never sent; returns what the
    /// caller would have received.
    private func run(
        sizeLimit: Int = OAuth2TokenEndpoint.defaultAnswerSizeLimit,
        _ events: @escaping (inout Machine, URLSessionDataTask, Machine.Continuation) -> Void
    ) async -> Machine.Answer {
        let task = URLSession.shared.dataTask(with: url)
        do {
            let value = try await withCheckedThrowingContinuation { continuation in
                var machine = Machine(url: url, sizeLimit: sizeLimit)
                events(&machine, task, continuation)
            }
            return .success(value)
        } catch {
            return .failure(error)
        }
    }

    private func response(length: Int = 0) -> URLResponse {
        URLResponse(url: url, mimeType: nil, expectedContentLength: length, textEncodingName: nil)
    }

    private func deliver(_ action: Machine.Action) -> String {
        switch action {
        case .none: return "none"
        case .resume: return "resume"
        case .cancel(_, let continuation, let answer):
            continuation?.resume(with: answer)
            return "cancel"
        case .answer(let continuation, let answer):
            continuation.resume(with: answer)
            return "answer"
        }
    }

    /// A transfer that ends before its response's head (the server closed the connection
    /// without answering) marks its `badServerResponse` unanswered; after the head it does not.
    func testAnErrorBeforeTheResponseHeadIsMarkedUnansweredAndAfterItIsNot() async {
        let closed = await run { m, task, continuation in
            _ = self.deliver(m.started(task, continuation: continuation))
            _ = self.deliver(m.finished(URLError(.badServerResponse)))
        }
        guard case .failure(let error) = closed else { return XCTFail("expected a failure, got \(closed)") }
        XCTAssertEqual((error as? URLError)?.code, .badServerResponse)
        XCTAssertTrue(Machine.isUnanswered(error), "closed before the head")
        let cut = await run { m, task, continuation in
            _ = self.deliver(m.started(task, continuation: continuation))
            _ = self.deliver(m.received(self.response(length: 5)))
            _ = self.deliver(m.finished(URLError(.badServerResponse)))
        }
        guard case .failure(let after) = cut else { return XCTFail("expected a failure, got \(cut)") }
        XCTAssertFalse(Machine.isUnanswered(after), "the head had arrived")
    }

    func testTheDeadlineAnswersTimedOutAndTheLateAnswerIsDropped() async {
        var steps: [String] = []
        let answer = await run { m, task, continuation in
            steps.append(self.deliver(m.started(task, continuation: continuation)))
            steps.append(self.deliver(m.deadlinePassed()))
            steps.append(self.deliver(m.completed(.success((Data("late".utf8), self.response())))))
            steps.append(self.deliver(m.cancelled()))
        }
        XCTAssertEqual(steps, ["resume", "cancel", "none", "none"])
        guard case .failure(let error as URLError) = answer else { return XCTFail("expected URLError.timedOut, got \(answer)") }
        XCTAssertEqual(error.code, URLError.Code.timedOut)
        XCTAssertEqual(error.failingURL, url)
    }

    func testAnAnswerBeforeTheDeadlineWinsAndTheDeadlineFindsItEnded() async {
        var steps: [String] = []
        let answer = await run { m, task, continuation in
            steps.append(self.deliver(m.started(task, continuation: continuation)))
            steps.append(self.deliver(m.completed(.success((Data("token".utf8), self.response())))))
            steps.append(self.deliver(m.deadlinePassed()))
        }
        XCTAssertEqual(steps, ["resume", "answer", "none"])
        guard case .success(let (data, _)) = answer else { return XCTFail("expected the answer, got \(answer)") }
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "token")
    }

    func testACancelBeforeTheTaskStartsCancelsItAsItStarts() async {
        var steps: [String] = []
        let answer = await run { m, task, continuation in
            steps.append(self.deliver(m.cancelled()))
            steps.append(self.deliver(m.started(task, continuation: continuation)))
        }
        XCTAssertEqual(steps, ["none", "cancel"])
        guard case .failure(let error) = answer else { return XCTFail("expected a cancellation, got \(answer)") }
        XCTAssertTrue(error is CancellationError)
    }

    func testACancelWhileRunningAnswersAtOnce() async {
        var steps: [String] = []
        let answer = await run { m, task, continuation in
            steps.append(self.deliver(m.started(task, continuation: continuation)))
            steps.append(self.deliver(m.cancelled()))
            steps.append(self.deliver(m.completed(.failure(URLError(.cancelled)))))
        }
        XCTAssertEqual(steps, ["resume", "cancel", "none"])
        guard case .failure(let error) = answer else { return XCTFail("expected a cancellation, got \(answer)") }
        XCTAssertTrue(error is CancellationError)
    }

    func testAContentLengthBeyondTheLimitEndsTheRequestAtItsHead() async {
        var steps: [String] = []
        let answer = await run(sizeLimit: 10) { m, task, continuation in
            steps.append(self.deliver(m.started(task, continuation: continuation)))
            steps.append(self.deliver(m.received(self.response(length: 11))))
            steps.append(self.deliver(m.received(Data("x".utf8))))
            steps.append(self.deliver(m.finished(URLError(.cancelled))))
        }
        XCTAssertEqual(steps, ["resume", "cancel", "none", "none"])
        guard case .failure(let error as OAuth2Error) = answer else { return XCTFail("expected tokenAnswerTooLarge, got \(answer)") }
        XCTAssertEqual(error, .tokenAnswerTooLarge(limit: 10))
    }

    func testABodyPassingTheLimitEndsTheRequestAndLaterPiecesAreDropped() async {
        var steps: [String] = []
        let answer = await run(sizeLimit: 10) { m, task, continuation in
            steps.append(self.deliver(m.started(task, continuation: continuation)))
            steps.append(self.deliver(m.received(self.response(length: -1))))
            steps.append(self.deliver(m.received(Data("123456".utf8))))
            steps.append(self.deliver(m.received(Data("78901".utf8))))
            steps.append(self.deliver(m.received(Data("2".utf8))))
            steps.append(self.deliver(m.deadlinePassed()))
        }
        XCTAssertEqual(steps, ["resume", "none", "none", "cancel", "none", "none"])
        guard case .failure(let error as OAuth2Error) = answer else { return XCTFail("expected tokenAnswerTooLarge, got \(answer)") }
        XCTAssertEqual(error, .tokenAnswerTooLarge(limit: 10))
    }

    func testABodyOfExactlyTheLimitIsAnsweredWhole() async {
        var steps: [String] = []
        let answer = await run(sizeLimit: 10) { m, task, continuation in
            steps.append(self.deliver(m.started(task, continuation: continuation)))
            steps.append(self.deliver(m.received(self.response(length: 10))))
            steps.append(self.deliver(m.received(Data("12345".utf8))))
            steps.append(self.deliver(m.received(Data("67890".utf8))))
            steps.append(self.deliver(m.finished(nil)))
        }
        XCTAssertEqual(steps, ["resume", "none", "none", "none", "answer"])
        guard case .success(let (data, _)) = answer else { return XCTFail("expected the answer, got \(answer)") }
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "1234567890")
    }

    func testAWholeBodyFromACompletionHandlerIsCheckedAgainstTheLimit() async {
        let answer = await run(sizeLimit: 3) { m, task, continuation in
            _ = self.deliver(m.started(task, continuation: continuation))
            _ = self.deliver(m.completed(.success((Data("1234".utf8), self.response()))))
        }
        guard case .failure(let error as OAuth2Error) = answer else { return XCTFail("expected tokenAnswerTooLarge, got \(answer)") }
        XCTAssertEqual(error, .tokenAnswerTooLarge(limit: 3))
    }
}
