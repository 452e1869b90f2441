import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

@testable import URLTaskManager

/// The engine's sections, one event at a time, without I/O: real ``TaskRun``s registered with a
/// real ``EngineStorage``, whose events the tests send through its one funnel
/// (``EngineStorage/withLock(_:)``) and whose returned actions they read instead of performing.
/// What a section decides for other tasks reaches the runtime as work to run once the lock is
/// released; the runtime here only queues it, so each test sees what was decided, and when.
final class EngineTests: XCTestCase {
    // MARK: Handing a slot over

    func testATransfersEndHandsItsSlotToTheTaskWaitingForItInTheSameSection() throws {
        let world = World(slotsPerHost: 1)
        let (first, second) = (world.task(), world.task())
        try world.bringToSend(first.run)
        let host = try world.start(second.run)
        guard case .waitForSlot = world.engine.withLock({ $0.wantsToSend(second.run.ref, host: host, restamp: false, readings: [:]) })
        else { return XCTFail("the only slot is taken: the second task waits") }
        XCTAssertTrue(world.queue.queued.isEmpty, "nothing was decided for another task yet")

        XCTAssertNil(world.engine.withLock { $0.transferStarted(first.run.ref, Handle(), attempt: 1) })
        XCTAssertNotNil(world.engine.withLock { $0.responseHead(first.run.ref, Self.response(200), reactor: nil, challenge: false) })
        let end = world.engine.withLock { $0.transferEnded(first.run.ref, error: nil, choice: nil, reading: nil, now: .now()) }
        guard case .complete(.finish) = end else { return XCTFail("the first task finishes with its transfer, not \(end)") }

        XCTAssertEqual(world.queue.queued.count, 1, "one decision: the slot goes to the task that waited")
        XCTAssertEqual(world.engine.waitingForSlot, 0, "it left the queue in the section that ended the transfer")
        world.queue.runQueued()
        XCTAssertEqual(world.sent, [second.path], "the task that got the slot was sent, once")
    }

    func testAFinishedTaskGivesItsSlotBackAndItsLaterEventsFindNothing() throws {
        let world = World(slotsPerHost: 1)
        let (first, second) = (world.task(), world.task())
        try world.bringToSend(first.run)
        let host = try world.start(second.run)
        _ = world.engine.withLock { $0.wantsToSend(second.run.ref, host: host, restamp: false, readings: [:]) }

        world.engine.finished(first.run)
        XCTAssertEqual(world.queue.queued.count, 1, "its slot was handed over as it left")
        guard case .none = world.engine.withLock({ $0.start(first.run.ref, replayableBody: nil) }) else {
            return XCTFail("an event of a task that left finds nothing")
        }
        XCTAssertNotNil(
            world.engine.withLock { $0.transferStarted(first.run.ref, Handle(), attempt: 1) },
            "a transfer created for a task that left is handed back, to be stopped")
        XCTAssertEqual(world.engine.taskCount, 1, "admission knows only the task still live")
    }

    // MARK: A shared run

    func testARunsEndMovesTheTaskThatWaitedOnItAndTheTaskAtItsGateInOneSection() throws {
        let world = World(slotsPerHost: nil)
        let (first, second) = (world.task(), world.task())
        try world.bringToSend(first.run)
        XCTAssertNil(world.engine.withLock { $0.transferStarted(first.run.ref, Handle(), attempt: 1) })
        XCTAssertNil(
            world.engine.withLock { $0.responseHead(first.run.ref, Self.response(401), reactor: 0, challenge: false) },
            "the reactor takes the 401: the caller never sees it")
        let end = world.engine.withLock { $0.transferEnded(first.run.ref, error: nil, choice: nil, reading: nil, now: .now()) }
        guard case .reactTogether(let reaction, let startRun?, _, nil) = end else {
            return XCTFail("the first 401 starts the reactor's run, not \(end)")
        }
        XCTAssertEqual(reaction.index, 0)
        XCTAssertNotNil(reaction.timer, "the wait for the run counts toward the request's timeout")

        guard case .step(.waitAtGate(reactor: 0)) = world.engine.withLock({ $0.start(second.run.ref, replayableBody: nil) }) else {
            return XCTFail("a task that starts while the run goes waits at its gate")
        }
        XCTAssertEqual(world.engine.runsGoing, 1)

        world.engine.withLock { $0.runFinished(reactor: 0, run: startRun, result: .succeeded) }
        XCTAssertEqual(world.engine.runsGoing, 0)
        XCTAssertEqual(world.queue.queued.count, 2, "one section moved both: the waiter requeued, the gated task let through")
        world.queue.runQueued()
        XCTAssertEqual(Set(world.sent), [first.path, second.path], "both went to the network")
        XCTAssertEqual(world.sent.count, 2, "each once")
    }

    func testALateEndOfARunThatAlreadyEndedDecidesNothing() throws {
        let world = World(slotsPerHost: nil)
        let first = world.task()
        try world.bringToSend(first.run)
        _ = world.engine.withLock { $0.transferStarted(first.run.ref, Handle(), attempt: 1) }
        _ = world.engine.withLock { $0.responseHead(first.run.ref, Self.response(401), reactor: 0, challenge: false) }
        guard
            case .reactTogether(_, let run?, _, _) = world.engine.withLock({
                $0.transferEnded(first.run.ref, error: nil, choice: nil, reading: nil, now: .now())
            })
        else { return XCTFail("the 401 starts a run") }
        world.engine.withLock { $0.runFinished(reactor: 0, run: run, result: .succeeded) }
        XCTAssertEqual(world.queue.queued.count, 1)
        world.engine.withLock { $0.runFinished(reactor: 0, run: run, result: .failed(URLError(.timedOut))) }
        XCTAssertEqual(world.queue.queued.count, 1, "a run ends once")
    }

    // MARK: Helpers

    static func response(_ status: Int) -> HTTPURLResponse {
        HTTPURLResponse(url: URL(string: "http://127.0.0.1:1/r")!, statusCode: status, httpVersion: "HTTP/1.1", headerFields: [:])!
    }

    /// A reactor that holds new tasks while its run goes (a credential's) and takes every 401.
    struct Refresh: URLTaskReactor {
        var configuration: URLTaskReactorConfiguration { .authentication }
        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
            if case .response(let response) = outcome { return response.statusCode == 401 }
            return false
        }
        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {}
    }

    final class Handle: TransferHandle {}

    /// A sink that records nothing: these tests read the engine's actions, not the caller's side.
    struct QuietSink: TaskSink {
        func receive(response: URLResponse) {}
        func receive(data: Data) {}
        func finish() {}
        func fail(_ error: any Error) {}
        func sentBody(totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {}
        func redirect(_ response: HTTPURLResponse, to request: URLRequest, answer: @escaping @Sendable (URLRequest?) -> Void) {
            answer(nil)
        }
        func challenge(
            _ challenge: URLAuthenticationChallenge,
            answer: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
        ) { answer(.rejectProtectionSpace, nil) }
        var answersChallenges: Bool { false }
        var delivery: TransferDelivery { .streamed }
    }

    /// Work queued by the engine's funnel and the runs' I/O, run only when a test says so.
    final class QueuedRuntime: PipelineRuntime, Sendable {
        private let works = LockedState<[@Sendable () -> Void]>([])

        var queued: [@Sendable () -> Void] { works.withLock { $0 } }

        func runQueued() {
            while let next = works.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { next() }
        }

        var now: DispatchTime { .now() }
        func async(_ work: @escaping @Sendable () -> Void) { works.withLock { $0.append(work) } }
        func at(_ deadline: DispatchTime, _ work: @escaping @Sendable () -> Void) -> any PipelineTimer { Timer() }
        func react(
            _ reactor: ReactorRunner, to outcome: URLTaskOutcome, body: Data, of task: URLTask,
            finished: @escaping @Sendable (ReactorRunner.Outcome) -> Void
        ) -> Task<Void, Never>? { nil }

        struct Timer: PipelineTimer { func cancel() {} }
    }

    /// One engine with one refresh reactor, and the I/O its tasks reach: transfers are recorded,
    /// never started.
    final class World: TaskEnvironment, Sendable {
        let queue = QueuedRuntime()
        var runtime: any PipelineRuntime { queue }
        let interceptorComponents: [URLTaskError.Component] = []
        let interceptorTypes: [URLTaskPolicy.ComponentType] = []
        let reactors: [ReactorRunner]
        let options = URLTaskManager.Options()
        let additionalHeaders: AdditionalHeaders? = nil
        let events = EventHub<URLTaskEvent>()
        let engine: EngineStorage
        let batches: [BatchStorage] = []
        let credentialStorage: URLCredentialStorage? = nil
        let abandonsTransfers = false
        let outcomeObservers: OutcomeObservers? = nil
        let sharing: SharedTransfers? = nil
        /// Tasks made so far, and the paths sent.
        private let record = LockedState((made: 0, sentPaths: [String]()))

        init(slotsPerHost: Int?) {
            reactors = [ReactorRunner(reactor: Refresh(), component: .init(kind: .reactor, index: 0, name: "Refresh"))]
            engine = EngineStorage(reactors: reactors, slotsPerHost: slotsPerHost, runtime: queue)
        }

        /// The paths of the requests sent to the network, in order: task `n` asks for `/n`.
        var sent: [String] { record.withLock { $0.sentPaths } }

        /// A new task, for `/n` (`n` counting from 0), registered with the engine.
        func task() -> (run: TaskRun, path: String) {
            let path = record.withLock { record in
                defer { record.made += 1 }
                return "/\(record.made)"
            }
            let request = URLRequest(url: URL(string: "http://127.0.0.1:1\(path)")!)
            return (TaskRun(id: .next(), request: request, body: .none, sink: QuietSink(), environment: self), path)
        }

        /// Starts `run`: without interceptors it goes straight to admission. Returns its slot key.
        func start(_ run: TaskRun) throws -> String {
            guard case .step(.acquireConnection(let request, _, _)) = engine.withLock({ $0.start(run.ref, replayableBody: nil) }) else {
                throw Failure("a task without interceptors goes straight to admission")
            }
            return URLOrigin.slotKey(of: request)
        }

        /// Starts `run` and lets it have a connection: the engine's actions up to its send.
        func bringToSend(_ run: TaskRun) throws {
            let host = try start(run)
            guard case .send = engine.withLock({ $0.wantsToSend(run.ref, host: host, restamp: false, readings: [:]) }) else {
                throw Failure("a free slot lets it go")
            }
        }

        struct Failure: Error, CustomStringConvertible {
            let description: String
            init(_ description: String) { self.description = description }
        }

        func intercept(
            _ index: Int, _ task: URLTask, decided: @escaping @Sendable (Result<InterceptCommand, any Error>, URLTask, Int) -> Void
        ) -> Task<Void, Never>? {
            preconditionFailure("no interceptors")
        }

        func startTransfer(
            _ request: URLRequest, body: URLTaskBody, callerURL: URL?, events: any TransportEvents, share: TransferShare?,
            delivery: TransferDelivery, started: @escaping @Sendable (Result<any TransferHandle, any Error>) -> Void
        ) {
            record.withLock { $0.sentPaths.append(request.url?.path ?? "") }
        }

        func stopTransfer(_ transfer: any TransferHandle) {}
        func taskEnded(_ task: TaskRun) { engine.finished(task) }
    }
}
