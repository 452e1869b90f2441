import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
@testable import URLTaskManager
@testable import URLTaskResilience
import TestSupport

/// Drives the real storages of one pipeline through random interleavings: ``TaskRun`` with
/// its ``TaskStateMachine`` for each task, ``EngineStorage`` (reactor runs, gates, credential
/// stamps, per-host slots) and one ``BatchStorage`` per interceptor. Only the I/O is simulated
/// (``SimulatedPipeline``): the interceptors' and reactors' code, the transport, the caller's
/// delegate, threads and timers.
///
/// Every hop to another thread, every transport callback, every interceptor's or reactor's
/// answer and every timer is one schedulable item; the seed draws which runs next. A timer fires
/// early at random, or when nothing else can happen (time passes). Redirects, authentication
/// challenges, holds, releases and flushes, several reactors with exemptions, resources that
/// refuse every token, runs that fail, cancels, aborts and wait timeouts are all drawn from the
/// seed, which every failure prints (a crash prints it too, see ``CrashReport``).
final class PipelineModelTests: XCTestCase {
    struct Boom: Error {}

    struct ReactorSpec {
        /// A refresh without a loop guard unless said otherwise.
        var mode: URLTaskReactorConfiguration.Mode = .refresh(loopGuard: nil)
        var maximumReactions = 2
        /// Whether it also takes transport errors (a retry).
        var takesTransportErrors = false
    }

    struct Scenario {
        var tasks: Int
        var interceptors: Int
        var reactors: [ReactorSpec]
        /// Requests per host at once for covered tasks; `nil`: unlimited.
        var connectionLimit: Int? = 2
        /// Chance (in 10) that a task is exempted by a given reactor.
        var exemptTenths = 3
        /// Chance (in 10) that a task's resource refuses every token.
        var persistentTenths = 2
        /// Chance (in 10) that a run fails.
        var failureTenths = 4
        /// Chance (in 10) that the caller cancels a task.
        var cancelTenths = 2
        /// Whether the first interceptor batches (holds, releases; flushes happen).
        var batching = false
        /// Whether transfers meet redirects.
        var redirects = false
        /// Whether the caller's side answers authentication challenges.
        var challenges = false
        /// Whether the caller accepts only 2xx answers (``ResponseValidation``).
        var validation = false
        /// Whether identical requests share transfers (the real ``SharedTransfers``): every task
        /// asks for the same URL, and tasks on the same attempt send the same headers.
        var sharing = false
        /// Whether the manager has an outcome observer (the real ``OutcomeObservers``, on a FIFO
        /// the seed interleaves with everything else as a serial queue would).
        var observes = false
    }

    // MARK: The simulated world

    /// One schedulable step.
    struct Item {
        var label: String
        var work: () -> Void
    }

    /// What one task's caller saw.
    struct CallerView {
        var responses = 0
        var chunks = 0
        var terminals = 0
        var cancelled = false
        /// The task came through the manager's own methods (``Call``): its caller is answered
        /// even when it cancels (`URLError.cancelled`), so it must complete exactly once.
        var throughMethods = false
        var ended = 0
        var challengesAnswered = 0
        /// Final response heads the transport delivered to the task, and those observed.
        var headsDelivered = 0
        var headsObserved = 0
        var violations: [String] = []
    }

    /// The I/O around the real storages, and the scheduler of the model. The model runs every
    /// item on the test's thread; the lock keeps the state it shares with the storages' calls
    /// consistent all the same (and is never held while a storage runs).
    // @unchecked Sendable: mutable state is guarded by `lock`.
    final class SimulatedPipeline: TaskEnvironment, PipelineRuntime, SharedTransferStarter, @unchecked Sendable {
        let scenario: Scenario
        private let lock = NSLock()
        private var rng: SplitMix64
        private var pending: [Item] = []
        private var timers: [Item] = []
        private var trace: [String] = []
        private var callers: [CallerView]
        private var persistent: [Bool]
        /// Per task and reactor: runs of single-flight reactors it started.
        private var runsStarted: [[Int]]
        private var violations: [String] = []

        let interceptorComponents: [URLTaskError.Component]
        let interceptorTypes: [URLTaskPolicy.ComponentType]
        let reactors: [ReactorRunner]
        let options: URLTaskManager.Options
        let additionalHeaders = SimulatedPipeline.noHeaders
        let events = EventHub<URLTaskEvent>()
        var engine: EngineStorage { engineStorage! }
        var batches: [BatchStorage] { batchStorages }
        let credentialStorage: URLCredentialStorage? = nil
        let abandonsTransfers = false
        var runtime: any PipelineRuntime { self }
        private var engineStorage: EngineStorage?
        private var batchStorages: [BatchStorage] = []

        static let noHeaders = AdditionalHeaders.split(URLSessionConfiguration.ephemeral).0
        /// The real sharing of transfers, in a scenario that shares; `X-Model-Task` never tells
        /// requests apart, and a small late-join limit makes some answers stop being replayed.
        private(set) var sharing: SharedTransfers?

        init(scenario: Scenario, seed: UInt64) {
            self.scenario = scenario
            var rng = SplitMix64(state: seed)
            interceptorComponents = (0..<scenario.interceptors).map { .init(kind: .interceptor, index: $0, name: "I\($0)") }
            interceptorTypes = interceptorComponents.map { _ in URLTaskPolicy.ComponentType(SimulatedPipeline.self) }
            options = URLTaskManager.Options(responseValidation: scenario.validation ? .successfulStatusCodes : nil)
            callers = Array(repeating: CallerView(), count: scenario.tasks)
            runsStarted = Array(repeating: Array(repeating: 0, count: scenario.reactors.count), count: scenario.tasks)
            var exemptions: [[Bool]] = []
            var persistent: [Bool] = []
            for _ in 0..<scenario.tasks {
                var row: [Bool] = []
                for _ in scenario.reactors.indices { row.append(Int.random(in: 0..<10, using: &rng) < scenario.exemptTenths) }
                exemptions.append(row)
                persistent.append(Int.random(in: 0..<10, using: &rng) < scenario.persistentTenths)
            }
            self.rng = rng
            self.persistent = persistent
            reactors = scenario.reactors.enumerated().map { index, spec in
                ReactorRunner(
                    reactor: ModelReactor(index: index, spec: spec, exempt: exemptions.map { $0[index] }),
                    component: .init(kind: .reactor, index: index, name: "R\(index)"))
            }
            engineStorage = EngineStorage(reactors: reactors, slotsPerHost: scenario.connectionLimit, runtime: self)
            sharing =
                scenario.sharing
                ? SharedTransfers(
                    configuration: .init(headersThatNeverIdentifyACaller: ["x-model-task"], lateJoinLimit: 8),
                    cookies: CookieJar(.ephemeral), runtime: self, decisions: DecisionEvents<CoalescingInterceptor.Event>())
                : nil
            batchStorages = (0..<scenario.interceptors).map { BatchStorage(interceptorIndex: $0, runtime: self) }
            if scenario.observes {
                outcomeObservers = OutcomeObservers(parts: [ModelObserver(world: self)]) { [unowned self] work in
                    lock.withLock { observerQueue.append(work) }
                    schedule("observer queue") { [unowned self] in
                        let oldest = lock.withLock { observerQueue.removeFirst() }
                        oldest()
                    }
                }
            }
        }

        /// The transport delivers a final response head to task `t`.
        func headDelivered(_ t: Int) {
            lock.withLock { callers[t].headsDelivered += 1 }
        }

        /// The observer was told of a response head of task `t`.
        func headObserved(_ t: Int) {
            lock.withLock { callers[t].headsObserved += 1 }
        }

        // MARK: Scheduling

        func schedule(_ label: String, _ work: @escaping () -> Void) {
            lock.withLock { pending.append(Item(label: label, work: work)) }
        }

        func draw(_ range: Range<Int>) -> Int {
            lock.withLock { Int.random(in: range, using: &rng) }
        }

        /// Runs until nothing is pending and no timer is left; false if the step limit was hit.
        func run(stepLimit: Int = 50_000) -> Bool {
            var steps = 0
            while true {
                let chosen: (item: Item, rescue: Bool)? = lock.withLock {
                    guard violations.isEmpty else { return nil }
                    if !timers.isEmpty, pending.isEmpty || Int.random(in: 0..<40, using: &rng) == 0 {
                        return (timers.remove(at: Int.random(in: 0..<timers.count, using: &rng)), pending.isEmpty)
                    }
                    guard !pending.isEmpty else { return nil }
                    return (pending.remove(at: Int.random(in: 0..<pending.count, using: &rng)), false)
                }
                guard let (next, rescue) = chosen else { return true }
                if rescue { checkNothingIsLost() }
                steps += 1
                if steps > stepLimit { return false }
                lock.withLock { trace.append(next.label) }
                next.work()
            }
            return true
        }

        // MARK: PipelineRuntime

        private struct ModelTimer: PipelineTimer {
            func cancel() {}
        }

        var now: DispatchTime { .now() }

        func async(_ work: @escaping @Sendable () -> Void) {
            schedule("hop", work)
        }

        /// The model fires timers whenever its seed says, cancelled or not: a storage must find
        /// that the wait a late timer bounds is over.
        @discardableResult
        func at(_ deadline: DispatchTime, _ work: @escaping @Sendable () -> Void) -> any PipelineTimer {
            lock.withLock { timers.append(Item(label: "timer", work: work)) }
            return ModelTimer()
        }

        func react(
            _ reactor: ReactorRunner, to outcome: URLTaskOutcome, body: Data, of task: URLTask,
            finished: @escaping @Sendable (ReactorRunner.Outcome) -> Void
        ) -> Task<Void, Never>? {
            let t = Int(task.id.rawValue)
            if reactor.configuration.mode.isShared {
                let runs: Int = lock.withLock {
                    runsStarted[t][reactor.index] += 1
                    return runsStarted[t][reactor.index]
                }
                if runs > 1 { violate("task \(t) started \(runs) runs of R\(reactor.index)") }
            }
            schedule("R\(reactor.index) work ends (task \(t))") { [self] in
                let succeeded = draw(0..<10) >= scenario.failureTenths
                finished(succeeded ? .succeeded : .failed(URLTaskError.delivered(Boom(), from: reactor.component, code: .reactorFailed)))
            }
            return nil
        }

        // MARK: TaskEnvironment

        /// The model's observer, in a scenario that observes.
        private(set) var outcomeObservers: OutcomeObservers?
        /// The observers' serial queue: each scheduled item runs the oldest work.
        private var observerQueue: [@Sendable () -> Void] = []

        func intercept(
            _ index: Int, _ task: URLTask, decided: @escaping @Sendable (Result<InterceptCommand, any Error>, URLTask, Int) -> Void
        ) -> Task<Void, Never>? {
            let t = Int(task.id.rawValue)
            let answer = { [self] in
                let flushes = batches[index].snapshot.flushes
                var changed = task
                changed.request.setValue("attempt \(task.attempt)", forHTTPHeaderField: "Authorization")
                if scenario.sharing { changed.attemptValues[ShareableTransfer.self] = true }
                let roll = draw(0..<100)
                let command: InterceptCommand
                if scenario.batching, index == 0, roll < 30 {
                    command = roll < 5 ? .hold(for: .seconds(1)) : .hold(for: nil)
                } else if scenario.batching, index == 0, roll < 45 {
                    command = .release
                } else if roll < 47 {
                    return decided(.failure(Boom()), changed, flushes)
                } else if roll < 49 {
                    command = .fail(URLError(.notConnectedToInternet))
                } else if roll < 51 {
                    command = .respond(Self.response(203, t), body: Data("local".utf8))
                } else {
                    command = .execute
                }
                decided(.success(command), changed, flushes)
            }
            // Half decide without suspending (inline, no Swift task), half in a task of their own.
            if draw(0..<2) == 0 {
                answer()
                return nil
            }
            schedule("I\(index) decides (task \(t))", answer)
            return Task {}
        }

        func startTransfer(
            _ request: URLRequest, body: URLTaskBody, callerURL: URL?, events: any TransportEvents, share: TransferShare?,
            delivery: TransferDelivery,
            started: @escaping @Sendable (Result<any TransferHandle, any Error>) -> Void
        ) {
            let t = Int(request.value(forHTTPHeaderField: "X-Model-Task") ?? "") ?? -1
            if scenario.observes, t >= 0 {
                // Sent again after an answer (a reaction, a challenge): only once it was observed.
                let (delivered, observed) = lock.withLock { (callers[t].headsDelivered, callers[t].headsObserved) }
                if delivered != observed { violate("task \(t) sent again with \(delivered) heads delivered, \(observed) observed") }
            }
            if draw(0..<50) == 0 {
                return schedule("transfer refused (task \(t))") { started(.failure(URLTaskError.managerInvalidated)) }
            }
            let start = { [self] (request: URLRequest, events: any TransportEvents) -> any TransferHandle in
                let transfer = SimulatedTransfer(task: t, request: request, events: events, world: self)
                transfer.script(persistent: lock.withLock { persistent[t] })
                transfer.next()
                return transfer
            }
            // The real sharing's own start, as the pipeline calls it.
            let transfer =
                share.flatMap { share in sharing?.start(share, events: events, starter: self, startInner: start) } ?? start(request, events)
            schedule("transfer started (task \(t))") { started(.success(transfer)) }
        }

        func stopTransfer(_ transfer: any TransferHandle) {
            if let subscription = transfer as? TransferSubscription, let sharing {
                for transfer in sharing.stop(subscription) { stopTransfer(transfer) }
                return
            }
            (transfer as! SimulatedTransfer).stop()
        }

        func sendAlone(_ subscription: TransferSubscription) {
            schedule("sent alone (task \(subscription.task))") { [self] in
                subscription.announce(.sendsAlone)
                let t = Int(subscription.request.value(forHTTPHeaderField: "X-Model-Task") ?? "") ?? -1
                let transfer = SimulatedTransfer(task: t, request: subscription.request, events: subscription, world: self)
                transfer.script(persistent: lock.withLock { persistent[t] })
                if !subscription.sentAlone(transfer) { transfer.stop() }
                transfer.next()
            }
        }

        func taskEnded(_ task: TaskRun) {
            lock.withLock { callers[Int(task.id.rawValue)].ended += 1 }
            engine.finished(task)
        }

        // MARK: Checks

        func violate(_ message: String) { lock.withLock { violations.append(message) } }

        /// Nothing is pending, so only a timer can move the world now. Every task the model runs
        /// waits on something scheduled (an interceptor, a transfer, a run, a slot its holder's
        /// transfer frees, the caller's side), except one held in a batch that no flush will
        /// release: a task still running that is not held waits for an event that was lost, and
        /// its request's timeout would hide it (a task at a gate whose run ended, a slot handed
        /// to nobody).
        private func checkNothingIsLost() {
            let running = lock.withLock { callers.filter { $0.ended == 0 }.count }
            let held = batchStorages.reduce(0) { $0 + $1.count }
            if running > held { violate("\(running - held) task(s) wait with nothing but a timeout to wake them: an event was lost") }
        }

        var firstViolation: String? { lock.withLock { violations.first } }

        /// How often each kind of step ran (its label without the task), for the verbose summary.
        func stepCounts() -> [String: Int] {
            lock.withLock {
                Dictionary(
                    trace.map { $0.replacingOccurrences(of: #" ?\(?(task )?\d+\)?"#, with: "", options: .regularExpression) }.map {
                        ($0, 1)
                    }, uniquingKeysWith: +)
            }
        }

        /// The last `count` steps run.
        func lastSteps(_ count: Int) -> String { lock.withLock { trace.suffix(count).joined(separator: " → ") } }

        func markCancelled(_ t: Int) { lock.withLock { callers[t].cancelled = true } }

        func markThroughMethods(_ t: Int) { lock.withLock { callers[t].throughMethods = true } }

        /// Task `t`'s caller cancelled before its call started anything: no pipeline task ends.
        func markNeverStarted(_ t: Int) { lock.withLock { callers[t].ended = 1 } }

        /// Counts a challenge answered for task `t`: how many so far.
        func challengeAnswered(_ t: Int) -> Int {
            lock.withLock {
                callers[t].challengesAnswered += 1
                return callers[t].challengesAnswered
            }
        }

        func caller(_ t: Int, _ event: String) {
            lock.withLock { record(t, event) }
        }

        /// Must be called with `lock` held.
        private func record(_ t: Int, _ event: String) {
            var view = callers[t]
            if view.terminals > 0 { view.violations.append("\(event) after the task completed") }
            switch event {
            case "response":
                if view.responses > 0 { view.violations.append("a second response") }
                view.responses += 1
            case "data":
                if view.responses == 0 { view.violations.append("data before a response") }
                view.chunks += 1
            case "finish":
                if view.responses == 0 { view.violations.append("finished without a response") }
                view.terminals += 1
            default:
                view.terminals += 1
            }
            // A method's caller who cancelled is answered at once, as URLSession answers it: the
            // observers may still be told of the task's outcomes after that.
            let answeredOnCancel = view.throughMethods && view.cancelled && event == "fail"
            if event == "finish" || event == "fail", scenario.observes, !answeredOnCancel, view.headsObserved != view.headsDelivered {
                view.violations.append("ended with \(view.headsDelivered) heads delivered, \(view.headsObserved) observed")
            }
            callers[t] = view
        }

        /// The checks that hold once nothing can happen any more.
        func outcomeCounts() -> [String: Int] {
            lock.withLock {
                var counts: [String: Int] = [:]
                for view in callers {
                    let outcome = view.terminals == 0 ? "cancelled" : view.responses > 0 ? "answered" : "failed"
                    counts["outcome: \(outcome)", default: 0] += 1
                }
                return counts
            }
        }

        func checkQuiescence() {
            for (t, view) in lock.withLock({ callers }).enumerated() {
                for violation in view.violations { violate("task \(t): \(violation)") }
                if view.ended != 1 { violate("task \(t) ended \(view.ended) times") }
                if view.terminals > 1 { violate("task \(t) completed \(view.terminals) times") }
                if view.terminals == 0, !view.cancelled || view.throughMethods {
                    violate(
                        "task \(t) never completed"
                            + (view.cancelled
                                ? " (a method's caller cancelled: it must be answered)" : ", and its caller did not cancel it"))
                }
            }
            if engine.runsGoing != 0 { violate("a run is still going at the end") }
            if engine.busyHosts != 0 { violate("a connection slot was never given back") }
            if engine.waitingForSlot != 0 { violate("a task still waits for a slot") }
            if engine.taskCount != 0 { violate("admission still knows \(engine.taskCount) tasks") }
            for batch in batches where batch.count != 0 { violate("batch \(batch.interceptorIndex) still holds \(batch.count) tasks") }
        }

        static func response(_ status: Int, _ task: Int, headers: [String: String] = [:]) -> HTTPURLResponse {
            HTTPURLResponse(
                url: URL(string: "http://127.0.0.1/t\(task)")!, statusCode: status, httpVersion: "HTTP/1.1", headerFields: headers)!
        }
    }

    /// A reactor of the model: it wants a 401 without a challenge (and transport errors, if
    /// its spec says so); its work is simulated by ``SimulatedPipeline/react(_:to:body:of:finished:)``.
    struct ModelReactor: URLTaskReactor {
        let index: Int
        let spec: ReactorSpec
        let exempt: [Bool]

        var configuration: URLTaskReactorConfiguration {
            let exempt = exempt
            return URLTaskReactorConfiguration(
                mode: spec.mode, maximumReactionsPerTask: spec.maximumReactions,
                exempts: { request in
                    let t = Int(request.value(forHTTPHeaderField: "X-Model-Task") ?? "") ?? 0
                    return exempt[t]
                })
        }

        func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
            switch outcome {
            case .response(let response):
                response.statusCode == 401 && response.value(forHTTPHeaderField: "WWW-Authenticate") == nil
            case .failure:
                spec.takesTransportErrors
            }
        }

        func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
            preconditionFailure("the model simulates the work")
        }
    }

    /// A transfer of the simulated transport: its callbacks, in order, one schedulable item each.
    final class SimulatedTransfer: TransferHandle, @unchecked Sendable {  // guarded by the model's single thread and `lock`.
        enum Event {
            case head(HTTPURLResponse)
            case data
            case complete((any Error)?)
            /// A redirect: the transfer waits for the decision, then delivers the 3xx and ends.
            case redirect
        }

        let task: Int
        let request: URLRequest
        let events: any TransportEvents
        unowned let world: SimulatedPipeline
        private let lock = NSLock()
        private var script: [Event] = []
        private var stopped = false
        private var completed = false
        private var waitingForDecision = false

        init(task: Int, request: URLRequest, events: any TransportEvents, world: SimulatedPipeline) {
            self.task = task
            self.request = request
            self.events = events
            self.world = world
        }

        func script(persistent: Bool) {
            let t = task
            let scenario = world.scenario
            var choices: [() -> [Event]] = [
                { [.head(SimulatedPipeline.response(200, t)), .data, .data, .complete(nil)] },
                { [.head(SimulatedPipeline.response(401, t)), .data, .complete(nil)] },
                { [.complete(URLError(.networkConnectionLost))] },
                { [.head(SimulatedPipeline.response(200, t)), .data, .complete(URLError(.networkConnectionLost))] },
            ]
            if scenario.redirects { choices.append { [.redirect] } }
            if scenario.challenges {
                choices.append {
                    [.head(SimulatedPipeline.response(401, t, headers: ["WWW-Authenticate": "Basic realm=\"m\""])), .data, .complete(nil)]
                }
            }
            if scenario.validation { choices.append { [.head(SimulatedPipeline.response(503, t)), .data, .complete(nil)] } }
            script = persistent ? choices[1]() : choices[world.draw(0..<choices.count)]()
            if world.draw(0..<10) == 0 { script.insert(.head(SimulatedPipeline.response(100, t)), at: 0) }
        }

        /// Schedules the next callback, unless the transfer waits for a redirect decision or ended.
        func next() {
            let go: Bool = lock.withLock { !completed && !waitingForDecision }
            guard go else { return }
            world.schedule("transport event (task \(task))") { [self] in deliver() }
        }

        private func deliver() {
            let event: Event? = lock.withLock {
                if completed { return nil }
                if stopped || script.isEmpty { return .complete(URLError(.cancelled)) }
                return script.removeFirst()
            }
            switch event {
            case nil:
                return
            case .head(let response):
                if world.scenario.observes, response.statusCode != 100 { world.headDelivered(task) }
                if world.scenario.sharing, response.statusCode == 200, world.draw(0..<4) == 0 {
                    // An answer that may not be shared: its listeners send their own requests.
                    events.transportDidReceive(response: SimulatedPipeline.response(200, task, headers: ["Vary": "X-Model-Task"]))
                } else {
                    events.transportDidReceive(response: response)
                }
            case .data:
                events.transportDidReceive(data: Data("chunk".utf8))
            case .complete(let error):
                lock.withLock { completed = true }
                events.transportDidComplete(error: error)
                return
            case .redirect:
                lock.withLock { waitingForDecision = true }
                var target = request
                target.url = URL(string: "http://127.0.0.1/t\(task)/moved")
                events.transportWillRedirect(SimulatedPipeline.response(302, task, headers: ["Location": "/moved"]), to: target) {
                    [self] decision in
                    XCTAssertNil(decision, "the pipeline follows redirects itself")
                    world.schedule("redirect decided (task \(task))") { [self] in
                        lock.withLock {
                            waitingForDecision = false
                            script = [.head(SimulatedPipeline.response(302, task)), .data, .complete(nil)]
                        }
                        next()
                    }
                }
                return
            }
            next()
        }

        /// The pipeline stopped the transfer: it ends with `cancelled` as its next callback.
        func stop() {
            let wake: Bool = lock.withLock {
                guard !completed, !stopped else { return false }
                stopped = true
                if waitingForDecision {
                    waitingForDecision = false
                    return true
                }
                return false
            }
            if wake { next() }
        }
    }

    /// The model's outcome observer: counts the response heads it is told of, per task.
    struct ModelObserver: URLTaskOutcomeObserver {
        unowned let world: SimulatedPipeline

        func observe(_ outcome: URLTaskOutcome, of task: URLTask) {
            if outcome.statusCode != nil { world.headObserved(Int(task.id.rawValue)) }
        }
    }

    /// The caller's side of one task: records what it is told, answers redirects and
    /// challenges as a delegate would, from an item of its own.
    struct ModelSink: TaskSink {
        let task: Int
        unowned let world: SimulatedPipeline

        func receive(response: URLResponse) { world.caller(task, "response") }
        func receive(data: Data) { world.caller(task, "data") }
        func finish() { world.caller(task, "finish") }
        func fail(_ error: any Error) { world.caller(task, "fail") }

        func redirect(_ response: HTTPURLResponse, to request: URLRequest, answer: @escaping @Sendable (URLRequest?) -> Void) {
            world.schedule("caller answers redirect (task \(task))") { [world] in
                answer(world.draw(0..<4) == 0 ? nil : request)
            }
        }

        func challenge(
            _ challenge: URLAuthenticationChallenge,
            answer: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
        ) {
            let t = task
            world.schedule("caller answers challenge (task \(t))") { [world] in
                switch world.challengeAnswered(t) > 2 ? 1 : world.draw(0..<3) {
                case 0: answer(.useCredential, URLCredential(user: "u", password: "p", persistence: .none))
                case 1: answer(.performDefaultHandling, nil)
                default: answer(.cancelAuthenticationChallenge, nil)
                }
            }
        }

        var answersChallenges: Bool { world.scenario.challenges }
        var delivery: TransferDelivery { .streamed }
    }

    /// The caller of a task made through the manager's own methods: records the one answer
    /// its ``Call`` gives.
    struct ModelAnswer: CallAnswer {
        let task: Int
        unowned let world: SimulatedPipeline

        func resume(with result: sending Result<(Data, URLResponse), any Error>) {
            switch result {
            case .success:
                world.caller(task, "response")
                world.caller(task, "finish")
            case .failure:
                world.caller(task, "fail")
            }
        }
    }

    // MARK: Exploring

    /// Builds the tasks of `scenario` and the caller's actions, runs them, and returns the
    /// first violation (or `nil`).
    static func explore(_ scenario: Scenario, seed: UInt64, counts: inout [String: Int]) -> String? {
        let world = SimulatedPipeline(scenario: scenario, seed: seed)
        for t in 0..<scenario.tasks {
            var request = URLRequest(url: URL(string: scenario.sharing ? "http://127.0.0.1/shared" : "http://127.0.0.1/t\(t)")!)
            request.setValue(String(t), forHTTPHeaderField: "X-Model-Task")
            // Through the session (the bridge's sink), or through the manager's own methods: the
            // real call storage and its sink, answered by a recorder, cancelled as a Swift task's
            // cancellation handler cancels it.
            let call = world.draw(0..<2) == 0 ? Call<(Data, URLResponse)>(url: request.url) : nil
            let storage: TaskRun?
            if let call {
                // As `Pipeline.call` runs it: the pipeline task exists only once the caller's
                // continuation is in, and its handle reaches the call after it started.
                storage = nil
                world.markThroughMethods(t)
                world.schedule("call(\(t))") {
                    guard call.attach(ModelAnswer(task: t, world: world)) else { return world.markNeverStarted(t) }
                    let storage = TaskRun(
                        id: URLTask.ID(rawValue: UInt64(t)), request: request, body: .none, sink: DataCallSink(call), environment: world)
                    storage.start()
                    call.started(storage)
                }
            } else {
                let made = TaskRun(
                    id: URLTask.ID(rawValue: UInt64(t)), request: request, body: .none, sink: ModelSink(task: t, world: world),
                    environment: world)
                world.schedule("start(\(t))") { made.start() }
                storage = made
            }
            if world.draw(0..<10) < scenario.cancelTenths {
                world.schedule("cancel(\(t))") {
                    world.markCancelled(t)
                    if let call { call.cancel() } else { storage?.cancel() }
                }
            }
            if world.draw(0..<20) == 0 {
                // As `failTasks` reaches them: every live task of the engine (a method's, once started).
                world.schedule("abort(\(t))") {
                    for (run, _) in world.engine.liveTasks where run.id == URLTask.ID(rawValue: UInt64(t)) { run.abort(with: Boom()) }
                }
            }
        }
        if scenario.batching {
            for _ in 0..<world.draw(0..<3) { world.schedule("flush") { world.batches[0].flush() } }
        }
        CrashReport.seed(seed, scenario: scenario)
        let settled = world.run()
        if !settled { return "seed \(seed): did not settle\n  trace: \(world.lastSteps(40))" }
        if world.firstViolation == nil { world.checkQuiescence() }
        counts.merge(world.stepCounts(), uniquingKeysWith: +)
        counts.merge(world.outcomeCounts(), uniquingKeysWith: +)
        guard let violation = world.firstViolation else { return nil }
        return "seed \(seed): \(violation)\n  trace: \(world.lastSteps(60))"
    }

    /// Seeds per scenario: 1,500 by default (16,500 in all), `MODEL_SEEDS` to explore more,
    /// `MODEL_SEED` to replay one.
    static let seedsPerScenario = UInt64(ProcessInfo.processInfo.environment["MODEL_SEEDS"] ?? "") ?? 1_500

    static let scenarios: [(String, Scenario)] = {
        let refresh = ReactorSpec()
        return [
            ("one refreshing reactor", Scenario(tasks: 5, interceptors: 1, reactors: [refresh])),
            ("one refreshing reactor, observed", Scenario(tasks: 5, interceptors: 1, reactors: [refresh], observes: true)),
            (
                "two backends, each exempting the other's tasks",
                Scenario(tasks: 6, interceptors: 1, reactors: [refresh, refresh], exemptTenths: 5)
            ),
            (
                "resend without the interceptors, a per-task retry of transport errors",
                Scenario(
                    tasks: 5, interceptors: 0,
                    reactors: [
                        ReactorSpec(mode: .singleFlight(loopGuard: nil, afterwards: .sendAgainUnchanged), maximumReactions: 3),
                        ReactorSpec(mode: .perTask(afterwards: .sendAgainUnchanged), takesTransportErrors: true),
                    ])
            ),
            (
                "a holding reactor and a delivering one",
                Scenario(
                    tasks: 5, interceptors: 2,
                    reactors: [refresh, ReactorSpec(mode: .singleFlight(loopGuard: nil, afterwards: .deliverResponse))])
            ),
            (
                "one connection per host, loop guard",
                Scenario(
                    tasks: 5, interceptors: 1,
                    reactors: [ReactorSpec(mode: .refresh(loopGuard: .init(maximumRuns: 2, window: .seconds(10))), maximumReactions: 3)],
                    connectionLimit: 1)
            ),
            (
                // Tasks queue for one slot and are cancelled often: a slot is handed to a task
                // its caller cancelled a moment before, which gives it back to the next in line.
                "a queue for one connection, cancelled often",
                Scenario(tasks: 7, interceptors: 0, reactors: [refresh], connectionLimit: 1, persistentTenths: 1, cancelTenths: 5)
            ),
            (
                "no slots, every resource refuses",
                Scenario(tasks: 4, interceptors: 1, reactors: [refresh, refresh], connectionLimit: nil, persistentTenths: 10)
            ),
            (
                "a batching interceptor, holds, releases and flushes",
                Scenario(tasks: 6, interceptors: 2, reactors: [refresh], batching: true)
            ),
            (
                "redirects, challenges and rejected answers",
                Scenario(
                    tasks: 5, interceptors: 1, reactors: [refresh], redirects: true, challenges: true, validation: true, observes: true)
            ),
            (
                "identical requests sharing transfers, with redirects and rejected answers",
                Scenario(tasks: 6, interceptors: 1, reactors: [refresh], redirects: true, validation: true, sharing: true)
            ),
        ]
    }()

    func testRandomInterleavingsOfTheRealStoragesKeepEveryTaskExactlyOnce() {
        var counts: [String: Int] = [:]
        if let replay = ProcessInfo.processInfo.environment["MODEL_SEED"].flatMap(UInt64.init) {
            for (name, scenario) in Self.scenarios {
                if let failure = Self.explore(scenario, seed: replay, counts: &counts) { XCTFail("\(name): \(failure)") }
            }
            return
        }
        CrashReport.install()
        defer { CrashReport.uninstall() }
        printFigures("PipelineModelTests: \(Self.seedsPerScenario) seeds × \(Self.scenarios.count) scenarios")
        for (name, scenario) in Self.scenarios {
            for seed in 0..<Self.seedsPerScenario {
                if let failure = Self.explore(scenario, seed: seed, counts: &counts) {
                    XCTFail("\(name): \(failure)")
                    break
                }
            }
        }
        if ParityLog.isVerbose {
            for (step, count) in counts.sorted(by: { $0.key < $1.key }) { print("MODEL| \(step): \(count)") }
        }
    }
}

/// Prints the seed being explored if the process dies of a failed precondition (the machines
/// stop the program on an event no interleaving can bring), so that the crash can be replayed
/// with `MODEL_SEED`.
enum CrashReport {
    nonisolated(unsafe) private static var buffer = UnsafeMutablePointer<CChar>.allocate(capacity: 256)
    nonisolated(unsafe) private static var length = 0

    static func seed(_ seed: UInt64, scenario: PipelineModelTests.Scenario) {
        let line = "\nPipelineModelTests crashed exploring seed \(seed) (replay: MODEL_SEED=\(seed))\n"
        let bytes = Array(line.utf8.prefix(255))
        for (index, byte) in bytes.enumerated() { buffer[index] = CChar(bitPattern: byte) }
        length = bytes.count
    }

    nonisolated(unsafe) private static var previous: [Int32: sighandler_t?] = [:]

    /// Until ``uninstall()``, a trap prints the seed, then ends the process as it would have.
    static func install() {
        for signalNumber in [SIGILL, SIGTRAP] {
            previous[signalNumber] = signal(signalNumber) { received in
                _ = write(2, CrashReport.buffer, CrashReport.length)
                signal(received, SIG_DFL)
                raise(received)
            }
        }
    }

    static func uninstall() {
        for (signalNumber, handler) in previous { signal(signalNumber, handler) }
        previous = [:]
    }
}
