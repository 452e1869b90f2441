import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
@testable import URLTaskManager
import TestSupport

/// Every transition of ``TaskStateMachine``, without I/O.
final class TaskStateMachineTests: XCTestCase {
    typealias Machine = TaskStateMachine

    /// An action reduced to something `Equatable`, whatever event returned it.
    enum Step: Equatable {
        case none, checkGates, finish, cancelTransport, abandon, acquireConnection, leaveConnectionQueue, giveSlotBack
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
        case consultRedirect, declineRedirect
        case consultChallenge(status: Int)
        case restart
        case waitAtGate(Int)

        init(_ action: Machine.ProceedAction) {
            switch action {
            case .none: self = .none
            case .checkGates: self = .checkGates
            case .runInterceptor(let index, _): self = .runInterceptor(index)
            case .hold(let index, let wait, _, _): self = .hold(index, wait)
            case .releaseBatch(let index): self = .releaseBatch(index)
            case .acquireConnection: self = .acquireConnection
            case .complete(let completion): self = Step(completion)
            case .waitAtGate(let reactor): self = .waitAtGate(reactor)
            }
        }

        init(_ completion: Machine.Completion?) {
            switch completion {
            case nil: self = .none
            case .finish: self = .finish
            case .respond(let response, let body): self = .respond(status: (response as? HTTPURLResponse)?.statusCode ?? -1, body: body)
            case .fail(let error): self = .fail(String(describing: error))
            }
        }

        init(_ action: Machine.SendAction) {
            switch action {
            case .send(_, _, let attempt, _, _): self = .send(attempt: attempt)
            case .refuse(let error): self = .fail(String(describing: error))
            case .giveSlotBack: self = .giveSlotBack
            }
        }

        init(_ action: Machine.HeadAction) {
            switch action {
            case .none: self = .none
            case .forward(let response): self = .forwardResponse(status: (response as? HTTPURLResponse)?.statusCode ?? -1)
            }
        }

        init(_ action: Machine.DataAction) {
            switch action {
            case .none: self = .none
            case .forward(let data): self = .forwardData(data)
            case .stopTransfer: self = .cancelTransport
            case .fail(.fail(let error, _, _, _)): self = .fail(String(describing: error))
            case .fail(.none): self = .none
            }
        }

        init(_ action: Machine.RedirectAction) {
            switch action {
            case .consult: self = .consultRedirect
            case .decline: self = .declineRedirect
            }
        }

        init(_ action: Machine.TransferEndAction) {
            switch action {
            case .none: self = .none
            case .complete(let completion, _): self = Step(completion)
            case .react(let reactor, let outcome, let body, _, _, _):
                switch outcome {
                case .response(let response): self = .react(reactor: reactor, outcome: "response(\(response.statusCode))", body: body)
                case .failure(let error):
                    self = .react(reactor: reactor, outcome: "failure(\((error as? URLError)?.code.rawValue ?? 0))", body: body)
                }
            case .consultChallenge(let response, _, _): self = .consultChallenge(status: response.statusCode)
            case .restart: self = .restart
            }
        }

        init(_ action: Machine.CancelAction) {
            switch action {
            case .none: self = .none
            case .stopTransfer: self = .cancelTransport
            case .leaveSlotQueue: self = .leaveConnectionQueue
            case .leaveBatch(let index): self = .leaveBatch(index)
            case .abandon: self = .abandon
            }
        }

        init(_ action: Machine.TransferStartedAction) {
            switch action {
            case .none: self = .none
            case .cancel: self = .cancelTransport
            }
        }

        init(_ action: Machine.WorkStartedAction) {
            switch action {
            case .none: self = .none
            case .cancel: self = .abandon
            }
        }

        init(_ action: Machine.FailAction) {
            switch action {
            case .none: self = .none
            case .fail(let error, _, _, _): self = .fail(String(describing: error))
            }
        }
    }

    /// A transfer for ``TaskStateMachine/transferStarted(_:attempt:)``.
    final class Transfer: TransferHandle {}

    struct Boom: Error {}

    static let url = URL(string: "http://127.0.0.1/x")!
    static func response(_ status: Int) -> HTTPURLResponse {
        HTTPURLResponse(url: url, statusCode: status, httpVersion: "HTTP/1.1", headerFields: nil)!
    }

    static func failure(of completion: Machine.Completion?) -> (any Error)? {
        if case .fail(let error) = completion { return error }
        return nil
    }

    static func failure(of action: Machine.ProceedAction) -> (any Error)? {
        if case .complete(let completion) = action { return failure(of: completion) }
        return nil
    }

    static func failure(of action: Machine.TransferEndAction) -> (any Error)? {
        if case .complete(let completion, _) = action { return failure(of: completion) }
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
        let events: [(String, (inout Machine) -> Step)] = [
            ("start", { Step($0.start()) }),
            ("waitingAtGate", { Step($0.waitingAtGate(reactor: 0)) }),
            ("gateOpened", { Step($0.gateOpened()) }),
            ("interceptorReturned", { Step($0.interceptorReturned(index: 0, command: .execute, interceptor: .named("I"))) }),
            ("interceptorReturned(1)", { Step($0.interceptorReturned(index: 1, command: .execute, interceptor: .named("I"))) }),
            ("interceptorThrew", { Step($0.interceptorThrew(index: 0, error: Boom(), interceptor: .named("I"))) }),
            ("released", { Step($0.released(index: 0)) }),
            ("admissionGated", { Step($0.admissionGated(reactor: 0)) }),
            ("headersStale", { Step($0.headersStale()) }),
            ("failSending", { Step($0.failSending(Boom())) }),
            ("transportReceived(response)", { Step($0.transportReceived(response: response(200), reactor: nil)) }),
            ("transportReceived(data)", { Step($0.transportReceived(data: Data("x".utf8))) }),
            ("transportCompleted", { Step($0.transportCompleted(error: nil, reactor: nil)) }),
            ("transportCompleted(error)", { Step($0.transportCompleted(error: URLError(.timedOut), reactor: 0)) }),
            ("reactionFinished", { Step($0.reactionFinished(reactor: 0, result: .requeue(reintercept: true))) }),
            ("challengeAnswered", { Step($0.challengeAnswered(.fail(Boom()))) }),
            ("holdExpired", { Step($0.holdExpired(index: 0, generation: 1, error: Boom())) }),
            ("waitExpired", { Step($0.waitExpired(generation: 0, error: Boom())) }),
            ("cancel", { Step($0.cancel()) }),
            ("fail", { Step($0.fail(Boom())) }),
            ("abort", { Step($0.abort(Boom())) }),
        ]
        return events.map { name, event in
            var copy = machine
            return (name, event(&copy))
        }
    }

    // MARK: Happy paths

    func testStartChecksGatesThenRunsTheChainInOrderThenSends() {
        var m = Self.machine()
        XCTAssertEqual(Step(m.start()), .checkGates)
        XCTAssertEqual(Step(m.gateOpened()), .runInterceptor(0))
        XCTAssertEqual(Step(m.interceptorReturned(index: 0, command: .execute, interceptor: .named("I"))), .runInterceptor(1))
        XCTAssertFalse(m.isAwaitingResponseHead)
        XCTAssertEqual(Step(m.interceptorReturned(index: 1, command: .execute, interceptor: .named("I"))), .acquireConnection)
        XCTAssertFalse(m.isAwaitingResponseHead, "not sent before it has a connection slot")
        XCTAssertEqual(Step(m.connectionGranted()), .send(attempt: 1))
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

    func testATransfersEndAsksFirstWhoTakesATransportErrorAndWhatAVersionKeepingReactorReports() {
        let reactors: [Machine.ReactorTraits] = [.init(component: .reactorNamed("Refresh"), maximumReactions: 2, reportsVersions: true)]
        var m = Machine(
            task: URLTask(request: URLRequest(url: Self.url)), interceptorCount: 0, reactors: reactors, asksAboutTransportErrors: true)
        _ = m.start()
        _ = m.gateOpened()
        _ = m.connectionGranted()
        let error = URLError(.networkConnectionLost)
        guard case .chooseReactor = m.transferEnded(error: error, choice: nil, readingKnown: false, now: .now()) else {
            return XCTFail("a transport error before the head: the reactors are asked first")
        }
        XCTAssertTrue(m.isAwaitingResponseHead, "asking changes nothing")
        guard case .needsReading(reactor: 0) = m.transferEnded(error: error, choice: .some(0), readingKnown: false, now: .now()) else {
            return XCTFail("the reactor that takes it keeps versions: its reading comes next")
        }
        guard
            case .ended(.react(reactor: 0, _, _, _, _, _)) = m.transferEnded(
                error: error, choice: .some(0), readingKnown: true, now: .now())
        else { return XCTFail("with both, the end hands the task to the reactor") }

        var unasked = Self.sending()
        guard
            case .ended(.complete(.fail, forwarded: false)) = unasked.transferEnded(
                error: error, choice: nil, readingKnown: false, now: .now())
        else { return XCTFail("without reactors or observers the error is the task's end") }
        var nobody = Machine(
            task: URLTask(request: URLRequest(url: Self.url)), interceptorCount: 0, reactors: reactors, asksAboutTransportErrors: true)
        _ = nobody.start()
        _ = nobody.gateOpened()
        _ = nobody.connectionGranted()
        guard case .ended(.complete(.fail, _)) = nobody.transferEnded(error: error, choice: .some(nil), readingKnown: false, now: .now())
        else { return XCTFail("no reactor took it: the task fails, with nothing to read") }
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

    func testATransferEndingWithNeitherAHeadNorAnErrorFailsAsABadServerResponse() {
        var m = Self.sending()
        guard case .complete(.fail(let error as URLError), _) = m.transportCompleted(error: nil, reactor: nil) else {
            return XCTFail("a transfer with no head must fail, never finish with nothing")
        }
        XCTAssertEqual(error.code, .badServerResponse)
        XCTAssertTrue(m.isCompleted)
    }

    // MARK: Gates

    func testAGatedTaskWaitsThenRunsTheChain() {
        var m = Self.machine()
        _ = m.start()
        XCTAssertEqual(Step(m.waitingAtGate(reactor: 0)), .waitAtGate(0))
        XCTAssertEqual(Step(m.gateOpened()), .runInterceptor(0))
        XCTAssertEqual(
            Step(m.interceptorReturned(index: 0, command: .execute, interceptor: .named("I"))), .runInterceptor(1),
            "and leaves the task intercepting")
    }

    func testATaskGatedByAdmissionIsInterceptedAgainWhenTheGateOpens() {
        var m = Self.awaitingConnection()
        XCTAssertEqual(Step(m.admissionGated(reactor: 0)), .waitAtGate(0))
        XCTAssertFalse(m.isAwaitingResponseHead)
        XCTAssertEqual(Step(m.cancel()), .abandon, "a task gated by admission leaves the gate as it ends")

        var reopened = Self.awaitingConnection()
        _ = reopened.admissionGated(reactor: 0)
        XCTAssertEqual(Step(reopened.gateOpened()), .runInterceptor(0), "its headers may be stale: the chain runs again")
        guard case .runInterceptor(_, let task) = Self.awaitingConnection().gateOpenedAfterAdmissionGated() else {
            return XCTFail("expected the chain to run")
        }
        XCTAssertNil(task.request.value(forHTTPHeaderField: "X-Set"), "from the request the interceptors start from")
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
        XCTAssertNil(m.failSending(Boom()), "a cancel raced with the failed start: ignored")
    }

    // MARK: Interceptor commands

    func testHoldThenReleaseContinuesAfterTheHolder() {
        var m = Self.intercepting(0)
        XCTAssertEqual(
            Step(m.interceptorReturned(index: 0, command: .hold(for: .seconds(2)), interceptor: .named("I"))), .hold(0, .seconds(2)))
        XCTAssertEqual(Step(m.released(index: 0)), .runInterceptor(1))
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
        XCTAssertEqual(Step(m.transportReceived(data: Data(repeating: 65, count: 100))), .none)
        XCTAssertEqual(Step(m.transportReceived(data: Data("more".utf8))), .none)
        guard let error = Self.failure(of: m.transportCompleted(error: nil, reactor: nil)) as? URLTaskError else {
            return XCTFail("expected responseRejected")
        }
        XCTAssertEqual(error.bodyPrefix?.count, 104, "the whole of a short body")
        var long = Machine(interceptorCount: 0, validation: .successfulStatusCodes)
        _ = long.start()
        _ = long.gateOpened()
        _ = long.connectionGranted()
        _ = long.transportReceived(response: Self.response(503), reactor: nil)
        guard case .fail(.fail(let error as URLTaskError, _, _, _)) = long.transportReceived(data: Data(repeating: 65, count: 600)) else {
            return XCTFail("a long body fails as soon as its prefix is complete")
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
        XCTAssertEqual(Step(sending.transferStarted(Transfer(), attempt: 1)), .none)
        guard case .fail(_, nil, nil, let transfer?) = sending.abort(Boom()) else { return XCTFail("the transfer is stopped") }
        XCTAssertTrue(transfer is Transfer)
        XCTAssertEqual(Step(sending.transportCompleted(error: URLError(.cancelled), reactor: nil)), .none, "completed once")
        var racing = Self.sending()
        _ = racing.abort(Boom())
        XCTAssertEqual(
            Step(racing.transferStarted(Transfer(), attempt: 1)), .cancelTransport, "a transfer created after the abort is stopped")
        var quick = Self.receiving()
        _ = quick.transportCompleted(error: nil, reactor: nil)
        XCTAssertEqual(
            Step(quick.transferStarted(Transfer(), attempt: 1)), .none, "a transfer that ended on its own is not stopped when recorded late"
        )
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
        // The wait for a reaction begins with the transfer's end, whose action carries its timer.
        var reacting = Self.collecting()
        guard case .react(_, _, _, _, _, let reactionTimer?) = reacting.transportCompleted(error: nil, reactor: 0) else {
            return XCTFail("reacting: the transfer's end sets the wait's timer")
        }
        let waiting: [(String, Machine, Machine.WaitTimer?)] = [
            ("gated", Self.gatedAtReactor(), nil), ("intercepting", Self.intercepting(1), nil), ("held", Self.held(), nil),
            ("awaitingConnection", Self.awaitingConnection(), nil), ("reacting", reacting, reactionTimer),
        ]
        for (name, machine, armed) in waiting {
            var m = machine
            guard let timer = armed ?? m.waitBegins() else { return XCTFail("\(name): a wait sets a timer") }
            XCTAssertNil(m.waitBegins(), "\(name): one timer per stretch")
            XCTAssertEqual(
                Step(m.waitExpired(generation: timer.generation, error: URLError(.timedOut))),
                .fail(String(describing: URLError(.timedOut))),
                name)
            XCTAssertTrue(m.isCompleted, name)
            XCTAssertEqual(Step(m.waitExpired(generation: timer.generation, error: URLError(.timedOut))), .none, "\(name): completes once")
        }
        for (name, machine) in [("sending", Self.sending()), ("receiving", Self.receiving()), ("collecting", Self.collecting())] {
            var m = machine
            XCTAssertNil(m.waitBegins(), "\(name): a task on the network does not wait on the pipeline")
            XCTAssertEqual(
                Step(m.waitExpired(generation: 0, error: URLError(.timedOut))), .none, "\(name): the transport's own timeout applies")
            XCTAssertFalse(m.isCompleted, name)
        }
        var restarted = Self.gatedAtReactor()
        let first = restarted.waitBegins()
        _ = restarted.gateOpened()
        _ = restarted.interceptorReturned(index: 0, command: .execute, interceptor: .named("I"))
        _ = restarted.interceptorReturned(index: 1, command: .execute, interceptor: .named("I"))
        _ = restarted.connectionGranted()
        _ = restarted.transportReceived(response: Self.response(401), reactor: 0)
        guard case .react(_, _, _, _, _, let reactionTimer) = restarted.transportCompleted(error: nil, reactor: 0) else {
            return XCTFail("the 401 is reacted to")
        }
        XCTAssertEqual(
            Step(restarted.waitExpired(generation: first?.generation ?? -1, error: URLError(.timedOut))), .none,
            "a timer of an earlier stretch does not fire")
        XCTAssertNotNil(reactionTimer, "the reaction is a new stretch, with a timer of its own")
        XCTAssertNotEqual(reactionTimer?.generation, first?.generation)
    }

    // MARK: Reactions

    func testAReactionsEndNamesTheAttemptTheTaskIsSentAgainAsOnlyWhenItIsRequeued() {
        var requeued = Self.reacting()
        let again = requeued.reactionEnded(reactor: 0, result: .requeue(reintercept: true))
        XCTAssertEqual(Step(again.action), .checkGates)
        XCTAssertEqual(again.requeuedAs, 2, "the second attempt")
        var unchanged = Self.reacting()
        XCTAssertEqual(unchanged.reactionEnded(reactor: 0, result: .requeue(reintercept: false)).requeuedAs, 2)
        var delivered = Self.reacting()
        let answer = delivered.reactionEnded(reactor: 0, result: .deliver)
        XCTAssertNil(answer.requeuedAs, "delivered, not sent again")
        XCTAssertEqual(Step(answer.action), .respond(status: 401, body: Data()))
    }

    func testA401IsCollectedThenReactedToWithItsBody() {
        var m = Self.sending()
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(401), reactor: 0)), .none, "the caller never sees the 401")
        XCTAssertEqual(Step(m.transportReceived(data: Data("expired".utf8))), .none)
        XCTAssertEqual(Step(m.transportReceived(data: Data(" token".utf8))), .none)
        XCTAssertEqual(
            Step(m.transportCompleted(error: nil, reactor: 0)),
            .react(reactor: 0, outcome: "response(401)", body: Data("expired token".utf8)))
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
        guard case .react(_, _, let body, _, _, _) = m.transportCompleted(error: nil, reactor: 0) else {
            return XCTFail("expected a reaction")
        }
        XCTAssertEqual(body.count, limit)
        XCTAssertEqual(body.suffix(10), Data(repeating: 2, count: 10))
        XCTAssertFalse(body.contains(3))
    }

    func testAReactorsAnswerPastItsFirstMiBStopsTheTransferAndIsReactedTo() {
        var m = Self.collecting()
        _ = m.transferStarted(Transfer(), attempt: 1)
        let limit = Machine.reactionBodyLimit
        XCTAssertEqual(Step(m.transportReceived(data: Data(repeating: 1, count: limit - 1))), .none)
        XCTAssertEqual(Step(m.transportReceived(data: Data(repeating: 2, count: 100))), .cancelTransport, "enough for the reactor")
        XCTAssertEqual(Step(m.transportReceived(data: Data(repeating: 3, count: 100))), .none, "stopped once")
        guard case .react(_, .response(let response), let body, _, _, _) = m.transportCompleted(error: URLError(.cancelled), reactor: 0)
        else {
            return XCTFail("the stop's cancel is not the outcome: the answer is reacted to")
        }
        XCTAssertEqual(response.statusCode, 401)
        XCTAssertEqual(body.count, limit)
    }

    /// Drives a machine whose reactor delivers (its answer may reach the caller) to collecting,
    /// with a held-body limit of `limit`.
    static func collectingWhole(limit: Int) -> Machine {
        var m = Machine(
            interceptorCount: 0, reactors: [.init(component: .reactorNamed("Retry"), maximumReactions: 2, delivers: true)],
            heldBodyLimit: limit)
        _ = m.start()
        _ = m.gateOpened()
        _ = m.connectionGranted()
        _ = m.transferStarted(Transfer(), attempt: 1)
        _ = m.transportReceived(response: Self.response(503), reactor: 0)
        return m
    }

    func testABodyHeldWholePastTheLimitFailsTheTaskAndStopsTheTransfer() {
        var m = Self.collectingWhole(limit: 1000)
        XCTAssertEqual(Step(m.transportReceived(data: Data(repeating: 1, count: 1000))), .none, "up to the limit is held")
        guard case .fail(.fail(let error as URLTaskError, _, _, let transfer)) = m.transportReceived(data: Data([2])) else {
            return XCTFail("one byte past the limit fails the task")
        }
        XCTAssertNotNil(transfer, "its transfer is stopped")
        XCTAssertEqual(error.code, .responseTooLarge)
        XCTAssertEqual(error.byteLimit, 1000)
        XCTAssertEqual(error.response?.statusCode, 503)
        XCTAssertTrue(m.isCompleted)
        XCTAssertEqual(Step(m.transportCompleted(error: URLError(.cancelled), reactor: nil)), .none, "its end gives the slot back only")
    }

    func testAChallengesBodyPastTheLimitFailsTheTask() {
        var m = Machine(interceptorCount: 0, heldBodyLimit: 10)
        _ = m.start()
        _ = m.gateOpened()
        _ = m.connectionGranted()
        _ = m.transportReceived(response: Self.response(401), reactor: nil, challenge: true)
        XCTAssertEqual(Step(m.transportReceived(data: Data(count: 6))), .none)
        guard case .fail(.fail(let error as URLTaskError, _, _, _)) = m.transportReceived(data: Data(count: 6)) else {
            return XCTFail("a challenge's body past the limit fails the task")
        }
        XCTAssertEqual(error.code, .responseTooLarge)
        XCTAssertTrue(String(describing: error).contains("401"), "\(error)")
    }

    func testARejectedAnswerFailsOnceItsPrefixIsComplete() {
        var m = Machine(interceptorCount: 0, validation: .successfulStatusCodes)
        _ = m.start()
        _ = m.gateOpened()
        _ = m.connectionGranted()
        _ = m.transportReceived(response: Self.response(500), reactor: nil)
        guard
            case .fail(.fail(let error as URLTaskError, _, _, _)) = m.transportReceived(
                data: Data(count: ResponseValidation.bodyPrefixLimit))
        else { return XCTFail("the rejection is known once its prefix is complete: an endless body cannot hold the task") }
        XCTAssertEqual(error.code, .responseRejected)
    }

    func testRequeueThroughTheInterceptorsIncrementsTheAttempt() {
        var m = Self.reacting()
        XCTAssertEqual(m.attempt, 1)
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
        XCTAssertEqual(Step(m.gateOpened()), .runInterceptor(0), "the headers are decided again")
    }

    /// What an interceptor spent for an attempt (a rate limiter's turn) survives the attempt's
    /// going back through the interceptors unsent, stale after a refresh or held at a refresh's
    /// gate, and only that: the next attempt (a requeue) starts without it.
    func testTheSameUnsentAttemptKeepsItsAttemptValuesAndTheNextStartsWithout() {
        for gated in [false, true] {
            var m = Self.intercepting(0)
            var snapshot = m.task
            snapshot.attemptValues[SpentTurn.self] = 7
            _ = m.interceptorReturned(index: 0, command: .execute, snapshot: snapshot, flushes: 0, interceptor: .named("I"))
            _ = m.interceptorReturned(index: 1, command: .execute, interceptor: .named("I"))
            if gated {
                _ = m.admissionGated(reactor: 0)
            } else {
                XCTAssertEqual(Step(m.headersStale()), .checkGates)
            }
            XCTAssertEqual(Step(m.gateOpened()), .runInterceptor(0))
            XCTAssertEqual(m.task.attemptValues[SpentTurn.self], 7, "the same attempt, not sent: gated \(gated)")
            XCTAssertNil(m.task.request.value(forHTTPHeaderField: "X-Set"), "the request starts again from the caller's")
            _ = m.interceptorReturned(index: 0, command: .execute, interceptor: .named("I"))
            _ = m.interceptorReturned(index: 1, command: .execute, interceptor: .named("I"))
            XCTAssertEqual(Step(m.connectionGranted()), .send(attempt: 1))
            XCTAssertEqual(m.task.attemptValues[SpentTurn.self], 7)
            // The attempt meets a 401 and its reactor requeues it: the next attempt starts empty.
            _ = m.transportReceived(response: Self.response(401), reactor: 0)
            _ = m.transportCompleted(error: nil, reactor: 0)
            XCTAssertEqual(Step(m.reactionFinished(reactor: 0, result: .requeue(reintercept: true))), .checkGates)
            XCTAssertEqual(m.attempt, 2)
            XCTAssertNil(m.task.attemptValues[SpentTurn.self], "the next attempt starts empty")
        }
    }

    private enum SpentTurn: URLTaskValueKey { typealias Value = Int }

    func testACancelledTaskDoesNotTakeAGrantedSlot() {
        var m = Self.awaitingConnection()
        XCTAssertEqual(Step(m.cancel()), .leaveConnectionQueue)
        XCTAssertEqual(Step(m.connectionGranted()), .giveSlotBack, "the storage gives the slot back")
    }

    func testRequeueWithoutTheInterceptorsResendsAtOnce() {
        var m = Self.reacting()
        XCTAssertEqual(Step(m.reactionFinished(reactor: 0, result: .requeue(reintercept: false))), .acquireConnection)
        XCTAssertEqual(m.attempt, 2)
        XCTAssertEqual(Step(m.connectionGranted()), .send(attempt: 2), "no interceptor runs again")
        XCTAssertTrue(m.isAwaitingResponseHead)
    }

    func testARequeueWithoutTheInterceptorsSentBackToThemIsJudgedNotRestampedAtSend() {
        var m = Self.reacting()
        guard case .acquireConnection(_, let restamp, _) = m.reactionFinished(reactor: 0, result: .requeue(reintercept: false)) else {
            return XCTFail("a requeue without the interceptors goes straight to admission")
        }
        XCTAssertTrue(restamp, "its headers were not decided by the interceptors: admission stamps them")
        // Admission finds a run ended since: the interceptors decide the headers again, so they
        // are stamped as the interceptors begin and judged at send, never restamped (which would
        // let headers decided before a later run through).
        XCTAssertEqual(Step(m.headersStale()), .checkGates)
        XCTAssertEqual(Step(m.gateOpened()), .runInterceptor(0))
        _ = m.interceptorReturned(index: 0, command: .execute, interceptor: .named("I"))
        guard case .acquireConnection(_, let again, _) = m.interceptorReturned(index: 1, command: .execute, interceptor: .named("I")) else {
            return XCTFail("the chain ends at admission")
        }
        XCTAssertFalse(again)
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
            ("gated at a reactor", Self.gatedAtReactor(), .abandon),
            ("intercepting", Self.intercepting(1), .abandon),
            ("held", Self.held(1), .leaveBatch(1)),
            ("waiting for a connection", Self.awaitingConnection(), .leaveConnectionQueue),
            ("sending", Self.sending(), .cancelTransport),
            ("receiving", Self.receiving(), .cancelTransport),
            ("collecting", Self.collecting(), .cancelTransport),
            ("reacting", Self.reacting(), .abandon),
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
        m.redirectAnswered(Self.elsewhere)
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(302), reactor: nil)), .none, "the 302 is not the caller's")
        XCTAssertEqual(Step(m.transportReceived(data: Data("moved".utf8))), .none)
        XCTAssertEqual(Step(m.transportCompleted(error: nil, reactor: nil)), .restart)
        XCTAssertEqual(m.attempt, 2)
        XCTAssertEqual(m.task.request.url, Self.elsewhere.url, "the interceptors start from the redirected request")
        XCTAssertEqual(m.task.attempt, 2)
        XCTAssertEqual(Step(m.gateOpened()), .runInterceptor(0), "the interceptors run on the redirected request")
    }

    func testARefusedRedirectDeliversTheRedirectResponse() {
        var m = Self.sending()
        _ = m.redirectReceived(tooMany: URLError(.httpTooManyRedirects))
        m.redirectAnswered(nil)
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
            m.redirectAnswered(Self.elsewhere)
            _ = m.transportCompleted(error: nil, reactor: nil)
            _ = m.gateOpened()
            _ = m.connectionGranted()
        }
        XCTAssertEqual(Step(m.redirectReceived(tooMany: URLError(.httpTooManyRedirects))), .declineRedirect, "not asked about one too many")
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(302), reactor: nil)), .none)
        XCTAssertEqual(Step(m.transportCompleted(error: nil, reactor: nil)), .fail(String(describing: URLError(.httpTooManyRedirects))))
        XCTAssertTrue(m.isCompleted)
    }

    func testAChallengeCollectsTheBodyThenAsksAndResendsWithTheCredential() {
        var m = Self.sending()
        XCTAssertEqual(Step(m.transportReceived(response: Self.response(401), reactor: nil, challenge: true)), .none)
        XCTAssertEqual(Step(m.transportReceived(data: Data("denied".utf8))), .none)
        XCTAssertEqual(Step(m.transportCompleted(error: nil, reactor: nil)), .consultChallenge(status: 401))
        XCTAssertEqual(Step(m.challengeAnswered(.resend(Self.elsewhere))), .checkGates)
        XCTAssertEqual(m.attempt, 2)
        XCTAssertEqual(m.task.request.url, Self.elsewhere.url, "the credential's request goes through the pipeline")
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

    // MARK: What each state carries

    /// Attempt 2 on the network, after a requeue without the interceptors.
    static func sendingAgain() -> Machine {
        var m = reacting()
        _ = m.reactionFinished(reactor: 0, result: .requeue(reintercept: false))
        XCTAssertEqual(Step(m.connectionGranted()), .send(attempt: 2))
        return m
    }

    func testATransferRecordedLateIsStoppedOnlyIfItsTaskEndedWhileItWasCreated() {
        var cancelled = Self.sending()
        XCTAssertEqual(Step(cancelled.cancel()), .cancelTransport)
        XCTAssertEqual(Step(cancelled.transferStarted(Transfer(), attempt: 1)), .cancelTransport, "ended while it was created")

        var aborted = Self.sendingAgain()
        _ = aborted.abort(Boom())
        XCTAssertEqual(Step(aborted.transferStarted(Transfer(), attempt: 1)), .none, "an older attempt's ended on its own")
        XCTAssertEqual(Step(aborted.transferStarted(Transfer(), attempt: 2)), .cancelTransport, "the current attempt's is stopped")

        var endedOnItsOwn = Self.sending()
        _ = endedOnItsOwn.cancel()
        XCTAssertEqual(Step(endedOnItsOwn.transportCompleted(error: URLError(.cancelled), reactor: nil)), .none)
        XCTAssertEqual(
            Step(endedOnItsOwn.transferStarted(Transfer(), attempt: 1)), .none, "it ended on its own after the cancel: not stopped")

        var finished = Self.sendingAgain()
        _ = finished.transportReceived(response: Self.response(200), reactor: nil)
        _ = finished.transportCompleted(error: nil, reactor: nil)
        XCTAssertEqual(Step(finished.transferStarted(Transfer(), attempt: 2)), .none, "it ended on its own")
        XCTAssertEqual(Step(finished.transferStarted(Transfer(), attempt: 1)), .none, "an older attempt's ended before the task moved on")

        var recorded = Self.sending()
        XCTAssertEqual(Step(recorded.transferStarted(Transfer(), attempt: 1)), .none)
        _ = recorded.cancel()
        XCTAssertEqual(Step(recorded.transferStarted(Transfer(), attempt: 1)), .none, "a recorded transfer was stopped by the cancel")
    }

    func testTheTransferStoppedIsTheCurrentAttemptsNeverAnOlderOnes() {
        let first = Transfer()
        let second = Transfer()
        var m = Self.sending()
        _ = m.transferStarted(first, attempt: 1)
        _ = m.transportReceived(response: Self.response(401), reactor: 0)
        _ = m.transportCompleted(error: nil, reactor: 0)
        _ = m.reactionFinished(reactor: 0, result: .requeue(reintercept: false))
        _ = m.connectionGranted()
        XCTAssertEqual(Step(m.transferStarted(first, attempt: 1)), .none, "attempt 1's, recorded late, is not attempt 2's")
        var unrecorded = m
        guard case .stopTransfer(nil) = unrecorded.cancel() else { return XCTFail("attempt 2's inner task is not recorded yet") }
        _ = m.transferStarted(second, attempt: 2)
        _ = m.transportReceived(response: Self.response(200), reactor: nil)
        guard case .stopTransfer(let stopped?) = m.cancel() else { return XCTFail("the transfer is stopped") }
        XCTAssertTrue(stopped === second, "the transfer stopped is attempt 2's, in whatever phase")
    }

    func testTheWorkCancelledIsTheOneRunningNowNeverAFinishedInterceptors() {
        let work = Task<Void, Never> {}
        var m = Self.intercepting(0)
        XCTAssertEqual(Step(m.workStarted(work)), .none)
        var running = m
        guard case .abandon(let abandoned?) = running.cancel() else { return XCTFail("the interceptor's work is cancelled") }
        XCTAssertEqual(abandoned, work)
        _ = m.interceptorReturned(index: 0, command: .execute, interceptor: .named("I"))
        var next = m
        guard case .abandon(nil) = next.cancel() else { return XCTFail("interceptor 0 has returned: nothing of it to cancel") }
        guard case .fail(_, nil, nil, nil) = m.abort(Boom()) else { return XCTFail("nothing of interceptor 0 to cancel") }

        let reaction = Task<Void, Never> {}
        var reacting = Self.collecting()
        guard case .react(_, _, _, _, _, let timer?) = reacting.transportCompleted(error: nil, reactor: 0) else {
            return XCTFail("the wait for the reaction has a timer")
        }
        XCTAssertEqual(Step(reacting.workStarted(reaction)), .none)
        let generation = timer.generation
        guard case .fail(_, nil, let cancelled?, nil) = reacting.waitExpired(generation: generation, error: Boom()) else {
            return XCTFail("the reaction's work is cancelled")
        }
        XCTAssertEqual(cancelled, reaction)
        var requeued = Self.reacting()
        _ = requeued.workStarted(reaction)
        _ = requeued.reactionFinished(reactor: 0, result: .requeue(reintercept: false))
        guard case .fail(_, nil, nil, nil) = requeued.fail(Boom()) else { return XCTFail("the reaction has ended: nothing to cancel") }
    }

    func testCancellingDuringARedirectOrAChallengeEndsOnce() {
        var redirecting = Self.sending()
        _ = redirecting.redirectReceived(tooMany: URLError(.httpTooManyRedirects))
        redirecting.redirectAnswered(Self.elsewhere)
        XCTAssertEqual(Step(redirecting.cancel()), .cancelTransport)
        XCTAssertEqual(Step(redirecting.transportCompleted(error: nil, reactor: nil)), .none)

        var consulting = Self.sending()
        _ = consulting.transportReceived(response: Self.response(401), reactor: nil, challenge: true)
        _ = consulting.transportCompleted(error: nil, reactor: nil)
        XCTAssertEqual(Step(consulting.cancel()), .abandon, "the transfer has ended: nothing to stop")
        XCTAssertEqual(Step(consulting.challengeAnswered(.resend(Self.elsewhere))), .none, "an answer after the cancel is ignored")
    }
}

extension TaskStateMachine {
    /// A machine for a GET of ``TaskStateMachineTests/url``.
    init(
        interceptorCount: Int, skipping: Set<Int> = [], reactors: [ReactorTraits] = [], validation: ResponseValidation? = nil,
        heldBodyLimit: Int = URLTaskManager.Options.defaultMaximumHeldBodySize
    ) {
        self.init(
            task: URLTask(request: URLRequest(url: TaskStateMachineTests.url)), interceptorCount: interceptorCount, skipping: skipping,
            reactors: reactors, validation: validation, heldBodyLimit: heldBodyLimit)
    }

    /// The interceptor returned `command` without changing the task, its batch never flushed.
    mutating func interceptorReturned(index: Int, command: InterceptCommand, interceptor: URLTaskError.Component) -> ProceedAction {
        var snapshot = task
        snapshot.request.setValue("1", forHTTPHeaderField: "X-Set")
        return interceptorReturned(index: index, command: command, snapshot: snapshot, flushes: 0, interceptor: interceptor)
    }

    /// Admission gates the task, then the gate opens.
    func gateOpenedAfterAdmissionGated() -> ProceedAction {
        var copy = self
        _ = copy.admissionGated(reactor: 0)
        return copy.gateOpened()
    }
}
