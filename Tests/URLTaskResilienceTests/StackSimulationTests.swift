import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
@testable import URLTaskManager
@testable import URLTaskResilience
import TestSupport

/// The recommended stack (`recommendedManager(auth:)` in `Sources/Examples/Resilience.swift`:
/// breaker, limiter at 20/s bursts of 10, offline hold, retry, every default), simulated on a
/// virtual clock against scripted hosts, through hundreds of seeded scripts, each caller's outcome
/// checked against an oracle written from the script alone (issue 38, items 5 and 6).
///
/// The decisions are the real parts' own: the real `CircuitBreaker` (its internal
/// `init(policy:health:now:)` with the virtual clock; its `intercept`, `observe` and `observeEnd`
/// with real `URLTask` values), the real `RetryReactor.shouldReact` and
/// `RetryPolicy.delay(afterAttempt:outcome:now:random:)` (so `RetryAfter`), the real
/// `TokenBucketStateMachine` with `RateLimiter.Policy(rate: 20, burst: 10)`'s values and its pause
/// on a `429`/`503` with `Retry-After`, the real `OfflineHold.shouldReact`, `holdLimit` and
/// `OfflineHoldStateMachine` with the hold policy's probe schedule (0.5 s doubling to 10 s). What
/// this file adds is only the engine's order (``StackSimulation``), kept small and explicit.
///
/// A token refresh is simulated as the engine meets it (issue 50): the server refuses a token
/// past its expiry with `401`, the refresh reactor renews it once while the affected tasks wait,
/// and each task whose headers predate the refresh (its limiter turn given, or still in the line)
/// runs the interceptors again as the same attempt (the real breaker's `intercept`, then the
/// limiter), the real `RateLimiter`'s rule (`pass(of:host:)`) deciding whether that pass takes a
/// turn; the turns are counted per caller, against the attempts it sent. Not
/// simulated: the bearer and the token endpoint themselves (a refresh is one host latency long and
/// always succeeds), and coalescing (the token-outage and 20-identical-GETs rows are checked over
/// real HTTP by the other suites of issue 38).
///
/// A failure prints its family and seed; `MODEL_SEED=<seed> swift test --filter StackSimulation`
/// replays it. Nothing is printed otherwise, unless `URLTASKMANAGER_VERBOSE=1` (each script's
/// timeline).
final class StackSimulationTests: XCTestCase {
    /// Seeds per family; `MODEL_SEED` runs one.
    static let seedsPerFamily = 150

    static var seeds: [UInt64] {
        if let text = ProcessInfo.processInfo.environment["MODEL_SEED"], let seed = UInt64(text) { return [seed] }
        return (1...UInt64(seedsPerFamily)).map { $0 }
    }

    static var verbose: Bool { ParityLog.isVerbose }

    // MARK: - Seeded families

    func testSeededScriptsEndAsTheOracleSays() async throws {
        for family in SimFamily.allCases {
            // What the family's scripts made callers see, so that a generator that stops
            // reaching a case (an expiry, a probe that closes the circuit) fails too.
            var seen: Set<String> = []
            for seed in Self.seeds {
                var random = SplitMix64(state: seed &+ family.salt)
                let (script, oracle) = family.generate(&random)
                let run = await StackSimulation(script: script, seed: seed).run()
                var problems: [String] = []
                oracle(run, &problems)
                seen.formUnion(run.ends.map(\.result.description))
                if !run.openings.isEmpty { seen.insert("opened") }
                if !run.closings.isEmpty { seen.insert("closed") }
                if run.keptTurns > 0 { seen.insert("turn kept") }
                if run.refreshes > 1 { seen.insert("two refreshes") }
                if Self.verbose { print("\(family) seed \(seed):\n\(run.timeline)") }
                if !problems.isEmpty {
                    printFigures("StackSimulation: family \(family) seed \(seed) failed; replay with MODEL_SEED=\(seed)")
                    XCTFail("family \(family) seed \(seed) (MODEL_SEED=\(seed)):\n\(problems.joined(separator: "\n"))\n\(run.timeline)")
                }
            }
            if Self.seeds.count > 1 {
                let missing = family.reaches.subtracting(seen)
                XCTAssertTrue(missing.isEmpty, "family \(family): no script reached \(missing.sorted()) (saw \(seen.sorted()))")
            }
        }
    }

    // MARK: - The four bullets under "Why" in issue 38

    /// Before (issue 38): three requests each answered `503` with `Retry-After: 1` twice, then
    /// `200`: 1 of 3 ended 200; the breaker counted every retried attempt (6 failures > 5 in 30 s),
    /// opened for 30 s and refused the retries and every other request to the host.
    /// After: 3 × 200, the circuit never opens.
    func testWhyFlakyEndpointEndsThreeTimes200() async {
        let run = await StackSimulation(script: NamedScripts.flaky).run()
        XCTAssertEqual(run.ends.map(\.result), [.status(200), .status(200), .status(200)], run.timeline)
        XCTAssertEqual(run.openings.count, 0, "the circuit opened:\n\(run.timeline)")
        XCTAssertEqual(run.serverHits, 9, "each GET: 503, 503, 200")
        for end in run.ends { XCTAssertLessThanOrEqual(end.at, .seconds(3), "\(end)\n\(run.timeline)") }
    }

    /// Before (issue 38): three GETs made while the backend is down (timeoutInterval 10 s) all
    /// failed at once with `circuitOpen` (circuit opened earlier), and a GET 0.5 s after the
    /// return failed too; with the circuit closed beforehand, the breaker counted the hold's
    /// connection failures, opened, and refused the held requests when the host was back (held
    /// 3.8 s, then refused with `retryAfter 26.5 s`, the server already up).
    /// After: the three end 200 within 2.5 s of the return, and the GET 0.5 s after it ends 200.
    func testWhyTwoSecondOutageEndsWith200() async {
        let run = await StackSimulation(script: NamedScripts.outage).run()
        XCTAssertEqual(run.ends.map(\.result), Array(repeating: .status(200), count: 4), run.timeline)
        for end in run.ends.prefix(3) { XCTAssertLessThanOrEqual(end.at, .seconds(2) + .milliseconds(2_500), "\(end)\n\(run.timeline)") }
        XCTAssertEqual(run.ends[3].at, .milliseconds(2_500) + NamedScripts.latency, "the GET after the return is sent at once")
        XCTAssertEqual(run.openings.count, 0, run.timeline)
    }

    // The third bullet (an outage while the token expires: before, the three GETs made during it
    // failed in 1 ms with URLError(-1004), and GETs 0.5 s and 1.5 s after the return failed with
    // the same stale error, no refresh reaching the server) needs the token endpoint, down with
    // the host: this simulation's refresh always succeeds one latency after it starts, so that
    // bullet is checked over real HTTP.

    /// The fourth bullet (before: listeners of a shared transfer took a token, and 20 identical
    /// GETs reached the server 3 times and took 1 s) is about sharing, which this simulation does
    /// not model (checked over real HTTP: at most 2 server hits). What it can model is the
    /// limiter's part: even were every one of 20 GETs charged a token, rate 20 with bursts of 10
    /// sends the 20th 0.5 s after the first, within the 1.0 s the issue allows.
    func testWhyTwentyGETsThroughTheLimiterAreSpreadOverHalfASecond() async {
        let run = await StackSimulation(script: NamedScripts.twentyAtOnce).run()
        XCTAssertEqual(run.ends.map(\.result), Array(repeating: .status(200), count: 20), run.timeline)
        let sent = run.ends.map { $0.at - NamedScripts.latency }.sorted()
        for (index, at) in sent.enumerated() {
            let expected = Duration.milliseconds(50 * max(0, index - 9))
            XCTAssertLessThan(abs((at - expected).simSeconds), 0.001, "GET \(index) sent at \(at)")
        }
        XCTAssertLessThanOrEqual(run.ends.map(\.at).max()!, .seconds(1))
    }

    /// Issue 50: 100 GETs at once while the token expires 2 s in. The one GET sent after the
    /// expiry meets a `401` and starts one refresh; the GETs whose turn came during it, or whose
    /// headers predate it, run the interceptors again and keep their turn; the `401`'s retry takes
    /// a turn at the back. So 101 requests go, the limiter gives 101 turns, and the last ends one
    /// latency after the schedule for 101 (4.55 s). With the old rule (a pass sent back took a
    /// turn again, at the back of the line) the same script ended at 7.07 s.
    func testATokenExpiringMidLineCostsOnlyTheRetryOfIts401() async {
        let run = await StackSimulation(script: NamedScripts.tokenUnderLoad).run()
        XCTAssertEqual(run.ends.map(\.result), Array(repeating: .status(200), count: 100), run.timeline)
        XCTAssertEqual(run.refreshes, 1, run.timeline)
        XCTAssertEqual(run.unauthorized, 1, run.timeline)
        XCTAssertEqual(run.serverHits, 101)
        XCTAssertEqual(run.turnsTaken, 101, "a turn per request sent")
        XCTAssertEqual(run.ends.filter { $0.turns != $0.sends }.map(\.description), [], "a turn per attempt sent, caller by caller")
        XCTAssertGreaterThan(run.keptTurns, 0, "no pass was sent back by the refresh")
        XCTAssertTrue(simNear(run.ends.map(\.at).max()!, .milliseconds(4_550) + NamedScripts.latency), run.timeline)
    }

    /// After a `429` with `Retry-After`, the limiter's bucket holds the host's requests until the
    /// pause ends and then, as `TokenBucketStateMachine.pause(for:now:)` documents (the bucket
    /// refills over the pause as over any idle time), lets up to `burst` (10) of them go at once:
    /// all five end one latency after the pause.
    func testAfterAPauseTheHostsRequestsGoTogetherUpToTheBurst() async {
        var requests = [SimRequest(path: "/", at: .zero)]
        requests += (1...4).map { SimRequest(path: "/", at: .milliseconds(500 * $0)) }
        let script = SimScript(
            host: SimHost(answer: { _, send, _ in send == 1 ? SimAnswer(status: 429, retryAfter: "5") : .ok }), requests: requests)
        let run = await StackSimulation(script: script).run()
        XCTAssertEqual(run.ends.map(\.result), Array(repeating: .status(200), count: 5), run.timeline)
        let pauseEnds = NamedScripts.latency + .seconds(5)
        for (index, at) in run.ends.map(\.at).sorted().enumerated() {
            let expected = pauseEnds + NamedScripts.latency
            XCTAssertTrue(simNear(at, expected), "GET \(index) ended at \(at.simSeconds) s, the limiter documents \(expected.simSeconds) s")
        }
    }

    // MARK: - The breaker still protects (issue 38, "Done when")

    /// Alone against a host answering 5xx to everything, the breaker opens after exactly 5 ended
    /// tasks and refuses the next requests without sending them.
    func testA5xxHostOpensAfterTheThresholdAndLaterRequestsAreNotSent() async {
        let run = await StackSimulation(script: NamedScripts.fiveHundreds(requests: 7)).run()
        XCTAssertEqual(run.ends.prefix(5).map(\.result), Array(repeating: .status(500), count: 5), run.timeline)
        XCTAssertEqual(run.ends.dropFirst(5).map(\.result), [.circuitOpen, .circuitOpen], run.timeline)
        XCTAssertEqual(run.openings.first?.failedEnds, 5, run.timeline)
        XCTAssertEqual(run.serverHits, 15, "only the first five were sent (3 attempts each)")
    }

    /// A host that stays down fails held requests just before their timeout with the original
    /// `URLError`; an open circuit closes when the hold's probe reaches the host.
    func testAHostThatStaysDownAndACircuitTheHoldsProbeCloses() async {
        let down = await StackSimulation(script: NamedScripts.staysDown).run()
        for end in down.ends.prefix(5) {
            XCTAssertEqual(end.result, .urlError(.cannotConnectToHost), down.timeline)
            XCTAssertEqual(end.at, end.arrival + .seconds(10) - .milliseconds(250), down.timeline)
        }

        // Five short requests expire and open the circuit; a long one is still held; the host
        // returns at 12 s; the hold's probe at 15.5 s reaches it and the circuit closes.
        var requests = (0..<5).map { SimRequest(path: "/short\($0)", at: .milliseconds(100 * $0), timeout: 2) }
        requests.append(SimRequest(path: "/long", at: .milliseconds(50), timeout: 30))
        requests.append(SimRequest(path: "/refused", at: .seconds(4), timeout: 30))
        requests.append(SimRequest(path: "/after", at: .seconds(16), timeout: 30))
        let run = await StackSimulation(script: SimScript(host: SimHost(down: [.zero..<(.seconds(12))]), requests: requests)).run()
        XCTAssertEqual(run.openings.first?.failedEnds, 5, run.timeline)
        XCTAssertEqual(run.ends[6].result, .circuitOpen, run.timeline)
        XCTAssertEqual(run.ends[5].result, .status(200), "the held request is sent when the probe reaches the host\n\(run.timeline)")
        XCTAssertEqual(run.ends[5].at, .milliseconds(15_500) + NamedScripts.latency * 2, run.timeline)
        XCTAssertEqual(run.ends[7].result, .status(200), run.timeline)
        XCTAssertEqual(run.closings.first, .milliseconds(15_500) + NamedScripts.latency, run.timeline)
    }

    // MARK: - The Resilience article's table

    /// "What your users see when..." in the Resilience article: each row the simulation can run is
    /// run, and its outcome column must hold; a row this test does not know fails.
    func testTheResilienceArticlesTableIsWhatTheSimulationSees() async throws {
        let article = try String(
            contentsOf: CompiledSnippets.root.appendingPathComponent("Sources/URLTaskResilience/URLTaskResilience.docc/Resilience.md"),
            encoding: .utf8)
        let rows = ArticleTable.rows(in: article, under: "What your users see when")
        XCTAssertGreaterThanOrEqual(rows.count, 8, "the table was not found")
        for row in rows {
            if let test = ArticleTable.checkedOverHTTP[row.key] {
                XCTAssertEqual(test.outcome, row.outcome, "row `\(row.key)`: the outcome \(test.checkedBy) checks")
                continue
            }
            guard let script = ArticleTable.simulated[row.key] else {
                XCTFail("the table has a row `\(row.key)` that no test checks")
                continue
            }
            let run = await StackSimulation(script: script).run()
            if let problem = ArticleTable.disagreement(of: row.outcome, with: run, script: script) {
                XCTFail("row `\(row.key)` says \"\(row.outcome)\", the simulation: \(problem)\n\(run.timeline)")
            }
        }
    }
}

extension StackSimulationTests {
    /// The table's checker is not vacuous: a wrong count, threshold or code, and a phrase it
    /// cannot read, disagree.
    func testTheTableCheckRejectsWrongOutcomes() async {
        let flaky = await StackSimulation(script: NamedScripts.flaky).run()
        XCTAssertNil(ArticleTable.disagreement(of: "3 × 200", with: flaky, script: NamedScripts.flaky))
        XCTAssertNotNil(ArticleTable.disagreement(of: "2 × 200", with: flaky, script: NamedScripts.flaky))
        XCTAssertNotNil(ArticleTable.disagreement(of: "3 × 200 quickly", with: flaky, script: NamedScripts.flaky))
        let fiveHundreds = NamedScripts.fiveHundreds(requests: 7)
        let opened = await StackSimulation(script: fiveHundreds).run()
        XCTAssertNil(ArticleTable.disagreement(of: "circuitOpen after 5 failures", with: opened, script: fiveHundreds))
        XCTAssertNotNil(ArticleTable.disagreement(of: "circuitOpen after 4 failures", with: opened, script: fiveHundreds))
        let down = await StackSimulation(script: NamedScripts.staysDown).run()
        XCTAssertNil(
            ArticleTable.disagreement(
                of: "URLError cannotConnectToHost 0.25 s before the timeout", with: down, script: NamedScripts.staysDown))
        XCTAssertNotNil(
            ArticleTable.disagreement(of: "URLError timedOut 0.25 s before the timeout", with: down, script: NamedScripts.staysDown))
        XCTAssertNotNil(
            ArticleTable.disagreement(of: "URLError cannotConnectToHost 1 s before the timeout", with: down, script: NamedScripts.staysDown)
        )
        let outage = await StackSimulation(script: NamedScripts.outage).run()
        XCTAssertNil(ArticleTable.disagreement(of: "200 within 2.5 s of the return", with: outage, script: NamedScripts.outage))
        XCTAssertNotNil(ArticleTable.disagreement(of: "200 within 1 s of the return", with: outage, script: NamedScripts.outage))
        let underLoad = await StackSimulation(script: NamedScripts.tokenUnderLoad).run()
        let script = NamedScripts.tokenUnderLoad
        XCTAssertNil(
            ArticleTable.disagreement(
                of: "every GET ends 200 within the limiter's schedule + 0.3 s, one refresh", with: underLoad, script: script))
        XCTAssertNotNil(
            ArticleTable.disagreement(
                of: "every GET ends 200 within the limiter's schedule + 0.01 s, one refresh", with: underLoad, script: script))
        XCTAssertNotNil(
            ArticleTable.disagreement(
                of: "every GET ends 200 within the limiter's schedule + 0.3 s, two refreshes", with: underLoad, script: script))
    }
}

// MARK: - Scripts

/// A scripted host: down (connections refused) during some stretches, answering after
/// ``latency`` otherwise, with the status ``answer`` says.
struct SimHost {
    /// Connections are refused during these stretches of virtual time.
    var down: [Range<Duration>] = []
    /// How long each answer takes.
    var latency: Duration = NamedScripts.latency
    /// The answer to a request for `path`, its `send`th for that path (1 for the first), at `time`.
    var answer: (_ path: String, _ send: Int, _ time: Duration) -> SimAnswer = { _, _, _ in .ok }

    func isDown(at time: Duration) -> Bool { down.contains { $0.contains(time) } }
}

struct SimAnswer {
    var status: Int
    var retryAfter: String?
    static let ok = SimAnswer(status: 200)

    init(status: Int, retryAfter: String? = nil) {
        self.status = status
        self.retryAfter = retryAfter
    }
}

/// One caller's GET.
struct SimRequest {
    var path: String
    var at: Duration
    var timeout: TimeInterval = 10
}

struct SimScript {
    var host: SimHost
    var requests: [SimRequest]
    /// When the server stops accepting the access token it issued last: the first request sent
    /// after each is answered `401`, and the refresh reactor renews the token (one token request,
    /// ``SimHost/latency`` long). Empty: the token never expires.
    var tokenExpiries: [Duration] = []
}

/// What a caller received.
enum SimResult: Equatable, CustomStringConvertible {
    case status(Int)
    case urlError(URLError.Code)
    case circuitOpen
    case other(String)

    var description: String {
        switch self {
        case .status(let code): return "\(code)"
        case .urlError(let code): return "URLError(\(code.rawValue))"
        case .circuitOpen: return "circuitOpen"
        case .other(let text): return text
        }
    }

    var isFailure: Bool {
        switch self {
        case .status(let code): return code >= 500
        case .urlError: return true
        case .circuitOpen, .other: return false
        }
    }
}

/// How one caller's task ended.
struct SimEnd: CustomStringConvertible {
    var result: SimResult
    var at: Duration
    var arrival: Duration
    /// How many of its attempts reached the wire (refused connections included).
    var sends: Int
    /// When its last attempt went out (`nil` if none did).
    var lastSend: Duration? = nil
    /// How many turns the limiter gave its attempts: one per attempt sent, however often a
    /// refresh sent an attempt back through the interceptors.
    var turns = 0
    var description: String { "\(result) at \(at.simSeconds) s (arrived \(arrival.simSeconds) s, \(sends) send(s), \(turns) turn(s))" }
}

struct SimRun {
    var ends: [SimEnd]
    /// Requests the host answered (not the refused connections).
    var serverHits: Int
    /// When each request the host answered was sent.
    var hitTimes: [Duration] = []
    /// When the circuit went from closed to open, and how many tasks had ended failed by then.
    var openings: [(at: Duration, failedEnds: Int)]
    /// When it went back to closed.
    var closings: [Duration]
    /// Token refreshes (one token request each), `401`s answered, the turns the limiter gave, and
    /// the passes that kept a turn (an attempt a refresh sent back through the interceptors).
    var refreshes = 0
    var unauthorized = 0
    var turnsTaken = 0
    var keptTurns = 0
    var timeline: String
}

/// The scripts the tests name, with the issue's figures.
enum NamedScripts {
    static let latency = Duration.milliseconds(20)
    static let host = "http://sim.example:80"

    /// Three GETs, each answered `503` with `Retry-After: 1` twice, then `200`.
    static var flaky: SimScript {
        SimScript(
            host: SimHost(answer: { _, send, _ in send <= 2 ? SimAnswer(status: 503, retryAfter: "1") : .ok }),
            requests: ["/a", "/b", "/c"].map { SimRequest(path: $0, at: .zero) })
    }

    /// Down for 2 s from 0; three GETs made during it (timeoutInterval 10 s), one 0.5 s after.
    static var outage: SimScript {
        SimScript(
            host: SimHost(down: [.zero..<(.seconds(2))]),
            requests: [
                SimRequest(path: "/1", at: .milliseconds(100)), SimRequest(path: "/2", at: .milliseconds(700)),
                SimRequest(path: "/3", at: .milliseconds(1_600)), SimRequest(path: "/after", at: .milliseconds(2_500)),
            ])
    }

    /// Five GETs, 2 s apart, to a host that refuses connections from the start and stays down.
    static var staysDown: SimScript {
        SimScript(
            host: SimHost(down: [.zero..<(.seconds(3_600))]),
            requests: (0..<5).map { SimRequest(path: "/\($0)", at: .seconds(2 * $0)) })
    }

    /// GETs 2 s apart to a host answering `500` to everything.
    static func fiveHundreds(requests: Int) -> SimScript {
        SimScript(
            host: SimHost(answer: { _, _, _ in SimAnswer(status: 500) }),
            requests: (0..<requests).map { SimRequest(path: "/\($0)", at: .seconds(2 * $0)) })
    }

    /// One GET answered `429` with `Retry-After: 2`, then `200`.
    static var tooManyRequests: SimScript {
        SimScript(
            host: SimHost(answer: { _, send, _ in send == 1 ? SimAnswer(status: 429, retryAfter: "2") : .ok }),
            requests: [SimRequest(path: "/", at: .zero)])
    }

    /// Three GETs to a host answering after `seconds` (timeoutInterval 10 s).
    static func slow(seconds: Int) -> SimScript {
        SimScript(host: SimHost(latency: .seconds(seconds)), requests: (0..<3).map { SimRequest(path: "/\($0)", at: .seconds($0)) })
    }

    /// 100 GETs at once while the token expires 2 s in, in the middle of the limiter's line (its
    /// schedule needs 4.5 s).
    static var tokenUnderLoad: SimScript {
        SimScript(
            host: SimHost(), requests: (0..<100).map { SimRequest(path: "/t\($0)", at: .zero) }, tokenExpiries: [.seconds(2)])
    }

    /// 20 GETs at once, each its own path.
    static var twentyAtOnce: SimScript {
        SimScript(host: SimHost(), requests: (0..<20).map { SimRequest(path: "/\($0)", at: .zero) })
    }
}

// MARK: - The engine's order

/// The recommended stack's order, as the manager applies it, around the real parts:
///
/// 1. A task arrives: the interceptors run, the breaker (`URLTaskPlacement.first`) then the
///    limiter (`URLTaskPlacement.last`; coalescing is not simulated, and the bearer only as the
///    credential version its headers carry, taken as the interceptors begin). A refusal ends the
///    task; a limiter wait holds it until the bucket releases it. Whether the pass takes a turn
///    is the real `RateLimiter`'s rule (`pass(of:host:)`): an attempt holding one keeps it.
///    Admission then sends it, unless a token refresh is running (it waits at the refresh's gate,
///    as a task whose interceptors would begin during one does) or ended since its headers were
///    decided: either way it runs the interceptors again as the same attempt
///    (`URLTask.startingOver(...sameAttempt: true)`, as the engine does), then goes.
/// 2. The attempt is sent: a host that is down refuses it at once (`cannotConnectToHost`); one
///    slower than the request's `timeoutInterval` fails it with `timedOut` at that interval; else
///    it answers after its latency.
/// 3. The attempt's outcome is told to the observers: the breaker (`observe`), the limiter (a
///    `429`/`503` with `Retry-After` pauses the bucket).
/// 4. The reactors, in order: the offline hold (`URLTaskPlacement.late`), then the retry
///    (`URLTaskPlacement.last`); the first that takes the outcome reacts. A hold waits for its
///    host's probe (the hold's loop: first after `probeInterval`, doubling up to
///    `maximumProbeInterval`; an answered probe tells `HostHealth` first, then releases every held
///    request) or expires at `holdLimit` with the original error; a retry waits its delay.
///    Either sends the task again: attempt + 1, through the interceptors again (1).
///    Before them, the refresh reactor: a `401` (a token the server no longer accepts) starts a
///    refresh (one token request, a host latency long) unless one is running, which it waits
///    for, or ended since its headers were decided; then the task goes again, attempt + 1.
/// 5. Nobody takes it: the task ends; its end is told to the observers (`observeEnd`) before the
///    caller hears it.
///
/// A wait inside the pipeline (the limiter, a reaction) fails the task with `timedOut` when it
/// outlasts the request's `timeoutInterval`, counted from the stretch's start, as the manager's
/// wait timer does. Events at one instant run in the order they were scheduled. Not modelled:
/// the hold's limit of 10 holds per task (the scripts have one outage, so a task is held once at
/// most) and the breaker's probe timeout (every probe here is answered or refused).
final class StackSimulation {
    private enum Step {
        case arrive(Int)
        case resend(Int)
        case answered(Int, URLTaskOutcome)
        case limiterTick
        case waitExpired(Int, stretch: Int)
        case holdExpired(Int, OfflineHoldStateMachine.Waiter)
        case probe(loop: Int, interval: Duration)
        case probeAnswered(loop: Int, interval: Duration, answered: Bool)
        case refreshed
    }

    private struct Caller {
        var task: URLTask
        var arrival: Duration
        var sends = 0
        var lastSend: Duration?
        var stretch = 0
        var inTransfer = false
        var limiterWaiter: TokenBucketStateMachine.Waiter?
        /// When it joined the limiter's line (what `RateLimiter` reports as the wait).
        var queuedAt: Duration = .zero
        var turns = 0
        var holdWaiter: OfflineHoldStateMachine.Waiter?
        var heldError: (any Error)?
        /// The credential version its headers were decided under.
        var headersVersion = 0
        var end: SimEnd?
    }

    /// One reactor instance for every run: only its `shouldReact` and policy are used (its own
    /// probe loop runs on the real clock; the glue below runs the same schedule on the virtual one).
    private static let hold = OfflineHold(health: HostHealth())
    private let retry = RetryReactor()
    static let limiterPolicy = RateLimiter.Policy(rate: 20, burst: 10)
    private var limiterPolicy: RateLimiter.Policy { Self.limiterPolicy }
    /// Only its rule for a pass (`pass(of:host:)`, `recordTurn(on:host:waited:)`); the bucket is
    /// ``bucket``, on the virtual clock.
    private let limiter = RateLimiter(policy: StackSimulation.limiterPolicy)

    private let script: SimScript
    private let clock = SimClock()
    private let health = HostHealth()
    private let breaker: CircuitBreaker
    private var bucket: TokenBucketStateMachine
    private var holdMachine = OfflineHoldStateMachine()
    private var random: SplitMix64
    private var callers: [Caller] = []
    private var queue: [(at: Duration, order: Int, step: Step)] = []
    private var scheduled = 0
    private var waiters: UInt64 = 0
    private var pendingTicks: Set<Duration> = []
    private var probeLoop = 0
    private var sendsByPath: [String: Int] = [:]
    private var serverHits = 0
    private var hitTimes: [Duration] = []
    private var wasOpen = false
    private var openings: [(at: Duration, failedEnds: Int)] = []
    private var closings: [Duration] = []
    private var timeline: [String] = []
    /// The token: its version, until when the server accepts it, whether a refresh runs, who
    /// waits at its gate (to run the interceptors again) and who waits for it after a `401`.
    private var credentialVersion = 0
    private var tokenValidUntil: Duration
    private var refreshing = false
    private var gated: [Int] = []
    private var awaitingRefresh: [Int] = []
    private var refreshes = 0
    private var unauthorized = 0
    private var turnsTaken = 0
    private var keptTurns = 0

    init(script: SimScript, seed: UInt64 = 1) {
        self.script = script
        self.random = SplitMix64(state: seed)
        let clock = self.clock
        self.breaker = CircuitBreaker(policy: .init(), health: health, now: { clock.instant })
        let policy = Self.limiterPolicy
        self.bucket = TokenBucketStateMachine(
            rate: policy.rate, burst: policy.burst, maximumQueueLength: policy.maximumQueueLength, now: clock.instant)
        self.tokenValidUntil = script.tokenExpiries.min() ?? .seconds(3_600)
    }

    private var hostKey: String { NamedScripts.host }

    func run() async -> SimRun {
        for (index, request) in script.requests.enumerated() {
            var urlRequest = URLRequest(url: URL(string: hostKey + request.path)!)
            urlRequest.timeoutInterval = request.timeout
            callers.append(Caller(task: URLTask(request: urlRequest), arrival: request.at))
            schedule(.arrive(index), at: request.at)
        }
        while !queue.isEmpty, clock.now < .seconds(3_600) {
            let next = queue.removeFirst()
            clock.now = next.at
            switch next.step {
            case .arrive(let index):
                log(index, "arrives")
                beginWait(index)
                await intercept(index)
            case .resend(let index):
                callers[index].task = callers[index].task.startingOver(
                    attempt: callers[index].task.attempt + 1, request: callers[index].task.originalRequest, body: callers[index].task.body)
                await intercept(index)
            case .refreshed:
                await refreshed()
            case .answered(let index, let outcome):
                callers[index].inTransfer = false
                answered(index, outcome)
            case .limiterTick:
                pendingTicks.remove(clock.now)
                let tick = bucket.tick(now: clock.instant)
                for waiter in tick.released {
                    guard let index = callers.firstIndex(where: { $0.limiterWaiter == waiter }) else { continue }
                    callers[index].limiterWaiter = nil
                    turnsTaken += 1
                    callers[index].turns += 1
                    limiter.recordTurn(on: &callers[index].task, host: hostKey, waited: clock.now - callers[index].queuedAt)
                    await admit(index)
                }
                if let wake = tick.wakeAt { scheduleTick(wake) }
            case .waitExpired(let index, let stretch):
                guard callers[index].stretch == stretch, callers[index].end == nil, !callers[index].inTransfer else { break }
                if let waiter = callers[index].limiterWaiter { _ = bucket.leave(waiter) }
                if let waiter = callers[index].holdWaiter, case .stopProbing = holdMachine.left(waiter) { probeLoop += 1 }
                gated.removeAll { $0 == index }
                awaitingRefresh.removeAll { $0 == index }
                end(index, error: URLError(.timedOut))
            case .holdExpired(let index, let waiter):
                guard callers[index].holdWaiter == waiter else { break }
                callers[index].holdWaiter = nil
                if case .stopProbing = holdMachine.left(waiter) { probeLoop += 1 }
                log(index, "hold expired")
                end(index, error: callers[index].heldError)
            case .probe(let loop, let interval):
                guard loop == probeLoop, holdMachine.probedHosts.contains(hostKey) else { break }
                let probeTimeout = Self.hold.policy.probeTimeout
                if script.host.isDown(at: clock.now) {
                    schedule(.probeAnswered(loop: loop, interval: interval, answered: false), at: clock.now)
                } else if script.host.latency < probeTimeout {
                    schedule(.probeAnswered(loop: loop, interval: interval, answered: true), at: clock.now + script.host.latency)
                } else {
                    schedule(.probeAnswered(loop: loop, interval: interval, answered: false), at: clock.now + probeTimeout)
                }
            case .probeAnswered(let loop, let interval, let answered):
                guard loop == probeLoop else { break }
                await probeAnswered(answered, interval: interval)
            }
        }
        return SimRun(
            ends: callers.map {
                $0.end ?? SimEnd(result: .other("never ended"), at: clock.now, arrival: $0.arrival, sends: $0.sends, turns: $0.turns)
            },
            serverHits: serverHits, hitTimes: hitTimes, openings: openings, closings: closings, refreshes: refreshes,
            unauthorized: unauthorized, turnsTaken: turnsTaken, keptTurns: keptTurns, timeline: timeline.joined(separator: "\n"))
    }

    // 1. The interceptors: the breaker, then the limiter.
    private func intercept(_ index: Int) async {
        if refreshing {
            log(index, "waits at the refresh's gate")
            return gated.append(index)
        }
        callers[index].headersVersion = credentialVersion
        var task = callers[index].task
        let command: InterceptCommand
        do {
            command = try await breaker.intercept(&task, context: InterceptContext(currentBatchCount: 0))
        } catch {
            return end(index, error: error)
        }
        noteBreaker()
        callers[index].task = task
        switch command {
        case .execute: break
        case .fail(let error): return end(index, error: error)
        default: return end(index, error: URLError(.unknown))
        }
        if case .keepsTurn = limiter.pass(of: task, host: hostKey) {
            keptTurns += 1
            log(index, "keeps its turn")
            return await admit(index)
        }
        waiters += 1
        let waiter = TokenBucketStateMachine.Waiter(rawValue: waiters)
        switch bucket.arrive(waiter, now: clock.instant) {
        case .go:
            turnsTaken += 1
            callers[index].turns += 1
            limiter.recordTurn(on: &callers[index].task, host: hostKey, waited: nil)
            await admit(index)
        case .wait(_, let wakeAt):
            callers[index].limiterWaiter = waiter
            callers[index].queuedAt = clock.now
            log(index, "waits for a token")
            scheduleTick(wakeAt)
        case .refuse:
            end(index, error: URLError(.unknown))
        }
    }

    // Admission: a refresh running, or ended since the headers were decided, sends the task back
    // through the interceptors as the same attempt (at once, or when the refresh ends).
    private func admit(_ index: Int) async {
        if refreshing {
            log(index, "waits at the refresh's gate")
            return gated.append(index)
        }
        guard callers[index].headersVersion == credentialVersion else {
            log(index, "headers stale: intercepted again")
            return await interceptAgain(index)
        }
        send(index)
    }

    /// The same attempt through the interceptors again, as the engine's `interceptAgain` does.
    private func interceptAgain(_ index: Int) async {
        let task = callers[index].task
        callers[index].task = task.startingOver(attempt: task.attempt, request: task.originalRequest, body: task.body, sameAttempt: true)
        await intercept(index)
    }

    // The refresh reactor's run ended: the token renewed, the tasks at its gate intercepted
    // again, those that met a `401` sent again.
    private func refreshed() async {
        credentialVersion += 1
        tokenValidUntil = script.tokenExpiries.filter { $0 > clock.now }.min() ?? .seconds(3_600)
        refreshing = false
        timeline.append("\(clock.now.simSeconds) s: token refreshed (version \(credentialVersion))")
        for index in awaitingRefresh { schedule(.resend(index), at: clock.now) }
        awaitingRefresh = []
        let waiting = gated
        gated = []
        for index in waiting where callers[index].end == nil { await interceptAgain(index) }
    }

    // 2. The attempt on the wire.
    private func send(_ index: Int) {
        callers[index].stretch += 1
        callers[index].sends += 1
        callers[index].lastSend = clock.now
        callers[index].inTransfer = true
        let request = callers[index].task.request
        let path = request.url!.path
        if script.host.isDown(at: clock.now) {
            log(index, "sent, refused")
            return schedule(.answered(index, .failure(URLError(.cannotConnectToHost))), at: clock.now)
        }
        serverHits += 1
        hitTimes.append(clock.now)
        guard callers[index].headersVersion == credentialVersion, clock.now < tokenValidUntil else {
            unauthorized += 1
            log(index, "sent, answered 401 (token version \(callers[index].headersVersion))")
            let response = HTTPURLResponse(url: request.url!, statusCode: 401, httpVersion: "HTTP/1.1", headerFields: [:])!
            return schedule(.answered(index, .response(response)), at: clock.now + script.host.latency)
        }
        sendsByPath[path, default: 0] += 1
        let answer = script.host.answer(path, sendsByPath[path]!, clock.now)
        let timeout = Duration.seconds(request.timeoutInterval)
        if script.host.latency >= timeout {
            log(index, "sent, times out")
            return schedule(.answered(index, .failure(URLError(.timedOut))), at: clock.now + timeout)
        }
        var headers: [String: String] = [:]
        if let retryAfter = answer.retryAfter { headers["Retry-After"] = retryAfter }
        let response = HTTPURLResponse(url: request.url!, statusCode: answer.status, httpVersion: "HTTP/1.1", headerFields: headers)!
        log(index, "sent, answered \(answer.status)\(answer.retryAfter.map { " Retry-After: \($0)" } ?? "")")
        schedule(.answered(index, .response(response)), at: clock.now + script.host.latency)
    }

    // 3. The observers, then 4. the reactors, or 5. the end.
    private func answered(_ index: Int, _ outcome: URLTaskOutcome) {
        let task = callers[index].task
        breaker.observe(outcome, of: task)
        noteBreaker()
        if case .response(let response) = outcome, limiterPolicy.pausingStatuses.contains(response.statusCode),
            let retryAfter = RetryAfter(response: response, now: clock.date)
        {
            if let wake = bucket.pause(for: min(retryAfter.delay, limiterPolicy.maximumPause), now: clock.instant) { scheduleTick(wake) }
        }
        if case .response(let response) = outcome, response.statusCode == 401, !script.tokenExpiries.isEmpty {
            // The refresh reactor, first of the reactors.
            beginWait(index)
            if refreshing {
                log(index, "waits for the refresh")
                awaitingRefresh.append(index)
            } else if callers[index].headersVersion < credentialVersion {
                log(index, "a refresh ended since its headers: sent again")
                schedule(.resend(index), at: clock.now)
            } else {
                refreshing = true
                refreshes += 1
                log(index, "starts a refresh")
                awaitingRefresh.append(index)
                schedule(.refreshed, at: clock.now + script.host.latency)
            }
        } else if Self.hold.shouldReact(to: outcome, of: task) {
            guard case .failure(let error) = outcome else { return }
            waiters += 1
            let waiter = OfflineHoldStateMachine.Waiter(rawValue: waiters)
            callers[index].holdWaiter = waiter
            callers[index].heldError = error
            beginWait(index)
            log(index, "held")
            if holdMachine.held(waiter, host: hostKey) == .startProbing {
                probeLoop += 1
                let interval = OfflineHold.Policy.probeWait(Self.hold.policy.probeInterval)
                schedule(.probe(loop: probeLoop, interval: interval), at: clock.now + interval)
            }
            let limit = Self.hold.policy.maximumHold ?? OfflineHold.holdLimit(timeoutInterval: task.request.timeoutInterval)
            if let limit { schedule(.holdExpired(index, waiter), at: clock.now + limit) }
        } else if retry.shouldReact(to: outcome, of: task) {
            let delay = retry.policy.delay(
                afterAttempt: task.attempt, outcome: outcome, now: clock.date, random: Double.random(in: 0..<1, using: &random))
            log(index, "retries in \(delay.simSeconds) s")
            beginWait(index)
            schedule(.resend(index), at: clock.now + delay)
        } else {
            switch outcome {
            case .response(let response): end(index, result: .status(response.statusCode), error: nil)
            case .failure(let error): end(index, error: error)
            }
        }
    }

    private func probeAnswered(_ answered: Bool, interval: Duration) async {
        guard answered else {
            guard holdMachine.probeFailed(host: hostKey) != nil else { return }
            let policy = Self.hold.policy
            let next = OfflineHold.Policy.probeWait(min(interval * 2, OfflineHold.Policy.probeWait(policy.maximumProbeInterval)))
            timeline.append("\(clock.now.simSeconds) s: probe failed, next in \(next.simSeconds) s")
            return schedule(.probe(loop: probeLoop, interval: next), at: clock.now + next)
        }
        timeline.append("\(clock.now.simSeconds) s: probe answered")
        // As the hold does: the other parts learn first that the host is back.
        health.hostAnswered(hostKey)
        probeLoop += 1
        for waiter in holdMachine.probeSucceeded(host: hostKey) {
            guard let index = callers.firstIndex(where: { $0.holdWaiter == waiter }) else { continue }
            callers[index].holdWaiter = nil
            schedule(.resend(index), at: clock.now)
        }
    }

    private func end(_ index: Int, error: (any Error)?) {
        var result = SimResult.other("\(String(describing: error))")
        if let error = error as? URLError {
            result = .urlError(error.code)
        } else if let error = error as? URLTaskError, error.code == .circuitOpen {
            result = .circuitOpen
        }
        end(index, result: result, error: error ?? URLError(.unknown))
    }

    private func end(_ index: Int, result: SimResult, error: (any Error)?) {
        callers[index].stretch += 1
        breaker.observeEnd(of: callers[index].task, error: error)
        callers[index].end = SimEnd(
            result: result, at: clock.now, arrival: callers[index].arrival, sends: callers[index].sends, lastSend: callers[index].lastSend,
            turns: callers[index].turns)
        log(index, "ends \(result)")
        noteBreaker()
    }

    private func beginWait(_ index: Int) {
        callers[index].stretch += 1
        let timeout = callers[index].task.request.timeoutInterval
        guard timeout > 0 else { return }
        schedule(.waitExpired(index, stretch: callers[index].stretch), at: clock.now + .seconds(timeout))
    }

    private func noteBreaker() {
        let open = breaker.isOpen(for: URL(string: hostKey)!)
        if open, !wasOpen {
            let failed = callers.filter { $0.end?.result.isFailure == true }.count
            openings.append((clock.now, failed))
            timeline.append("\(clock.now.simSeconds) s: circuit opens after \(failed) failed task(s)")
        }
        if !open, wasOpen {
            closings.append(clock.now)
            timeline.append("\(clock.now.simSeconds) s: circuit closes")
        }
        wasOpen = open
    }

    private func schedule(_ step: Step, at time: Duration) {
        scheduled += 1
        let entry = (at: max(time, clock.now), order: scheduled, step: step)
        let position = queue.firstIndex { $0.at > entry.at } ?? queue.endIndex
        queue.insert(entry, at: position)
    }

    private func scheduleTick(_ instant: ContinuousClock.Instant) {
        let time = max(instant - clock.base, clock.now)
        guard pendingTicks.insert(time).inserted else { return }
        schedule(.limiterTick, at: time)
    }

    private func log(_ index: Int, _ text: String) {
        timeline.append("\(clock.now.simSeconds) s: #\(index) \(script.requests[index].path) \(text)")
    }
}

/// The virtual time the parts read: `base + now`.
final class SimClock: @unchecked Sendable {  // read and moved by one simulation, on one task
    let base = ContinuousClock.now
    var now: Duration = .zero
    var instant: ContinuousClock.Instant { base + now }
    /// The wall-clock date a `Retry-After` date is measured from.
    var date: Date { Date(timeIntervalSince1970: 1_800_000_000 + now.simSeconds) }
}

extension Duration {
    /// Seconds as a `Double`, for logs and oracles.
    var simSeconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

extension SplitMix64 {
    fileprivate mutating func uniform(_ low: Double, _ high: Double) -> Double { Double.random(in: low..<high, using: &self) }
    /// A duration in `low..<high` seconds, to the microsecond (events of a script rarely tie).
    fileprivate mutating func seconds(_ low: Double, _ high: Double) -> Duration {
        .microseconds(Int64((uniform(low, high) * 1e6).rounded()))
    }
    fileprivate mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &self) }
    fileprivate mutating func chance(_ probability: Double) -> Bool { uniform(0, 1) < probability }
}

// MARK: - Seeded families and their oracles

/// Checks a run against what the script says each caller must see; appends what disagrees.
typealias SimOracle = (SimRun, inout [String]) -> Void

/// Outcomes compared to a millisecond (the virtual clock is exact; the oracles add durations
/// converted from `Double` seconds).
func simNear(_ left: Duration, _ right: Duration) -> Bool { abs((left - right).simSeconds) < 0.001 }

/// The hold's limit for a `timeoutInterval`, as its documentation says: just before it (a tenth
/// of it before, at most 0.25 s).
private func holdLimit(_ timeout: TimeInterval) -> Duration { .seconds(timeout - min(0.25, timeout / 10)) }

/// A cool-down after `failedProbes` failed probes, as the breaker's documentation says: 5 s,
/// doubled on each failed probe, at most 60 s.
private func coolDown(afterFailedProbes failedProbes: Int) -> Duration { min(.seconds(5 * (1 << min(failedProbes, 8))), .seconds(60)) }

enum SimFamily: CaseIterable {
    case outage, staysDown, closedByProbe, outageAnyLoad, flaky, pause, tooManyRequests, fiveHundreds, concurrentFiveHundreds, slow, burst,
        tokenUnderLoad

    /// What some script of the family must make a caller see ("opened", "closed": the circuit;
    /// "turn kept": a pass a refresh sent back kept its limiter turn; "two refreshes").
    var reaches: Set<String> {
        switch self {
        case .outage: return ["200", "URLError(-1004)"]
        case .staysDown: return ["URLError(-1004)", "circuitOpen", "opened"]
        case .closedByProbe: return ["200", "circuitOpen", "URLError(-1004)", "opened", "closed"]
        case .outageAnyLoad: return ["200", "circuitOpen", "URLError(-1004)", "opened", "closed"]
        case .concurrentFiveHundreds: return ["500", "circuitOpen", "opened"]
        case .flaky, .tooManyRequests, .burst: return ["200"]
        case .tokenUnderLoad: return ["200", "turn kept", "two refreshes"]
        case .pause: return ["200", "429", "503"]
        case .fiveHundreds: return ["200", "500", "circuitOpen", "opened", "closed"]
        case .slow: return ["200", "URLError(-1001)"]
        }
    }

    var salt: UInt64 { UInt64(Self.allCases.firstIndex(of: self)!) << 32 }

    func generate(_ random: inout SplitMix64) -> (SimScript, SimOracle) {
        switch self {
        case .outage: return Self.outage(&random)
        case .staysDown: return Self.staysDown(&random)
        case .closedByProbe: return Self.closedByProbe(&random)
        case .outageAnyLoad: return Self.outageAnyLoad(&random)
        case .concurrentFiveHundreds: return Self.concurrentFiveHundreds(&random)
        case .flaky: return Self.flaky(&random)
        case .pause: return Self.pause(&random)
        case .tooManyRequests: return Self.tooManyRequests(&random)
        case .fiveHundreds: return Self.fiveHundreds(&random)
        case .slow: return Self.slow(&random)
        case .burst: return Self.burst(&random)
        case .tokenUnderLoad: return Self.tokenUnderLoad(&random)
        }
    }

    /// When each request held on one host (held at `h`, expiring at `e`) is released, from the
    /// hold's documented probe schedule (a loop per host while anyone is held: first probe 0.5 s
    /// after the first hold, then doubling to 10 s; any answer from the host, back at `back`,
    /// releases everyone held) or `nil` when it expires first.
    static func holdReleases(_ held: [(h: Duration, e: Duration)], back: Duration, latency: Duration) -> [Duration?] {
        let order = held.indices.sorted { held[$0].h < held[$1].h }
        var released = [Duration?](repeating: nil, count: held.count)
        var next = 0
        while next < order.count {
            var members = [order[next]]
            next += 1
            var interval = Duration.milliseconds(500)
            var probe = held[members[0]].h + interval
            probing: while true {
                let answered = probe >= back ? probe + latency : probe
                while next < order.count, held[order[next]].h < answered {
                    let joins = held[order[next]].h
                    // The loop stopped when its last request expired: this one starts another.
                    guard members.contains(where: { held[$0].e > joins }) else { break probing }
                    members.append(order[next])
                    next += 1
                }
                let waiting = members.filter { held[$0].e > answered }
                if waiting.isEmpty { break }
                if probe >= back {
                    for member in waiting { released[member] = answered }
                    break
                }
                interval = min(interval * 2, .seconds(10))
                probe = answered + interval
            }
        }
        return released
    }

    /// Up, then down (connections refused) for 0.2 to 20 s; 1 to 4 GETs made during the outage
    /// (timeouts 1 to 15 s, so outages shorter and longer than them), maybe one before, one after.
    /// Each held GET ends 200 once the hold's probe finds the host back within its hold, else
    /// `cannotConnectToHost` just before its timeout; four failures cannot open the circuit.
    static func outage(_ random: inout SplitMix64) -> (SimScript, SimOracle) {
        let start = random.seconds(0, 3)
        let back = start + random.seconds(0.2, 20)
        let latency = random.seconds(0.005, 0.3)
        var requests: [SimRequest] = []
        for index in 0..<random.int(1...4) {
            let at = start + .microseconds(Int64(random.uniform(0, 1) * Double((back - start) / .microseconds(1))))
            requests.append(SimRequest(path: "/held\(index)", at: min(at, back - .microseconds(1)), timeout: random.uniform(1, 15)))
        }
        let heldCount = requests.count
        if random.chance(0.5), start > .milliseconds(10) {
            requests.append(SimRequest(path: "/before", at: random.seconds(0, start.simSeconds)))
        }
        requests.append(SimRequest(path: "/after", at: back + random.seconds(0, 2)))
        let script = SimScript(host: SimHost(down: [start..<back], latency: latency), requests: requests)
        let held = requests.prefix(heldCount).map { (h: $0.at, e: $0.at + holdLimit($0.timeout)) }
        let releases = holdReleases(held, back: back, latency: latency)
        return (
            script,
            { run, problems in
                for (index, end) in run.ends.enumerated() {
                    if index < heldCount {
                        if let release = releases[index] {
                            if end.result != .status(200) || !simNear(end.at, release + latency) {
                                problems.append(
                                    "#\(index): expected 200 at \((release + latency).simSeconds) s (released by the probe), got \(end)")
                            }
                        } else if end.result != .urlError(.cannotConnectToHost) || !simNear(end.at, held[index].e) {
                            problems.append("#\(index): expected cannotConnectToHost at \(held[index].e.simSeconds) s, got \(end)")
                        }
                    } else if end.result != .status(200) || !simNear(end.at, end.arrival + latency) {
                        problems.append("#\(index) (host up): expected 200 after the latency, got \(end)")
                    }
                }
                if !run.openings.isEmpty { problems.append("the circuit opened with at most 4 failures") }
            }
        )
    }

    /// A host down from the start for good; 5 to 8 GETs 0.1 to 2 s apart (timeouts 1 to 10 s).
    /// Held GETs fail with `cannotConnectToHost` just before their timeout; the fifth such end
    /// opens the circuit for 5 s; a GET while it is open is refused unsent; one after the
    /// cool-down is the probe, is refused by the host, doubles the cool-down, is held and expires.
    static func staysDown(_ random: inout SplitMix64) -> (SimScript, SimOracle) {
        var at = Duration.zero
        var requests: [SimRequest] = []
        for index in 0..<random.int(5...8) {
            at += index == 0 ? .zero : random.seconds(0.1, 2)
            requests.append(SimRequest(path: "/\(index)", at: at, timeout: random.uniform(1, 10)))
        }
        let script = SimScript(host: SimHost(down: [.zero..<(.seconds(3_600))]), requests: requests)
        // The oracle: arrivals and expiries in time order, the breaker as its documentation says.
        var expected: [(result: SimResult, at: Duration, sends: Int)?] = Array(repeating: nil, count: requests.count)
        var expiries: [(at: Duration, index: Int, counted: Bool)] = []
        var failures = 0
        var open: (until: Duration, failedProbes: Int)?
        var firstOpening: Duration?
        func expire(before time: Duration) {
            while let first = expiries.min(by: { $0.at < $1.at }), first.at < time {
                expiries.removeAll { $0.index == first.index }
                expected[first.index] = (.urlError(.cannotConnectToHost), first.at, 1)
                guard open == nil else { continue }
                failures += 1
                if failures >= 5 {
                    open = (first.at + coolDown(afterFailedProbes: 0), 0)
                    firstOpening = firstOpening ?? first.at
                }
            }
        }
        for (index, request) in requests.enumerated() {
            expire(before: request.at)
            if let circuit = open, request.at < circuit.until {
                expected[index] = (.circuitOpen, request.at, 0)
            } else {
                if let circuit = open {
                    open = (request.at + coolDown(afterFailedProbes: circuit.failedProbes + 1), circuit.failedProbes + 1)
                }
                expiries.append((request.at + holdLimit(request.timeout), index, open == nil))
            }
        }
        expire(before: .seconds(3_600))
        return (
            script,
            { run, problems in
                for (index, end) in run.ends.enumerated() {
                    guard let want = expected[index] else { continue }
                    if end.result != want.result || !simNear(end.at, want.at) || end.sends != want.sends {
                        problems.append(
                            "#\(index): expected \(want.result) at \(want.at.simSeconds) s after \(want.sends) send(s), got \(end)")
                    }
                }
                if run.openings.first.map({ simNear($0.at, firstOpening ?? .zero) }) != (firstOpening != nil ? true : nil) {
                    problems.append("expected the circuit to open at \(firstOpening?.simSeconds ?? -1) s, openings: \(run.openings)")
                }
                if let opening = run.openings.first, opening.failedEnds != 5 {
                    problems.append("opened after \(opening.failedEnds) failed tasks, not 5")
                }
            }
        )
    }

    /// Down from 0 until 6 to 20 s; five short GETs (timeouts 1 to 3 s) expire and open the
    /// circuit while a long one (30 s) is held; a GET during the cool-down is refused unsent; the
    /// hold's probe that reaches the host closes the circuit: the long GET and a GET after it end 200.
    static func closedByProbe(_ random: inout SplitMix64) -> (SimScript, SimOracle) {
        let back = random.seconds(6, 20)
        let latency = random.seconds(0.005, 0.3)
        var requests = (0..<5).map { SimRequest(path: "/short\($0)", at: random.seconds(0, 1), timeout: random.uniform(1, 3)) }
        requests.append(SimRequest(path: "/long", at: random.seconds(0, 1), timeout: 30))
        let held = requests.map { (h: $0.at, e: $0.at + holdLimit($0.timeout)) }
        let releases = holdReleases(held, back: back, latency: latency)
        let opened = held.prefix(5).map(\.e).max()!
        let release = releases[5] ?? .seconds(3_600)
        let refusedAt = opened + random.seconds(0.01, min(4.9, max(0.02, (release - opened).simSeconds - 0.01)))
        requests.append(SimRequest(path: "/refused", at: refusedAt, timeout: 10))
        requests.append(SimRequest(path: "/after", at: release + random.seconds(0.01, 2), timeout: 10))
        let script = SimScript(host: SimHost(down: [.zero..<back], latency: latency), requests: requests)
        return (
            script,
            { run, problems in
                for index in 0..<5 {
                    let end = run.ends[index]
                    let want: (SimResult, Duration) =
                        releases[index].map { (.status(200), $0 + latency) } ?? (.urlError(.cannotConnectToHost), held[index].e)
                    if end.result != want.0 || !simNear(end.at, want.1) { problems.append("#\(index): expected \(want), got \(end)") }
                }
                let shortFailures = releases.prefix(5).filter { $0 == nil }.count
                guard shortFailures == 5, releases[5] != nil else { return }  // the script did not open the circuit
                if run.openings.first.map({ simNear($0.at, opened) && $0.failedEnds == 5 }) != true {
                    problems.append("expected the circuit to open at \(opened.simSeconds) s after 5 failed tasks: \(run.openings)")
                }
                if run.ends[5].result != .status(200) || !simNear(run.ends[5].at, release + latency) {
                    problems.append("the long GET: expected 200 at \((release + latency).simSeconds) s, got \(run.ends[5])")
                }
                if refusedAt < release, run.ends[6].result != .circuitOpen || run.ends[6].sends != 0 {
                    problems.append("the GET during the cool-down: expected circuitOpen unsent, got \(run.ends[6])")
                }
                if run.closings.first.map({ simNear($0, release) }) != true {
                    problems.append("expected the circuit to close at the probe's answer \(release.simSeconds) s: \(run.closings)")
                }
                if run.ends[7].result != .status(200) { problems.append("the GET after the probe: expected 200, got \(run.ends[7])") }
            }
        )
    }

    /// Up, down for 0.5 to 30 s, up again; 5 to 15 GETs at any time up to 10 s after the return
    /// (timeouts 1 to 15 s), so that expiries may open the circuit while other GETs are held and
    /// the breaker's own probes meet the outage. No exact oracle: what must hold whatever the
    /// interleaving.
    /// - A caller ends 200, `cannotConnectToHost` or `circuitOpen`; `circuitOpen` only unsent:
    ///   a held request is never refused when the hold sends it (the probe that released it told
    ///   the breaker the host is back).
    /// - `cannotConnectToHost` comes exactly at the hold's limit after its last attempt, and only
    ///   for a hold that ended before the host had been back 10 s (the longest probe interval):
    ///   a held request whose hold outlasts that ends 200, after the return.
    /// - The circuit opens on 5 failed ends at the least.
    static func outageAnyLoad(_ random: inout SplitMix64) -> (SimScript, SimOracle) {
        let start = random.seconds(0, 2)
        let back = start + random.seconds(0.5, 30)
        let latency = random.seconds(0.005, 0.3)
        let requests = (0..<random.int(5...15)).map {
            SimRequest(path: "/\($0)", at: random.seconds(0, (back + .seconds(10)).simSeconds), timeout: random.uniform(1, 15))
        }
        let script = SimScript(host: SimHost(down: [start..<back], latency: latency), requests: requests)
        return (
            script,
            { run, problems in
                for (index, end) in run.ends.enumerated() {
                    let timeout = requests[index].timeout
                    switch end.result {
                    case .status(200):
                        if let sent = end.lastSend, sent >= start, sent < back {
                            problems.append("#\(index) ended 200 from a send during the outage: \(end)")
                        }
                    case .urlError(.cannotConnectToHost):
                        guard let sent = end.lastSend, simNear(end.at, sent + holdLimit(timeout)) else {
                            problems.append("#\(index): cannotConnectToHost not at the hold's limit: \(end)")
                            break
                        }
                        if end.at > back + .seconds(10) + latency * 2 {
                            problems.append("#\(index): held past the host's return and the next probe, yet failed: \(end)")
                        }
                    case .circuitOpen:
                        if end.sends != 0 { problems.append("#\(index): refused by the breaker after being sent (held?): \(end)") }
                    default:
                        problems.append("#\(index): unexpected \(end)")
                    }
                }
                if let opening = run.openings.first, opening.failedEnds < 5 {
                    problems.append("opened after \(opening.failedEnds) failed ends")
                }
            }
        )
    }

    /// 6 to 20 GETs at random times in 4 s to a host answering 500, 502 or 503 (no Retry-After)
    /// to everything, many in flight at once: the circuit opens at the fifth failed end exactly;
    /// then nothing reaches the host for the 5 s cool-down (retries under way are refused too);
    /// every caller ends with the 5xx or `circuitOpen`.
    static func concurrentFiveHundreds(_ random: inout SplitMix64) -> (SimScript, SimOracle) {
        let status = [500, 502, 503][random.int(0...2)]
        let latency = random.seconds(0.005, 0.3)
        let requests = (0..<random.int(6...20)).map { SimRequest(path: "/\($0)", at: random.seconds(0, 4)) }
        let script = SimScript(host: SimHost(latency: latency, answer: { _, _, _ in SimAnswer(status: status) }), requests: requests)
        return (
            script,
            { run, problems in
                for (index, end) in run.ends.enumerated() where end.result != .status(status) && end.result != .circuitOpen {
                    problems.append("#\(index): \(end)")
                }
                let fifth = run.ends.filter { $0.result == .status(status) }.map(\.at).sorted().dropFirst(4).first
                guard let fifth else { return }
                guard let opening = run.openings.first, simNear(opening.at, fifth), opening.failedEnds == 5 else {
                    return problems.append("expected the circuit to open at the fifth failed end, \(fifth.simSeconds) s: \(run.openings)")
                }
                let during = run.hitTimes.filter { $0 > opening.at && $0 < opening.at + .seconds(5) }
                if !during.isEmpty { problems.append("\(during.count) request(s) reached the host while the circuit was open") }
                for (index, end) in run.ends.enumerated() where end.arrival > opening.at && end.arrival < opening.at + .seconds(5) {
                    if end.result != .circuitOpen || end.sends != 0 { problems.append("#\(index) arrived while open: \(end)") }
                }
            }
        )
    }

    /// 1 to 8 GETs, each failing 0 to 2 times (500, 502, 503, or 503 with Retry-After 1 or 2 s)
    /// before 200: within the retry budget, each ends 200 and the circuit never opens.
    static func flaky(_ random: inout SplitMix64) -> (SimScript, SimOracle) {
        let count = random.int(1...8)
        let latency = random.seconds(0.005, 0.2)
        var failures: [String: (count: Int, answer: SimAnswer)] = [:]
        var requests: [SimRequest] = []
        var longestPause = 0.0
        for index in 0..<count {
            let path = "/flaky\(index)"
            let kind = random.int(0...3)
            let retryAfter = random.int(1...2)
            let answer = kind == 3 ? SimAnswer(status: 503, retryAfter: "\(retryAfter)") : SimAnswer(status: [500, 502, 503][kind])
            if kind == 3 { longestPause = max(longestPause, Double(retryAfter)) }
            failures[path] = (random.int(0...2), answer)
            requests.append(SimRequest(path: path, at: random.seconds(0, 4)))
        }
        let plan = failures
        let script = SimScript(
            host: SimHost(latency: latency, answer: { path, send, _ in send <= plan[path]!.count ? plan[path]!.answer : .ok }),
            requests: requests)
        return (
            script,
            { run, problems in
                for (index, end) in run.ends.enumerated() {
                    let failed = plan[requests[index].path]!.count
                    // Each attempt waits at most its back-off (1 s) or a pause, and for another
                    // request's pause (the limiter holds the host), and its turn in the bucket.
                    let bound =
                        end.arrival + .seconds(Double(failed + 1) * (1 + 2 * longestPause) + 0.05 * Double(count)) + latency * (failed + 1)
                    if end.result != .status(200) || end.sends != failed + 1 || end.at > bound {
                        problems.append("#\(index): expected 200 after \(failed + 1) sends by \(bound.simSeconds) s, got \(end)")
                    }
                }
                if !run.openings.isEmpty { problems.append("the circuit opened: \(run.openings)") }
            }
        )
    }

    /// A host answering 429 or 503 with Retry-After 1 to 3 s to everything until 0.5 to 8 s, then
    /// 200: a pause is never a failure (no caller is refused, the circuit never opens); a GET
    /// made after the pauses end ends 200; one alone is retried exactly when each pause ends.
    static func pause(_ random: inout SplitMix64) -> (SimScript, SimOracle) {
        let status = random.chance(0.5) ? 429 : 503
        let retryAfter = random.int(1...3)
        let until = random.seconds(0.5, 8)
        let latency = random.seconds(0.005, 0.2)
        let requests = (0..<random.int(1...6)).map { SimRequest(path: "/p\($0)", at: random.seconds(0, until.simSeconds + 2), timeout: 30) }
        let script = SimScript(
            host: SimHost(
                latency: latency, answer: { _, _, time in time < until ? SimAnswer(status: status, retryAfter: "\(retryAfter)") : .ok }),
            requests: requests)
        return (
            script,
            { run, problems in
                for (index, end) in run.ends.enumerated() {
                    if end.result != .status(200), end.result != .status(status) { problems.append("#\(index): \(end)") }
                    if end.arrival >= until, end.result != .status(200) { problems.append("#\(index) came after the pauses: \(end)") }
                }
                if !run.openings.isEmpty { problems.append("a pause opened the circuit: \(run.openings)") }
                guard requests.count == 1, let end = run.ends.first else { return }
                var attempt = requests[0].at
                var want: (SimResult, Duration) = (.status(status), .zero)
                for number in 1...3 {
                    if attempt >= until {
                        want = (.status(200), attempt + latency)
                        break
                    }
                    want = (.status(status), attempt + latency)
                    if number < 3 { attempt += latency + .seconds(retryAfter) }
                }
                if end.result != want.0 || !simNear(end.at, want.1) { problems.append("alone: expected \(want), got \(end)") }
            }
        )
    }

    /// One GET answered 429 with Retry-After 1 to 5 s, then 200; 0 to 5 GETs made during the
    /// pause wait for it: none is sent before it ends, all end 200, by one every 50 ms after it
    /// at the latest (they go together, `testAfterAPauseTheHostsRequestsGoTogetherUpToTheBurst`).
    static func tooManyRequests(_ random: inout SplitMix64) -> (SimScript, SimOracle) {
        let retryAfter = random.int(1...5)
        let latency = random.seconds(0.005, 0.2)
        let first = random.seconds(0, 1)
        let pauseEnds = first + latency + .seconds(retryAfter)
        var requests = [SimRequest(path: "/", at: first)]
        for _ in 0..<random.int(0...5) {
            requests.append(SimRequest(path: "/", at: random.seconds((first + latency).simSeconds + 0.001, pauseEnds.simSeconds - 0.001)))
        }
        let script = SimScript(
            host: SimHost(
                latency: latency, answer: { _, send, _ in send == 1 ? SimAnswer(status: 429, retryAfter: "\(retryAfter)") : .ok }),
            requests: requests)
        return (
            script,
            { run, problems in
                let ends = run.ends.map(\.at).sorted()
                let first = pauseEnds + latency - .milliseconds(1)
                let last = pauseEnds + .milliseconds(50 * (ends.count - 1)) + latency + .milliseconds(1)
                for (index, at) in ends.enumerated() where at < first || at > last {
                    problems.append("end \(index) at \(at.simSeconds) s, expected from \(first.simSeconds) to \(last.simSeconds) s")
                }
                if run.serverHits != ends.count + 1 { problems.append("\(run.serverHits) server hits, expected \(ends.count + 1)") }
                if run.ends.contains(where: { $0.result != .status(200) }) { problems.append("not every GET ended 200") }
                if !run.openings.isEmpty { problems.append("a 429 opened the circuit") }
            }
        )
    }

    /// 6 to 10 GETs 2 to 2.5 s apart, each to a path answering 500 to everything (30 to 100 % of
    /// them) or 200: the circuit opens at the end of the task that makes at least 5 failed tasks
    /// and at least half of the tasks ended since the first failure; while open, GETs are refused
    /// unsent; after the cool-down, one is the probe: a 200 closes, a 500 doubles the cool-down
    /// (and its retry is refused).
    static func fiveHundreds(_ random: inout SplitMix64) -> (SimScript, SimOracle) {
        let share = random.uniform(0.3, 1)
        let latency = random.seconds(0.005, 0.1)
        var at = Duration.zero
        var requests: [SimRequest] = []
        var bad: [Bool] = []
        for index in 0..<random.int(6...10) {
            at += index == 0 ? .zero : random.seconds(2, 2.5)
            bad.append(random.chance(share))
            requests.append(SimRequest(path: bad.last! ? "/bad\(index)" : "/good\(index)", at: at))
        }
        let script = SimScript(
            host: SimHost(latency: latency, answer: { path, _, _ in path.hasPrefix("/bad") ? SimAnswer(status: 500) : .ok }),
            requests: requests)
        return (
            script,
            { run, problems in
                var counts: (failures: Int, total: Int)?
                var open: (until: Duration, failedProbes: Int)?
                var firstOpening: (at: Duration, failedEnds: Int)?
                var failedEnds = 0
                for (index, end) in run.ends.enumerated() {
                    let arrival = requests[index].at
                    var want: (result: SimResult, sends: Int, from: Duration, to: Duration)
                    if let circuit = open, arrival < circuit.until {
                        want = (.circuitOpen, 0, arrival, arrival)
                    } else if let circuit = open {
                        if bad[index] {
                            // The probe's 500 reopens the circuit; its retry is refused.
                            open = (arrival + latency + coolDown(afterFailedProbes: circuit.failedProbes + 1), circuit.failedProbes + 1)
                            want = (.circuitOpen, 1, arrival + latency + .milliseconds(250), arrival + latency + .milliseconds(500))
                        } else {
                            open = nil
                            counts = nil
                            want = (.status(200), 1, arrival + latency, arrival + latency)
                        }
                    } else if bad[index] {
                        want = (.status(500), 3, arrival + latency * 3 + .milliseconds(750), arrival + latency * 3 + .milliseconds(1_500))
                        failedEnds += 1
                        counts = ((counts?.failures ?? 0) + 1, (counts?.total ?? 0) + 1)
                        if let counts, counts.failures >= 5, Double(counts.failures) >= 0.5 * Double(counts.total) {
                            open = (end.at + coolDown(afterFailedProbes: 0), 0)
                            firstOpening = firstOpening ?? (end.at, failedEnds)
                        }
                    } else {
                        if let current = counts { counts = (current.failures, current.total + 1) }
                        want = (.status(200), 1, arrival + latency, arrival + latency)
                    }
                    if end.result != want.result || end.sends != want.sends || end.at < want.from - .milliseconds(1)
                        || end.at > want.to + .milliseconds(1)
                    {
                        problems.append("#\(index) (\(bad[index] ? "500s" : "200")): expected \(want), got \(end)")
                    }
                }
                let opening = run.openings.first
                if (opening == nil) != (firstOpening == nil)
                    || opening.map({ !simNear($0.at, firstOpening!.at) || $0.failedEnds != firstOpening!.failedEnds }) == true
                {
                    problems.append(
                        "expected the circuit to open at \(String(describing: firstOpening)), it opened at \(String(describing: opening))")
                }
            }
        )
    }

    /// 1 to 4 GETs to a host answering after 0.05 to 12 s (timeouts 1.5 to 12 s): an answer within
    /// the timeout ends 200 after it; a slower one times out on each of the 3 attempts.
    static func slow(_ random: inout SplitMix64) -> (SimScript, SimOracle) {
        let latency = random.seconds(0.05, 12)
        let requests = (0..<random.int(1...4)).map {
            SimRequest(path: "/s\($0)", at: random.seconds(0, 3), timeout: random.uniform(1.5, 12))
        }
        let script = SimScript(host: SimHost(latency: latency), requests: requests)
        return (
            script,
            { run, problems in
                for (index, end) in run.ends.enumerated() {
                    let timeout = Duration.seconds(requests[index].timeout)
                    if latency < timeout {
                        if end.result != .status(200) || !simNear(end.at, end.arrival + latency) {
                            problems.append("#\(index): expected 200 after \(latency.simSeconds) s, got \(end)")
                        }
                    } else {
                        let from = end.arrival + timeout * 3 + .milliseconds(750)
                        let to = end.arrival + timeout * 3 + .milliseconds(1_500)
                        if end.result != .urlError(.timedOut) || end.sends != 3 || end.at < from - .milliseconds(1)
                            || end.at > to + .milliseconds(1)
                        {
                            problems.append(
                                "#\(index): expected timedOut after 3 sends between \(from.simSeconds) and \(to.simSeconds) s, got \(end)")
                        }
                    }
                }
                if !run.openings.isEmpty { problems.append("the circuit opened with at most 4 failures") }
            }
        )
    }

    /// 11 to 40 GETs at one instant: 10 go at once (the burst), then one every 50 ms (20 a second).
    static func burst(_ random: inout SplitMix64) -> (SimScript, SimOracle) {
        let at = random.seconds(0, 1)
        let latency = random.seconds(0.005, 0.2)
        let requests = (0..<random.int(11...40)).map { SimRequest(path: "/b\($0)", at: at) }
        return (
            SimScript(host: SimHost(latency: latency), requests: requests),
            { run, problems in
                for (index, end) in run.ends.enumerated() {
                    let want = at + .milliseconds(50 * max(0, index - 9)) + latency
                    if end.result != .status(200) || !simNear(end.at, want) {
                        problems.append("#\(index): expected 200 at \(want.simSeconds) s, got \(end)")
                    }
                }
            }
        )
    }
}

extension SimFamily {
    /// 20 to 150 GETs at one instant while the token expires once or twice in the limiter's line
    /// (at least 0.5 s apart): every GET ends 200, one refresh per expiry, the limiter gives one
    /// turn per request sent, caller by caller (each `401`'s retry is a request sent and takes
    /// one; a pass the refresh sent back is not and takes none), and the last GET ends within the
    /// limiter's schedule for what was sent plus one refresh and one answer. Before issue 50, each
    /// refresh put the whole line at its back: the turns outnumbered the sends and the line's end
    /// came a second or more late.
    static func tokenUnderLoad(_ random: inout SplitMix64) -> (SimScript, SimOracle) {
        let at = random.seconds(0, 0.5)
        let latency = random.seconds(0.005, 0.1)
        let count = random.int(20...150)
        let policy = StackSimulation.limiterPolicy
        let schedule = { (requests: Int) in Duration.seconds(Double(max(0, requests - policy.burst)) / policy.rate) }
        let span = schedule(count)
        var expiries = [at + .milliseconds(200) + random.seconds(0, max(0.01, (span - .milliseconds(400)).simSeconds))]
        if random.chance(0.5), span > .seconds(2) {
            let second = expiries[0] + .milliseconds(500) + random.seconds(0, max(0.01, (span - .seconds(1)).simSeconds))
            if second < at + span - .milliseconds(200) { expiries.append(second) }
        }
        let requests = (0..<count).map { SimRequest(path: "/u\($0)", at: at) }
        return (
            SimScript(host: SimHost(latency: latency), requests: requests, tokenExpiries: expiries),
            { run, problems in
                let statuses = run.ends.map(\.result)
                if !statuses.allSatisfy({ $0 == .status(200) }) { problems.append("not all 200: \(statuses)") }
                if run.refreshes != expiries.count { problems.append("\(run.refreshes) refreshes for \(expiries.count) expiries") }
                let sent = run.ends.map(\.sends).reduce(0, +)
                if sent != count + run.unauthorized { problems.append("\(sent) sent for \(count) GETs and \(run.unauthorized) 401s") }
                if run.turnsTaken != sent { problems.append("the limiter gave \(run.turnsTaken) turns for \(sent) requests sent") }
                for (index, end) in run.ends.enumerated() where end.turns != end.sends {
                    problems.append("#\(index): \(end.turns) turns for its \(end.sends) attempt(s) sent")
                }
                let last = run.ends.map(\.at).max() ?? .zero
                let bound = at + schedule(sent) + latency * 2 + .milliseconds(1)
                if last > bound { problems.append("the last GET ended at \(last.simSeconds) s, after \(bound.simSeconds) s") }
            }
        )
    }
}

// MARK: - The article's table

/// "What your users see when..." in the Resilience article: its rows, and how each is checked.
enum ArticleTable {
    struct Row {
        /// The script's name, the first `code` span of the first column.
        var key: String
        /// The second column: a short phrase this test reads.
        var outcome: String
    }

    /// The rows of the first table after the heading containing `heading`.
    static func rows(in article: String, under heading: String) -> [Row] {
        var lines = article.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let start = lines.firstIndex(where: { $0.hasPrefix("#") && $0.contains(heading) }) else { return [] }
        lines = Array(lines[(start + 1)...].drop { !$0.hasPrefix("|") }.prefix { $0.hasPrefix("|") })
        return lines.dropFirst(2).compactMap { line in
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 3 else { return nil }
            let parts = cells[1].split(separator: "`", omittingEmptySubsequences: false)
            guard parts.count >= 3 else { return Row(key: cells[1], outcome: cells[2]) }
            return Row(key: String(parts[1]), outcome: cells[2])
        }
    }

    /// Rows the simulation cannot run (OAuth2, sharing), with the outcome the real-HTTP tests of
    /// issue 38 check.
    static let checkedOverHTTP: [String: (outcome: String, checkedBy: String)] = [
        "token-outage": ("every GET ends 200, one refresh", "the real-HTTP scenario tests of issue 38"),
        "identical": ("at most 2 server hits", "the real-HTTP scenario tests of issue 38"),
    ]

    /// Rows the simulation runs.
    static var simulated: [String: SimScript] {
        [
            "flaky": NamedScripts.flaky, "outage": NamedScripts.outage, "stays-down": NamedScripts.staysDown,
            "5xx": NamedScripts.fiveHundreds(requests: 7), "429": NamedScripts.tooManyRequests, "slow": NamedScripts.slow(seconds: 3),
            "too-slow": NamedScripts.slow(seconds: 15), "token-under-load": NamedScripts.tokenUnderLoad,
        ]
    }

    static let codes: [String: URLError.Code] = ["cannotConnectToHost": .cannotConnectToHost, "timedOut": .timedOut]

    /// Why `run` does not show `outcome`, or `nil` when it does; an outcome this test cannot read
    /// disagrees.
    static func disagreement(of outcome: String, with run: SimRun, script: SimScript) -> String? {
        let words = outcome.split(separator: " ").map(String.init)
        let results = run.ends.map(\.result)
        let all200 = results.allSatisfy { $0 == .status(200) }
        func number(_ text: String) -> Double? { Double(text) }
        switch words {
        case let w where w.count == 3 && w[1] == "×" && w[2] == "200":
            guard let count = Int(w[0]) else { return "unreadable count" }
            return all200 && results.count == count ? nil : "\(results)"
        case let w where w.count == 7 && w[0] == "200" && w[1] == "within" && w[3] == "s" && outcome.hasSuffix("of the return"):
            guard let limit = number(w[2]), let back = script.host.down.first?.upperBound else { return "unreadable" }
            let last = run.ends.map(\.at).max() ?? .zero
            return all200 && last <= back + .seconds(limit) ? nil : "\(run.ends) (back at \(back.simSeconds) s)"
        case let w where w.count == 7 && w[0] == "URLError" && outcome.hasSuffix("s before the timeout"):
            guard let code = codes[w[1]], let early = number(w[2]) else { return "unreadable" }
            for (index, end) in run.ends.enumerated() {
                let want = end.arrival + .seconds(script.requests[index].timeout - early)
                if end.result != .urlError(code) || !simNear(end.at, want) { return "#\(index): \(end), expected at \(want.simSeconds) s" }
            }
            return nil
        case let w where w.count == 4 && w[0] == "circuitOpen" && w[1] == "after" && w[3] == "failures":
            guard let count = Int(w[2]) else { return "unreadable" }
            let failed = results.prefix(count).allSatisfy(\.isFailure)
            let refused = run.ends.dropFirst(count).allSatisfy { $0.result == .circuitOpen && $0.sends == 0 }
            return failed && refused && !results.dropFirst(count).isEmpty && run.openings.first?.failedEnds == count
                ? nil : "\(run.ends), openings \(run.openings)"
        case let w where w.count == 6 && w[0] == "200" && w[1] == "after" && w[2] == "the" && w[4] == "s" && w[5] == "pause":
            guard let pause = number(w[3]) else { return "unreadable" }
            let latency = script.host.latency
            let inTime = run.ends.allSatisfy {
                $0.at - $0.arrival >= .seconds(pause) && $0.at - $0.arrival <= .seconds(pause) + latency * 2 + .milliseconds(1)
            }
            return all200 && inTime ? nil : "\(run.ends)"
        case let w where w.count == 4 && w[0] == "200" && w[1] == "after" && w[3] == "s":
            guard let wait = number(w[2]) else { return "unreadable" }
            return all200 && run.ends.allSatisfy { simNear($0.at - $0.arrival, .seconds(wait)) } ? nil : "\(run.ends)"
        case let w
        where w.count == 13 && outcome.hasPrefix("every GET ends 200 within the limiter's schedule + ") && w[10] == "s,"
            && ["refresh", "refreshes"].contains(w[12]):
            let counts = ["one": 1, "two": 2, "three": 3]
            guard let margin = number(w[9]), let refreshes = counts[w[11]] ?? Int(w[11]) else { return "unreadable" }
            let policy = StackSimulation.limiterPolicy
            let first = script.requests.map(\.at).min() ?? .zero
            let schedule = Duration.seconds(Double(max(0, script.requests.count - policy.burst)) / policy.rate)
            let last = run.ends.map(\.at).max() ?? .zero
            return all200 && run.refreshes == refreshes && last <= first + schedule + .seconds(margin)
                ? nil
                : "\(run.ends.count) ends, the last at \(last.simSeconds) s (schedule \(schedule.simSeconds) s), \(run.refreshes) refreshes"
        case let w where w.count == 5 && w[0] == "URLError" && w[2] == "after" && w[4] == "attempts":
            guard let code = codes[w[1]], let attempts = Int(w[3]) else { return "unreadable" }
            return run.ends.allSatisfy { $0.result == .urlError(code) && $0.sends == attempts } ? nil : "\(run.ends)"
        default:
            return "an outcome this test cannot read"
        }
    }
}
