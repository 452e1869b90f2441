import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
@testable import URLTaskManager

/// Drives the real machines of one manager, ``AdmissionStateMachine`` (reactor runs, gates,
/// credential stamps, per-host slots) and one ``TaskStateMachine`` per task, through random
/// interleavings, performing each action the way `TaskRun` and `AdmissionStorage` do.
///
/// Each lock-protected step is one schedulable item; the steps one thread performs in a row
/// stay in order (an item may carry its thread's next steps), while steps of different
/// threads interleave in any order. Several reactors, exemptions, resources that refuse every
/// token, runs that fail, cancels and slot timeouts are all drawn from the seed, which every
/// failure prints.
final class PipelineModelTests: XCTestCase {
    struct Boom: Error {}

    struct ReactorSpec {
        var holdsNewTasks = true
        var requeue = true
        var reintercept = true
        var maximumReactions = 2
        var loopGuard: URLTaskReactorConfiguration.LoopGuard?
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
    }

    enum Response: CustomStringConvertible {
        case ok, unauthorized, transportError
        var description: String { self == .ok ? "200" : self == .unauthorized ? "401" : "error" }
    }

    /// One step; `then` are the steps the same thread performs next, in order.
    indirect enum Item: CustomStringConvertible {
        case start(Int)
        case cancel(Int)
        /// The manager ends the task wherever it is (a sign-out: `failTasks`).
        case abort(Int)
        /// The task waited inside the pipeline past its request's timeout.
        case waitTimedOut(Int)
        case decide(Int)
        case waitAtGate(Int, reactor: Int)
        case openGate(Int)
        case interceptorReturns(Int, index: Int)
        case admit(Int)
        case admitted(Int, AdmissionStateMachine.SendAction)
        case admissionGated(Int, reactor: Int)
        case transfer(Int)
        case head(Int, Response)
        case complete(Int, Response)
        case transferEnded(Int)
        case need(Int, reactor: Int)
        case runEnds(reactor: Int, run: Int)
        case reactionFinished(Int, reactor: Int, ReactorStorage.Outcome)
        case failUnsent(Int)
        case slotTimeout(Int, generation: Int)
        case finished(Int)
        case then(Item, [Item])

        var description: String {
            switch self {
            case .start(let t): "start(\(t))"
            case .cancel(let t): "cancel(\(t))"
            case .abort(let t): "abort(\(t))"
            case .waitTimedOut(let t): "waitTimedOut(\(t))"
            case .decide(let t): "decide(\(t))"
            case .waitAtGate(let t, let r): "waitAtGate(\(t), r\(r))"
            case .openGate(let t): "openGate(\(t))"
            case .interceptorReturns(let t, let i): "interceptorReturns(\(t), \(i))"
            case .admit(let t): "admit(\(t))"
            case .admitted(let t, let a): "admitted(\(t), \(a))"
            case .admissionGated(let t, let r): "admissionGated(\(t), r\(r))"
            case .transfer(let t): "transfer(\(t))"
            case .head(let t, let r): "head(\(t), \(r))"
            case .complete(let t, let r): "complete(\(t), \(r))"
            case .transferEnded(let t): "transferEnded(\(t))"
            case .need(let t, let r): "need(\(t), r\(r))"
            case .runEnds(let r, let run): "runEnds(r\(r), run \(run))"
            case .reactionFinished(let t, let r, let o): "reactionFinished(\(t), r\(r), \(o))"
            case .failUnsent(let t): "failUnsent(\(t))"
            case .slotTimeout(let t, let g): "slotTimeout(\(t), \(g))"
            case .finished(let t): "finished(\(t))"
            case .then(let first, let rest): ([first] + rest).map(\.description).joined(separator: " ; ")
            }
        }
    }

    struct Model {
        let scenario: Scenario
        var rng: SplitMix64
        var machines: [TaskStateMachine]
        var admission: AdmissionStateMachine
        var exempt: [[Bool]]
        var persistent: [Bool]
        var completions: [Int]
        /// Covered tasks admitted with a slot and not yet given it back.
        var holding: Set<Int> = []
        var runsStartedBy: [[Int]]
        var pending: [Item] = []
        var clock = ContinuousClock.now
        var trace: [String] = []
        var violations: [String] = []

        init(scenario: Scenario, seed: UInt64) {
            self.scenario = scenario
            rng = SplitMix64(state: seed)
            let traits = scenario.reactors.enumerated().map { index, spec in
                TaskStateMachine.ReactorTraits(
                    component: .reactorNamed("R\(index)"), maximumReactions: spec.maximumReactions, delivers: !spec.requeue)
            }
            machines = (0..<scenario.tasks).map { _ in TaskStateMachine(interceptorCount: scenario.interceptors, reactors: traits) }
            admission = AdmissionStateMachine(
                reactors: scenario.reactors.map { ($0.loopGuard, $0.holdsNewTasks) },
                slotsPerHost: scenario.connectionLimit
            )
            exempt = []
            persistent = []
            completions = Array(repeating: 0, count: scenario.tasks)
            runsStartedBy = Array(repeating: Array(repeating: 0, count: scenario.reactors.count), count: scenario.tasks)
            for task in 0..<scenario.tasks {
                exempt.append(scenario.reactors.indices.map { _ in Int.random(in: 0..<10, using: &rng) < scenario.exemptTenths })
                persistent.append(Int.random(in: 0..<10, using: &rng) < scenario.persistentTenths)
                admission.register(Self.id(task), exemptedBy: exempt[task])
                pending.append(.start(task))
                if Int.random(in: 0..<10, using: &rng) < 2 { pending.append(.cancel(task)) }
                if Int.random(in: 0..<20, using: &rng) == 0 { pending.append(.abort(task)) }
                if Int.random(in: 0..<20, using: &rng) == 0 { pending.append(.waitTimedOut(task)) }
            }
        }

        static func id(_ task: Int) -> URLTask.ID { URLTask.ID(rawValue: UInt64(task)) }

        mutating func violate(_ message: String) { violations.append(message) }

        /// Runs until nothing is pending; returns false if a step limit was hit.
        mutating func run(stepLimit: Int = 20_000) -> Bool {
            var steps = 0
            while !pending.isEmpty, violations.isEmpty {
                steps += 1
                if steps > stepLimit { return false }
                let item = pending.remove(at: Int.random(in: 0..<pending.count, using: &rng))
                switch item {
                case .then(let first, let rest):
                    trace.append(first.description)
                    step(first)
                    if let next = rest.first { pending.append(rest.count == 1 ? next : .then(next, Array(rest.dropFirst()))) }
                default:
                    trace.append(item.description)
                    step(item)
                }
                clock = clock.advanced(by: .milliseconds(1))
            }
            return true
        }

        /// The checks that hold once nothing can happen any more.
        mutating func checkQuiescence() {
            for task in 0..<scenario.tasks where completions[task] != 1 {
                violate("task \(task) completed \(completions[task]) times; nothing is left that could complete it")
            }
            if admission.reactors.contains(where: \.isRunning) { violate("a run is still going at the end") }
            if admission.busyHosts != 0 || !holding.isEmpty { violate("a connection slot was never given back") }
            if admission.taskCount != 0 { violate("admission still knows \(admission.taskCount) tasks") }
        }

        /// Checks a decision to let task `t` go, made under admission's lock.
        mutating func checkAdmitted(_ t: Int) {
            for reactor in scenario.reactors.indices where admission.covers(Self.id(t), reactor: reactor) {
                let stamp = admission.stamp(of: Self.id(t), reactor: reactor)?.version ?? -1
                if stamp < admission.reactors[reactor].version {
                    violate("task \(t) let go with headers from before run version \(admission.reactors[reactor].version) of r\(reactor)")
                }
            }
            if scenario.reactors.indices.contains(where: { admission.covers(Self.id(t), reactor: $0) }),
                let limit = scenario.connectionLimit
            {
                holding.insert(t)
                if holding.count > limit { violate("\(holding.count) requests in flight, limit \(limit)") }
            }
        }

        mutating func checkJudgedOnlyByCovering(_ t: Int, reactor: Int, _ what: String) {
            if exempt[t][reactor] { violate("task \(t) \(what) by r\(reactor), which exempts it") }
        }

        mutating func step(_ item: Item) {
            let id = Self.id
            switch item {
            case .start(let t):
                perform(t, machines[t].start())
            case .cancel(let t):
                perform(t, machines[t].cancel())
            case .abort(let t):
                perform(t, machines[t].abort(Boom()))
            case .waitTimedOut(let t):
                perform(t, machines[t].waitTimedOut(Boom()))
            case .decide(let t):
                switch admission.headersWillBeDecided(id(t)) {
                case .waitAtGate(let reactor):
                    checkJudgedOnlyByCovering(t, reactor: reactor, "gated")
                    pending.append(.waitAtGate(t, reactor: reactor))
                case .proceed:
                    pending.append(.openGate(t))
                }
            case .waitAtGate(let t, let reactor):
                perform(t, machines[t].waitingAtGate(reactor: reactor))
            case .openGate(let t):
                perform(t, machines[t].gateOpened())
            case .interceptorReturns(let t, let index):
                perform(t, machines[t].interceptorReturned(index: index, command: .execute, interceptor: .named("I")))
            case .admit(let t):
                let action = admission.wantsToSend(id(t), host: "h", restamp: machines[t].needsRestamp)
                if action == .send { checkAdmitted(t) }
                pending.append(.admitted(t, action))
            case .admitted(let t, let decision):
                switch decision {
                case .send:
                    if case .send = machines[t].connectionGranted() {
                        pending.append(.transfer(t))
                    } else {
                        pending.append(.transferEnded(t))
                    }
                case .waitForSlot(let generation):
                    if Int.random(in: 0..<10, using: &rng) < 2 { pending.append(.slotTimeout(t, generation: generation)) }
                case .waitAtGate(let reactor):
                    checkJudgedOnlyByCovering(t, reactor: reactor, "gated at admission")
                    pending.append(.then(.admissionGated(t, reactor: reactor), [.decide(t)]))
                case .reintercept:
                    perform(t, machines[t].headersStale())
                case .fail(let reactor):
                    checkJudgedOnlyByCovering(t, reactor: reactor, "failed")
                    pending.append(.failUnsent(t))
                }
            case .admissionGated(let t, let reactor):
                perform(t, machines[t].admissionGated(reactor: reactor))
            case .transfer(let t):
                let response: Response = persistent[t] ? .unauthorized : [.ok, .unauthorized, .transportError].randomElement(using: &rng)!
                pending.append(response == .transportError ? .complete(t, response) : .head(t, response))
            case .head(let t, let response):
                let status = response == .ok ? 200 : 401
                let http = HTTPURLResponse(
                    url: URL(string: "http://127.0.0.1/")!, statusCode: status, httpVersion: "HTTP/1.1", headerFields: nil)!
                // TaskRun.chooseReactor: the first reactor that does not exempt the task wants a 401.
                let reactor = status == 401 ? scenario.reactors.indices.first { !exempt[t][$0] } : nil
                perform(t, machines[t].transportReceived(response: http, reactor: reactor))
                pending.append(.complete(t, response))
            case .complete(let t, let response):
                let action = machines[t].transportCompleted(error: response == .transportError ? URLError(.timedOut) : nil, reactor: nil)
                // TaskRun.transportDidComplete: a reaction starts (or joins) before the slot is given back.
                if case .react(let reactor, _, _) = action {
                    pending.append(.need(t, reactor: reactor))
                } else {
                    pending.append(.transferEnded(t))
                    perform(t, action)
                }
            case .transferEnded(let t):
                holding.remove(t)
                handOver(admission.transferEnded(id(t)))
            case .need(let t, let reactor):
                // TaskRun.react: the run starts (or is joined) and the slot is handed over in one
                // transition; an outcome decided at once is delivered after.
                checkJudgedOnlyByCovering(t, reactor: reactor, "reacted to")
                var immediate: ReactorStorage.Outcome?
                let (need, handedOver) = admission.transferEndedNeedingReaction(
                    id(t), reactor: reactor, alreadyRequeued: machines[t].wasRequeued(by: reactor), now: clock)
                holding.remove(t)
                handOver(handedOver)
                switch need {
                case .startRun(let run):
                    runsStartedBy[t][reactor] += 1
                    if runsStartedBy[t][reactor] > 1 { violate("task \(t) started \(runsStartedBy[t][reactor]) runs of r\(reactor)") }
                    pending.append(.runEnds(reactor: reactor, run: run))
                case .wait:
                    break
                case .requeueNow:
                    immediate = .succeeded
                case .failNow, .refuseLoop:
                    immediate = .failed(Boom())
                case .deliverNow:
                    immediate = .declined
                }
                if let immediate { pending.append(.reactionFinished(t, reactor: reactor, immediate)) }
            case .runEnds(let reactor, let run):
                let succeeded = Int.random(in: 0..<10, using: &rng) >= scenario.failureTenths
                guard let end = admission.runFinished(reactor: reactor, run: run, succeeded: succeeded) else {
                    return violate("run \(run) of r\(reactor) ended but admission did not know it")
                }
                for waiter in end.waiters.map({ Int($0.rawValue) }) {
                    pending.append(.reactionFinished(waiter, reactor: reactor, succeeded ? .succeeded : .failed(Boom())))
                }
                for gated in end.gated.map({ Int($0.rawValue) }) {
                    pending.append(succeeded ? .decide(gated) : .failUnsent(gated))
                }
            case .reactionFinished(let t, let reactor, let outcome):
                let spec = scenario.reactors[reactor]
                let result: TaskStateMachine.ReactionResult
                switch outcome {
                case .succeeded: result = spec.requeue ? .requeue(reintercept: spec.reintercept) : .deliver
                case .failed(let error): result = .fail(error)
                case .declined: result = .deliver
                }
                perform(t, machines[t].reactionFinished(reactor: reactor, result: result))
            case .failUnsent(let t):
                perform(t, machines[t].fail(Boom()))
            case .slotTimeout(let t, let generation):
                if admission.slotWaitExpired(id(t), generation: generation) { pending.append(.failUnsent(t)) }
            case .finished(let t):
                holding.remove(t)
                handOver(admission.finished(id(t)))
            case .then:
                preconditionFailure("unwrapped by run()")
            }
        }

        /// `AdmissionStorage.tell`: each task decided on another's event hears of it on its own thread.
        mutating func handOver(_ decided: [(URLTask.ID, AdmissionStateMachine.SendAction)]) {
            for (next, action) in decided {
                let n = Int(next.rawValue)
                if action == .send { checkAdmitted(n) }
                pending.append(.admitted(n, action))
            }
        }

        /// What `TaskRun.perform` does with each action.
        mutating func perform(_ t: Int, _ action: TaskStateMachine.Action) {
            switch action {
            case .none, .forwardResponse, .forwardData:
                break
            case .checkGates:
                pending.append(.decide(t))
            case .runInterceptor(let index):
                pending.append(.interceptorReturns(t, index: index))
            case .acquireConnection:
                pending.append(.admit(t))
            case .send:
                pending.append(.transfer(t))
            case .react(let reactor, _, _):
                pending.append(.need(t, reactor: reactor))
            case .finish, .respond, .fail, .cancelTransport, .abandon, .abortTransfer, .leaveConnectionQueue, .leaveReactor:
                completions[t] += 1
                if completions[t] > 1 { violate("task \(t) completed twice") }
                pending.append(.finished(t))
            case .hold, .releaseBatch, .leaveBatch:
                violate("task \(t): no interceptor in this model holds")
            case .consultRedirect, .consultChallenge, .restart:
                violate("task \(t): no redirect or challenge in this model")
            }
        }
    }

    /// Runs `seeds` interleavings of `scenario`; returns the first failure's description.
    func explore(_ scenario: Scenario, seeds: Range<UInt64>) -> String? {
        for seed in seeds {
            var model = Model(scenario: scenario, seed: seed)
            if !model.run() { return "seed \(seed): did not settle" }
            if model.violations.isEmpty { model.checkQuiescence() }
            if let violation = model.violations.first {
                return "seed \(seed): \(violation)\n  trace: \(model.trace.suffix(50).joined(separator: " → "))"
            }
        }
        return nil
    }

    /// Seeds per scenario: 2,000 by default (12,000 in all), `MODEL_SEEDS` to explore more.
    static let seedsPerScenario = UInt64(ProcessInfo.processInfo.environment["MODEL_SEEDS"] ?? "") ?? 2_000

    func testRandomInterleavingsKeepEveryAdmissionInvariant() {
        let refresh = ReactorSpec()
        let scenarios: [(String, Scenario)] = [
            ("one refreshing reactor", Scenario(tasks: 5, interceptors: 1, reactors: [refresh])),
            (
                "two backends, each exempting the other's tasks",
                Scenario(tasks: 6, interceptors: 1, reactors: [refresh, refresh], exemptTenths: 5)
            ),
            (
                "resend without the interceptors",
                Scenario(tasks: 5, interceptors: 0, reactors: [ReactorSpec(reintercept: false, maximumReactions: 3)])
            ),
            (
                "a holding reactor and a delivering one",
                Scenario(tasks: 5, interceptors: 2, reactors: [refresh, ReactorSpec(holdsNewTasks: false, requeue: false)])
            ),
            (
                "one connection per host, loop guard",
                Scenario(
                    tasks: 5, interceptors: 1,
                    reactors: [ReactorSpec(maximumReactions: 3, loopGuard: .init(maximumRuns: 2, window: .seconds(10)))],
                    connectionLimit: 1)
            ),
            (
                "no slots, every resource refuses",
                Scenario(tasks: 4, interceptors: 1, reactors: [refresh, refresh], connectionLimit: nil, persistentTenths: 10)
            ),
        ]
        print("PipelineModelTests: \(Self.seedsPerScenario) seeds × \(scenarios.count) scenarios")
        for (name, scenario) in scenarios {
            if let failure = explore(scenario, seeds: 0..<Self.seedsPerScenario) {
                XCTFail("\(name): \(failure)")
            }
        }
    }
}
