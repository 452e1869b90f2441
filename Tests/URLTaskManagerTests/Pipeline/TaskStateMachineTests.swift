import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
@testable import URLTaskManager

/// Every transition of ``TaskStateMachine``, without I/O.
final class TaskStateMachineTests: XCTestCase {
    typealias Machine = TaskStateMachine

    /// An `Action` reduced to something `Equatable`.
    enum Step: Equatable {
        case none, checkGates, finish, cancelTransport, abandon, acquireConnection, leaveConnectionQueue
        case runInterceptor(Int)
        case hold(Int, Duration?)
        case releaseBatch(Int)
        case send(attempt: Int)
        case forwardResponse(status: Int)
        case forwardData(Data)
        case respond(status: Int, body: Data)
        case fail(String)
        case react(reactor: Int, outcome: String, body: Data)
        case leaveBatch(Int)
        case leaveReactor(Int)
        case consultRedirect
        case consultChallenge(status: Int)
        case restart(url: String)

        init(_ action: Machine.Action) {
            switch action {
            case .none: self = .none
            case .checkGates: self = .checkGates
            case .runInterceptor(let index): self = .runInterceptor(index)
            case .hold(let index, let wait): self = .hold(index, wait)
            case .releaseBatch(let index): self = .releaseBatch(index)
            case .acquireConnection: self = .acquireConnection
            case .send(let attempt): self = .send(attempt: attempt)
            case .leaveConnectionQueue: self = .leaveConnectionQueue
            case .forwardResponse(let response): self = .forwardResponse(status: (response as? HTTPURLResponse)?.statusCode ?? -1)
            case .forwardData(let data): self = .forwardData(data)
            case .finish: self = .finish
            case .respond(let response, let body): self = .respond(status: (response as? HTTPURLResponse)?.statusCode ?? -1, body: body)
            case .fail(let error): self = .fail(String(describing: error))
            case .react(let reactor, let outcome, let body):
                switch outcome {
                case .response(let response): self = .react(reactor: reactor, outcome: "response(\(response.statusCode))", body: body)
                case .failure(let error):
                    self = .react(reactor: reactor, outcome: "failure(\((error as? URLError)?.code.rawValue ?? 0))", body: body)
                }
            case .cancelTransport: self = .cancelTransport
            case .leaveBatch(let index): self = .leaveBatch(index)
            case .leaveReactor(let reactor): self = .leaveReactor(reactor)
            case .abandon: self = .abandon
            case .abortTransfer(let error): self = .fail("abort \(error)")
            case .consultRedirect: self = .consultRedirect
            case .consultChallenge(let response): self = .consultChallenge(status: response.statusCode)
            case .restart(let request): self = .restart(url: request.url?.absoluteString ?? "")
            }
        }
    }

    struct Boom: Error {}

    static let url = URL(string: "http://127.0.0.1/x")!
    static func response(_ status: Int) -> HTTPURLResponse {
        HTTPURLResponse(url: url, statusCode: status, httpVersion: "HTTP/1.1", headerFields: nil)!
    }

    static func failure(of action: Machine.Action) -> (any Error)? {
        if case .fail(let error) = action { return error }
        return nil
    }

    /// A machine with `interceptors` interceptors and one reactor "Refresh" allowed `maximumReactions`.
    static func machine(interceptors: Int = 2, maximumReactions: Int = 2) -> Machine {
        Machine(interceptorCount: interceptors, reactors: [.init(component: .reactorNamed("Refresh"), maximumReactions: maximumReactions)])
    }

    // MARK: Drivers to each state

    static func intercepting(_ index: Int = 0) -> Machine {
        var m = machine()
        _ = m.start()
        _ = m.gateOpened()
        for i in 0..<index { _ = m.interceptorReturned(index: i, command: .execute, interceptor: .named("I")) }
        return m
    }

    static func held(_ index: Int = 0) -> Machine {
        var m = intercepting(index)
        _ = m.interceptorReturned(index: index, command: .hold(for: nil), interceptor: .named("I"))
        return m
    }

    static func awaitingConnection() -> Machine {
        var m = intercepting(1)
        _ = m.interceptorReturned(index: 1, command: .execute, interceptor: .named("I"))
        return m
    }

    static func sending() -> Machine {
        var m = awaitingConnection()
        _ = m.connectionGranted()
        return m
    }

    static func receiving() -> Machine {
        var m = sending()
        _ = m.transportReceived(response: response(200), reactor: nil)
        return m
    }

    static func collecting() -> Machine {
        var m = sending()
        _ = m.transportReceived(response: response(401), reactor: 0)
        return m
    }

    static func reacting() -> Machine {
        var m = collecting()
        _ = m.transportCompleted(error: nil, reactor: 0)
        return m
    }

    static func gatedAtReactor() -> Machine {
        var m = machine()
        _ = m.start()
        _ = m.waitingAtGate(reactor: 0)
        return m
    }

    static func completed() -> Machine {
        var m = receiving()
        _ = m.transportCompleted(error: nil, reactor: nil)
        return m
    }

    /// Every event the machine accepts, applied to a copy of `machine`.
    static func everyEvent(on machine: Machine) -> [(String, Step)] {
        let events: [(String, (inout Machine) -> Machine.Action)] = [
            ("start", { $0.start() }),
            ("waitingAtGate", { $0.waitingAtGate(reactor: 0) }),
            ("gateOpened", { $0.gateOpened() }),
            ("interceptorReturned", { $0.interceptorReturned(index: 0, command: .execute, interceptor: .named("I")) }),
            ("interceptorReturned(1)", { $0.interceptorReturned(index: 1, command: .execute, interceptor: .named("I")) }),
            ("interceptorThrew", { $0.interceptorThrew(index: 0, error: Boom(), interceptor: .named("I")) }),
            ("released", { $0.released(index: 0) }),
            ("admissionGated", { $0.admissionGated(reactor: 0) }),
            ("headersStale", { $0.headersStale() }),
            ("failSending", { $0.failSending(Boom()) }),
            ("transportReceived(response)", { $0.transportReceived(response: response(200), reactor: nil) }),
            ("transportReceived(data)", { $0.transportReceived(data: Data("x".utf8)) }),
            ("transportCompleted", { $0.transportCompleted(error: nil, reactor: nil) }),
            ("transportCompleted(error)", { $0.transportCompleted(error: URLError(.timedOut), reactor: 0) }),
            ("reactionFinished", { $0.reactionFinished(reactor: 0, result: .requeue(reintercept: true)) }),
            ("cancel", { $0.cancel() }),
            ("fail", { $0.fail(Boom()) }),
        ]
        return events.map { name, event in
            var copy = machine
            return (name, Step(event(&copy)))
        }
    }

    // MARK: Happy paths

    func testStartChecksGatesThenRunsTheChainInOrderThenSends() {
        var m = Self.machine()
        XCTAssertEqual(Step(m.start()), .checkGates)
        XCTAssertEqual(Step(m.start()), .none, "start twice")
        XCTAssertEqual(Step(m.gateOpened()), .runInterceptor(0))
        XCTAssertEqual(Step(m.interceptorReturned(index: 1, command: .execute, interceptor: .named("I"))), .none, "out of turn")
        XCTAssertEqual(Step(m.interceptorReturned(index: 0, command: .execute, interceptor: .named("I"))), .runInterceptor(1))
        XCTAssertFalse(m.isAwaitingResponseHead)
        XCTAssertEqual(Step(m.interceptorReturned(index: 1, command: .execute, interceptor: .named("I"))), .acquireConnection)
        XCTAssertFalse(m.isAwaitingResponseHead, "not sent before it has a connection slot")
        XCTAssertEqual(Step(m.connectionGranted()), .send(attempt: 1))
        XCTAssertEqual(Step(m.connectionGranted()), .none, "granted twice")
        XCTAssertTrue(m.isAwaitingResponseHead)
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(200), reactor: nil)), .forwardResponse(status: 200))
        XCTAssertFalse(m.isAwaitingResponseHead)
        XCTAssertEqual(Step(m.transportReceived(data: Data("a".utf8))), .forwardData(Data("a".utf8)))
        XCTAssertEqual(Step(m.transportReceived(data: Data("b".utf8))), .forwardData(Data("b".utf8)))
        XCTAssertFalse(m.isCompleted)
        XCTAssertEqual(Step(m.transportCompleted(error: nil, reactor: nil)), .finish)
        XCTAssertTrue(m.isCompleted)
    }

    func testWithoutInterceptorsTheGateOpensStraightToSending() {
        var m = Machine(interceptorCount: 0)
        _ = m.start()
        XCTAssertEqual(Step(m.gateOpened()), .acquireConnection)
        XCTAssertEqual(Step(m.connectionGranted()), .send(attempt: 1))
    }

    func testTransportErrorsFailTheTaskBeforeAndAfterTheHead() {
        var beforeHead = Self.sending()
        XCTAssertEqual(
            Step(beforeHead.transportCompleted(error: URLError(.timedOut), reactor: nil)), .fail(String(describing: URLError(.timedOut))))
        var afterHead = Self.receiving()
        XCTAssertEqual(
            Step(afterHead.transportCompleted(error: URLError(.networkConnectionLost), reactor: nil)),
            .fail(String(describing: URLError(.networkConnectionLost))))
        XCTAssertTrue(afterHead.isCompleted)
    }

    // MARK: Gates

    func testAGatedTaskWaitsThenRunsTheChain() {
        var m = Self.machine()
        _ = m.start()
        XCTAssertEqual(Step(m.waitingAtGate(reactor: 0)), .none)
        XCTAssertEqual(Step(m.gateOpened()), .runInterceptor(0))
        XCTAssertEqual(Step(m.waitingAtGate(reactor: 0)), .none, "a late waitingAtGate is ignored once the gate opened")
        XCTAssertEqual(
            Step(m.interceptorReturned(index: 0, command: .execute, interceptor: .named("I"))), .runInterceptor(1),
            "and leaves the task intercepting")
    }

    func testATaskGatedByAdmissionIsInterceptedAgainWhenTheGateOpens() {
        var m = Self.awaitingConnection()
        XCTAssertEqual(Step(m.admissionGated(reactor: 0)), .none)
        XCTAssertFalse(m.isAwaitingResponseHead)
        XCTAssertEqual(Step(m.admissionGated(reactor: 0)), .none)
        XCTAssertEqual(Step(m.cancel()), .leaveReactor(0), "a task gated by admission waits at that reactor")

        var reopened = Self.awaitingConnection()
        _ = reopened.admissionGated(reactor: 0)
        XCTAssertEqual(Step(reopened.gateOpened()), .runInterceptor(0), "its headers may be stale: the chain runs again")
        XCTAssertEqual(Step(reopened.admissionGated(reactor: 0)), .none, "only a task awaiting admission can be gated by it")
        var sending = Self.sending()
        XCTAssertEqual(Step(sending.admissionGated(reactor: 0)), .none, "a task on the network is past admission")
    }

    func testFailSendingOnlyWhileSending() {
        var m = Self.sending()
        guard let failure = Self.failure(of: m.failSending(URLTaskError.invalidHeader(name: "X", reason: "r"))) as? URLTaskError,
            failure.code == .invalidHeader, let name = failure.headerName
        else {
            return XCTFail("expected the error given")
        }
        XCTAssertEqual(name, "X")
        XCTAssertTrue(m.isCompleted)
        var intercepting = Self.intercepting()
        XCTAssertEqual(Step(intercepting.failSending(Boom())), .none)
    }

    // MARK: Interceptor commands

    func testHoldThenReleaseContinuesAfterTheHolder() {
        var m = Self.intercepting(0)
        XCTAssertEqual(
            Step(m.interceptorReturned(index: 0, command: .hold(for: .seconds(2)), interceptor: .named("I"))), .hold(0, .seconds(2)))
        XCTAssertEqual(Step(m.released(index: 1)), .none, "released by another batch")
        XCTAssertEqual(
            Step(m.interceptorReturned(index: 0, command: .execute, interceptor: .named("I"))), .none, "a held task is not intercepting")
        XCTAssertEqual(Step(m.released(index: 0)), .runInterceptor(1))
        XCTAssertEqual(Step(m.released(index: 0)), .none, "released twice")
    }

    func testReleaseByTheLastInterceptorSendsAfterTheBatchIsReleased() {
        var m = Self.intercepting(1)
        XCTAssertEqual(Step(m.interceptorReturned(index: 1, command: .release, interceptor: .named("I"))), .releaseBatch(1))
        XCTAssertEqual(Step(m.cancel()), .leaveBatch(1), "the releasing task is in the batch until it is released")
        var m2 = Self.intercepting(1)
        _ = m2.interceptorReturned(index: 1, command: .release, interceptor: .named("I"))
        XCTAssertEqual(Step(m2.released(index: 1)), .acquireConnection)
    }

    func testFailAndThrowNameTheInterceptor() {
        var failed = Self.intercepting(1)
        let action = failed.interceptorReturned(index: 1, command: .fail(Boom()), interceptor: .named("Signer"))
        guard let failure = Self.failure(of: action) as? URLTaskError, failure.code == .interceptorFailed,
            let name = failure.component?.name,
            let underlying = failure.underlying
        else {
            return XCTFail("expected interceptorFailed, got \(Step(action))")
        }
        XCTAssertEqual(name, "Signer")
        XCTAssertTrue(underlying is Boom)
        XCTAssertTrue(failed.isCompleted)

        var threw = Self.intercepting(0)
        guard
            let failure = Self.failure(of: threw.interceptorThrew(index: 0, error: Boom(), interceptor: .named("Thrower")))
                as? URLTaskError,
            failure.code == .interceptorFailed, let thrower = failure.component?.name
        else {
            return XCTFail("expected interceptorFailed")
        }
        XCTAssertEqual(thrower, "Thrower")

        var typed = Self.intercepting(0)
        let passthrough = typed.interceptorThrew(
            index: 0, error: URLTaskError.invalidHeader(name: "N", reason: "r"), interceptor: .named("H"))
        guard let passed = Self.failure(of: passthrough) as? URLTaskError, passed.code == .invalidHeader, let name2 = passed.headerName
        else {
            return XCTFail("a URLTaskError thrown by an interceptor is passed through, got \(Step(passthrough))")
        }
        XCTAssertEqual(name2, "N")

        var wrongIndex = Self.intercepting(0)
        XCTAssertEqual(Step(wrongIndex.interceptorThrew(index: 1, error: Boom(), interceptor: .named("I"))), .none)
    }

    func testRespondCompletesWithTheLocalAnswer() {
        var m = Self.intercepting(0)
        let action = m.interceptorReturned(
            index: 0, command: .respond(Self.response(203), body: Data("local".utf8)), interceptor: .named("I"))
        XCTAssertEqual(Step(action), .respond(status: 203, body: Data("local".utf8)))
        XCTAssertTrue(m.isCompleted)
    }

    func testInterimHeadsLeaveTheTaskWaitingForTheFinalOne() {
        var m = Self.sending()
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(100), reactor: nil)), .none)
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(103), reactor: 0)), .none)
        XCTAssertTrue(m.isAwaitingResponseHead, "a 1xx is not the answer")
        XCTAssertEqual(Step(m.redirectReceived(tooMany: Boom())), .consultRedirect, "a redirect after a 1xx is still followed")
        var reacting = Self.sending()
        _ = reacting.transportReceived(response: Self.response(100), reactor: nil)
        XCTAssertEqual(Step(reacting.transportReceived(response: Self.response(401), reactor: 0)), .none)
        XCTAssertEqual(
            Step(reacting.transportCompleted(error: nil, reactor: 0)), .react(reactor: 0, outcome: "response(401)", body: Data()))
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(200), reactor: nil)), .forwardResponse(status: 200))
        XCTAssertFalse(Machine.isInterim(Self.response(101)), "101 switches protocols: final")
    }

    func testAnUnacceptableFinalAnswerIsCollectedThenFailsTheTask() {
        var m = Machine(interceptorCount: 0, validation: .successfulStatusCodes)
        _ = m.start()
        _ = m.gateOpened()
        _ = m.connectionGranted()
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(503), reactor: nil)), .none, "never forwarded")
        XCTAssertEqual(Step(m.transportReceived(data: Data(repeating: 65, count: 600))), .none)
        XCTAssertEqual(Step(m.transportReceived(data: Data("more".utf8))), .none)
        guard let error = Self.failure(of: m.transportCompleted(error: nil, reactor: nil)) as? URLTaskError else {
            return XCTFail("expected responseRejected")
        }
        XCTAssertEqual(error.code, .responseRejected)
        XCTAssertEqual(error.response?.statusCode, 503)
        XCTAssertEqual(error.bodyPrefix?.count, 512, "a bounded prefix")
        XCTAssertTrue(m.isCompleted)
        var cancelled = Machine(interceptorCount: 0, validation: .successfulStatusCodes)
        _ = cancelled.start()
        _ = cancelled.gateOpened()
        _ = cancelled.connectionGranted()
        _ = cancelled.transportReceived(response: Self.response(404), reactor: nil)
        XCTAssertEqual(Step(cancelled.cancel()), .cancelTransport)
    }

    func testAbortEndsATaskWhereverItIs() {
        var held = Self.held()
        XCTAssertEqual(Step(held.abort(Boom())), .fail("Boom()"))
        var sending = Self.sending()
        XCTAssertEqual(Step(sending.abort(Boom())), .fail("abort Boom()"), "a transfer is stopped")
        XCTAssertEqual(Step(sending.transportCompleted(error: URLError(.cancelled), reactor: nil)), .none, "completed once")
        var reacting = Self.reacting()
        XCTAssertEqual(Step(reacting.abort(Boom())), .fail("Boom()"))
        XCTAssertEqual(Step(reacting.abort(Boom())), .none)
    }

    func testAPolicysSkippedInterceptorsAreNeverRun() {
        var m = Machine(interceptorCount: 3, skipping: [0, 2])
        _ = m.start()
        XCTAssertEqual(Step(m.gateOpened()), .runInterceptor(1))
        XCTAssertEqual(Step(m.interceptorReturned(index: 1, command: .execute, interceptor: .named("B"))), .acquireConnection)
    }

    func testAWaitInsideThePipelineTimesOutButATransferDoesNot() {
        let waiting: [(String, Machine)] = [
            ("gated", Self.gatedAtReactor()), ("intercepting", Self.intercepting(1)), ("held", Self.held()),
            ("awaitingConnection", Self.awaitingConnection()), ("reacting", Self.reacting()),
        ]
        for (name, machine) in waiting {
            var m = machine
            XCTAssertEqual(Step(m.waitTimedOut(URLError(.timedOut))), .fail(String(describing: URLError(.timedOut))), name)
            XCTAssertTrue(m.isCompleted, name)
            XCTAssertEqual(Step(m.waitTimedOut(URLError(.timedOut))), .none, "\(name): completes once")
        }
        for (name, machine) in [("sending", Self.sending()), ("receiving", Self.receiving()), ("collecting", Self.collecting())] {
            var m = machine
            XCTAssertEqual(Step(m.waitTimedOut(URLError(.timedOut))), .none, "\(name): the transport's own timeout applies")
            XCTAssertFalse(m.isCompleted, name)
        }
    }

    // MARK: Reactions

    func testA401IsCollectedThenReactedToWithItsBody() {
        var m = Self.sending()
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(401), reactor: 0)), .none, "the caller never sees the 401")
        XCTAssertEqual(Step(m.transportReceived(data: Data("expired".utf8))), .none)
        XCTAssertEqual(Step(m.transportReceived(data: Data(" token".utf8))), .none)
        XCTAssertEqual(
            Step(m.transportCompleted(error: nil, reactor: 0)),
            .react(reactor: 0, outcome: "response(401)", body: Data("expired token".utf8)))
        XCTAssertEqual(Step(m.transportCompleted(error: nil, reactor: 0)), .none, "completes once")
    }

    func testACollectedBodyCutByAnErrorIsReactedToAsTheFailure() {
        var m = Self.collecting()
        _ = m.transportReceived(data: Data("partial".utf8))
        XCTAssertEqual(
            Step(m.transportCompleted(error: URLError(.networkConnectionLost), reactor: 0)),
            .react(reactor: 0, outcome: "failure(\(URLError.Code.networkConnectionLost.rawValue))", body: Data()))
    }

    func testATransportErrorBeforeTheHeadCanBeReactedTo() {
        var m = Self.sending()
        XCTAssertEqual(
            Step(m.transportCompleted(error: URLError(.timedOut), reactor: 0)),
            .react(reactor: 0, outcome: "failure(\(URLError.Code.timedOut.rawValue))", body: Data()))
    }

    func testCollectedBodyIsCappedAtTheReactionBodyLimit() {
        var m = Self.collecting()
        let limit = Machine.reactionBodyLimit
        _ = m.transportReceived(data: Data(repeating: 1, count: limit - 10))
        _ = m.transportReceived(data: Data(repeating: 2, count: 100))
        _ = m.transportReceived(data: Data(repeating: 3, count: 100))
        guard case .react(_, _, let body) = m.transportCompleted(error: nil, reactor: 0) else {
            return XCTFail("expected a reaction")
        }
        XCTAssertEqual(body.count, limit)
        XCTAssertEqual(body.suffix(10), Data(repeating: 2, count: 10))
        XCTAssertFalse(body.contains(3))
    }

    func testRequeueThroughTheInterceptorsIncrementsTheAttempt() {
        var m = Self.reacting()
        XCTAssertEqual(m.attempt, 1)
        XCTAssertEqual(Step(m.reactionFinished(reactor: 1, result: .requeue(reintercept: true))), .none, "another reactor")
        XCTAssertEqual(Step(m.reactionFinished(reactor: 0, result: .requeue(reintercept: true))), .checkGates)
        XCTAssertEqual(m.attempt, 2)
        XCTAssertEqual(Step(m.gateOpened()), .runInterceptor(0), "the chain starts again from the first interceptor")
        _ = m.interceptorReturned(index: 0, command: .execute, interceptor: .named("I"))
        XCTAssertEqual(Step(m.interceptorReturned(index: 1, command: .execute, interceptor: .named("I"))), .acquireConnection)
        XCTAssertEqual(Step(m.connectionGranted()), .send(attempt: 2))
    }

    func testStaleHeadersGoBackThroughTheGatesWithoutANewAttempt() {
        var m = Self.awaitingConnection()
        XCTAssertEqual(Step(m.headersStale()), .checkGates)
        XCTAssertEqual(m.attempt, 1, "nothing was sent")
        XCTAssertEqual(Step(m.headersStale()), .none, "only while awaiting admission")
        XCTAssertEqual(Step(m.gateOpened()), .runInterceptor(0), "the headers are decided again")
        var sending = Self.sending()
        XCTAssertEqual(Step(sending.headersStale()), .none, "not once it is on the network")
    }

    func testACancelledTaskDoesNotTakeAGrantedSlot() {
        var m = Self.awaitingConnection()
        XCTAssertEqual(Step(m.cancel()), .leaveConnectionQueue)
        XCTAssertEqual(Step(m.connectionGranted()), .none, "the storage gives the slot back")
    }

    func testRequeueWithoutTheInterceptorsResendsAtOnce() {
        var m = Self.reacting()
        XCTAssertEqual(Step(m.reactionFinished(reactor: 0, result: .requeue(reintercept: false))), .acquireConnection)
        XCTAssertEqual(m.attempt, 2)
        XCTAssertEqual(Step(m.connectionGranted()), .send(attempt: 2), "no interceptor runs again")
        XCTAssertTrue(m.isAwaitingResponseHead)
    }

    func testDeliverGivesTheCallerTheResponseThatTriggeredTheReaction() {
        var m = Self.collecting()
        _ = m.transportReceived(data: Data("denied".utf8))
        _ = m.transportCompleted(error: nil, reactor: 0)
        XCTAssertEqual(Step(m.reactionFinished(reactor: 0, result: .deliver)), .respond(status: 401, body: Data("denied".utf8)))

        var noResponse = Self.sending()
        _ = noResponse.transportCompleted(error: URLError(.timedOut), reactor: 0)
        XCTAssertEqual(
            Step(noResponse.reactionFinished(reactor: 0, result: .deliver)), .fail(String(describing: URLError(.timedOut))),
            "the transport's own error, as a plain session reports it")
    }

    func testAFailedReactionFailsTheTask() {
        var m = Self.reacting()
        XCTAssertEqual(Step(m.reactionFinished(reactor: 0, result: .fail(Boom()))), .fail(String(describing: Boom())))
        XCTAssertTrue(m.isCompleted)
    }

    func testTooManyReactionsFailWithTooManyAttempts() {
        var m = Self.machine(interceptors: 0, maximumReactions: 2)
        _ = m.start()
        _ = m.gateOpened()
        _ = m.connectionGranted()
        for attempt in 1...2 {
            _ = m.transportReceived(response: Self.response(401), reactor: 0)
            XCTAssertEqual(
                Step(m.transportCompleted(error: nil, reactor: 0)), .react(reactor: 0, outcome: "response(401)", body: Data()),
                "reaction \(attempt)")
            XCTAssertEqual(Step(m.reactionFinished(reactor: 0, result: .requeue(reintercept: false))), .acquireConnection)
            XCTAssertEqual(Step(m.connectionGranted()), .send(attempt: attempt + 1))
        }
        _ = m.transportReceived(response: Self.response(401), reactor: 0)
        let action = m.transportCompleted(error: nil, reactor: 0)
        guard let failure = Self.failure(of: action) as? URLTaskError, failure.code == .tooManyAttempts,
            let reactor = failure.component?.name,
            let attempts = failure.count
        else {
            return XCTFail("expected tooManyAttempts, got \(Step(action))")
        }
        XCTAssertEqual(reactor, "Refresh")
        XCTAssertEqual(attempts, 3)
        XCTAssertTrue(m.isCompleted)
    }

    // MARK: Cancel and fail in every state

    func testCancelInEveryState() {
        let cases: [(String, Machine, Step)] = [
            ("created", Self.machine(), .abandon),
            (
                "gated, checking",
                {
                    var m = Self.machine(); _ = m.start(); return m
                }(), .abandon
            ),
            ("gated at a reactor", Self.gatedAtReactor(), .leaveReactor(0)),
            ("intercepting", Self.intercepting(1), .abandon),
            ("held", Self.held(1), .leaveBatch(1)),
            ("waiting for a connection", Self.awaitingConnection(), .leaveConnectionQueue),
            ("sending", Self.sending(), .cancelTransport),
            ("receiving", Self.receiving(), .cancelTransport),
            ("collecting", Self.collecting(), .cancelTransport),
            ("reacting", Self.reacting(), .leaveReactor(0)),
            ("completed", Self.completed(), .none),
        ]
        for (name, machine, expected) in cases {
            var m = machine
            XCTAssertEqual(Step(m.cancel()), expected, name)
            XCTAssertTrue(m.isCompleted, name)
            XCTAssertEqual(Step(m.cancel()), .none, "\(name): cancel twice")
        }
    }

    func testFailOnlyBeforeTheTaskIsSent() {
        let unsent: [(String, Machine)] = [
            ("created", Self.machine()),
            ("gated", Self.gatedAtReactor()),
            ("intercepting", Self.intercepting()),
            ("held", Self.held()),
            ("waiting for a connection", Self.awaitingConnection()),
        ]
        for (name, machine) in unsent {
            var m = machine
            XCTAssertEqual(Step(m.fail(Boom())), .fail(String(describing: Boom())), name)
            XCTAssertTrue(m.isCompleted, name)
        }
        let onTheNetwork: [(String, Machine)] = [
            ("sending", Self.sending()), ("receiving", Self.receiving()), ("collecting", Self.collecting()),
            ("reacting", Self.reacting()), ("completed", Self.completed()),
        ]
        for (name, machine) in onTheNetwork {
            var m = machine
            XCTAssertEqual(Step(m.fail(Boom())), .none, name)
        }
    }

    func testEveryEventAfterCompletionIsIgnored() {
        let endings: [(String, Machine)] = [
            ("finished", Self.completed()),
            (
                "cancelled while held",
                {
                    var m = Self.held(); _ = m.cancel(); return m
                }()
            ),
            (
                "cancelled while reacting",
                {
                    var m = Self.reacting(); _ = m.cancel(); return m
                }()
            ),
            (
                "failed unsent",
                {
                    var m = Self.gatedAtReactor(); _ = m.fail(Boom()); return m
                }()
            ),
            (
                "failed by an interceptor",
                {
                    var m = Self.intercepting(); _ = m.interceptorThrew(index: 0, error: Boom(), interceptor: .named("I")); return m
                }()
            ),
            (
                "answered locally",
                {
                    var m = Self.intercepting();
                    _ = m.interceptorReturned(index: 0, command: .respond(Self.response(200), body: Data()), interceptor: .named("I"));
                    return m
                }()
            ),
        ]
        for (ending, machine) in endings {
            XCTAssertTrue(machine.isCompleted, ending)
            for (event, step) in Self.everyEvent(on: machine) {
                XCTAssertEqual(step, .none, "\(ending): \(event) must be ignored")
            }
        }
    }

    // MARK: Redirects and challenges

    static let elsewhere = URLRequest(url: URL(string: "http://127.0.0.1/elsewhere")!)

    func testAFollowedRedirectDropsTheRestOfTheTransferAndStartsAgainThroughTheGates() {
        var m = Self.sending()
        XCTAssertEqual(Step(m.redirectReceived(tooMany: URLError(.httpTooManyRedirects))), .consultRedirect)
        XCTAssertEqual(Step(m.redirectAnswered(Self.elsewhere)), .none)
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(302), reactor: nil)), .none, "the 302 is not the caller's")
        XCTAssertEqual(Step(m.transportReceived(data: Data("moved".utf8))), .none)
        XCTAssertEqual(Step(m.transportCompleted(error: nil, reactor: nil)), .restart(url: "http://127.0.0.1/elsewhere"))
        XCTAssertEqual(m.attempt, 2)
        XCTAssertEqual(Step(m.gateOpened()), .runInterceptor(0), "the interceptors run on the redirected request")
    }

    func testARefusedRedirectDeliversTheRedirectResponse() {
        var m = Self.sending()
        _ = m.redirectReceived(tooMany: URLError(.httpTooManyRedirects))
        XCTAssertEqual(Step(m.redirectAnswered(nil)), .none)
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(302), reactor: nil)), .forwardResponse(status: 302))
        XCTAssertEqual(Step(m.transportCompleted(error: nil, reactor: nil)), .finish)
    }

    func testTheTwentyFirstRedirectFailsTheTaskWhenItsTransferEnds() {
        var m = Machine(interceptorCount: 0)
        _ = m.start()
        _ = m.gateOpened()
        _ = m.connectionGranted()
        for hop in 1...Machine.maximumRedirects {
            XCTAssertEqual(Step(m.redirectReceived(tooMany: URLError(.httpTooManyRedirects))), .consultRedirect, "redirect \(hop)")
            _ = m.redirectAnswered(Self.elsewhere)
            _ = m.transportCompleted(error: nil, reactor: nil)
            _ = m.gateOpened()
            _ = m.connectionGranted()
        }
        XCTAssertEqual(Step(m.redirectReceived(tooMany: URLError(.httpTooManyRedirects))), .none, "not asked about one too many")
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(302), reactor: nil)), .none)
        XCTAssertEqual(Step(m.transportCompleted(error: nil, reactor: nil)), .fail(String(describing: URLError(.httpTooManyRedirects))))
        XCTAssertTrue(m.isCompleted)
    }

    func testAChallengeCollectsTheBodyThenAsksAndResendsWithTheCredential() {
        var m = Self.sending()
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(401), reactor: nil, challenge: true)), .none)
        XCTAssertEqual(Step(m.transportReceived(data: Data("denied".utf8))), .none)
        XCTAssertEqual(Step(m.transportCompleted(error: nil, reactor: nil)), .consultChallenge(status: 401))
        XCTAssertEqual(Step(m.challengeAnswered(.resend(Self.elsewhere))), .restart(url: "http://127.0.0.1/elsewhere"))
        XCTAssertEqual(m.attempt, 2)
    }

    func testAnUnansweredChallengeDeliversThe401WithItsBodyAndACancelledOneFails() {
        var delivered = Self.sending()
        _ = delivered.transportReceived(response: Self.response(401), reactor: nil, challenge: true)
        _ = delivered.transportReceived(data: Data("denied".utf8))
        _ = delivered.transportCompleted(error: nil, reactor: nil)
        XCTAssertEqual(Step(delivered.challengeAnswered(.deliver(Self.response(401)))), .respond(status: 401, body: Data("denied".utf8)))

        var cancelled = Self.sending()
        _ = cancelled.transportReceived(response: Self.response(401), reactor: nil, challenge: true)
        _ = cancelled.transportCompleted(error: nil, reactor: nil)
        XCTAssertEqual(Step(cancelled.challengeAnswered(.fail(URLError(.cancelled)))), .fail(String(describing: URLError(.cancelled))))
    }

    func testAReactorThatWantsThe401TakesItBeforeTheChallenge() {
        var m = Self.sending()
        _ = m.transportReceived(response: Self.response(401), reactor: 0, challenge: true)
        XCTAssertEqual(Step(m.transportCompleted(error: nil, reactor: 0)), .react(reactor: 0, outcome: "response(401)", body: Data()))
    }

    func testCancellingDuringARedirectOrAChallengeEndsOnce() {
        var redirecting = Self.sending()
        _ = redirecting.redirectReceived(tooMany: URLError(.httpTooManyRedirects))
        _ = redirecting.redirectAnswered(Self.elsewhere)
        XCTAssertEqual(Step(redirecting.cancel()), .cancelTransport)
        XCTAssertEqual(Step(redirecting.transportCompleted(error: nil, reactor: nil)), .none)

        var consulting = Self.sending()
        _ = consulting.transportReceived(response: Self.response(401), reactor: nil, challenge: true)
        _ = consulting.transportCompleted(error: nil, reactor: nil)
        XCTAssertEqual(Step(consulting.cancel()), .abandon, "the transfer has ended: nothing to stop")
        XCTAssertEqual(Step(consulting.challengeAnswered(.resend(Self.elsewhere))), .none, "an answer after the cancel is ignored")
    }
}
