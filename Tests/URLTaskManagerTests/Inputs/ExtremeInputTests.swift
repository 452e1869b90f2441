import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
@testable import URLTaskResilience
import XCTest
import TestSupport

/// Extremes (0, negative, NaN, ±infinity, 1e300, `Int64.max`, `Int.min`) fed to every public
/// parameter that takes a duration, a count or a size, over real HTTP where the value is used
/// on the wire: no trap, and a sensible clamp or a typed error. 0.2.0 trapped on several of
/// them (marked "0.2.0 trapped").
final class ExtremeInputTests: XCTestCase {
    private var server: LoopbackServer!
    private let calls = LockedBox([String: Int]())

    /// Durations beyond any clock, both ways.
    private static let hugeDurations: [Duration] = [.seconds(Int64.max), .seconds(Int64.min), .seconds(1e16), .zero]
    private static let hugeCounts = [0, -1, Int.min, Int.max]
    private static let hugeDoubles: [Double] = [0, -1, .nan, .infinity, -.infinity, 1e300, -1e300, 1e-300, .greatestFiniteMagnitude]

    override func setUpWithError() throws {
        server = try LoopbackServer()
        server.route("/ok") { _ in .text("ok") }
        let calls = self.calls
        // The first call of each `?n=` answers the status in `s` with the `Retry-After` in `r`;
        // the next ones answer "ok".
        server.route("/once") { request in
            var query: [String: String] = [:]
            for item in URLComponents(string: "?" + (request.query ?? ""))?.queryItems ?? [] { query[item.name] = item.value }
            let key = query["n"] ?? ""
            let call = calls.withLock { counts in
                counts[key, default: 0] += 1
                return counts[key]!
            }
            guard call == 1 else { return .text("ok") }
            var response = ServerResponse.status(Int(query["s"] ?? "503") ?? 503)
            if let retryAfter = query["r"] { response.headers["Retry-After"] = retryAfter }
            return response
        }
        server.route("/fail") { _ in .status(500) }
    }

    override func tearDown() {
        server.shutdown()
    }

    private func url(_ path: String, _ items: [String: String] = [:]) -> URL {
        var components = URLComponents(url: server.url(path), resolvingAgainstBaseURL: false)!
        components.queryItems = items.isEmpty ? nil : items.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) }
        return components.url!
    }

    // MARK: The core

    /// A reactor's timeout too long for the clock (0.2.0 trapped in `Task.sleep`), or negative.
    func testReactorConfigurationExtremes() async throws {
        var round = 0
        for timeout in Self.hugeDurations + [nil] {
            for reactions in Self.hugeCounts {
                for runs in Self.hugeCounts {
                    round += 1
                    let configuration = URLTaskReactorConfiguration(
                        mode: .singleFlight(loopGuard: .init(maximumRuns: runs, window: .seconds(Int64.max)), afterwards: .sendAgain),
                        timeout: timeout, maximumReactionsPerTask: reactions)
                    let manager = URLTaskManager(reactors: [Unauthorized(configuration: configuration, work: url("/ok"))])
                    defer { manager.invalidateAndCancel() }
                    let result = await fetched(manager.session, URLRequest(url: url("/once", ["n": "r\(round)", "s": "401"])))
                    // Sent again after the reaction, or a typed error (too many reactions, a loop,
                    // a zero timeout that won the race with the work).
                    if result.status != 200 {
                        XCTAssertNotNil(result.taskError, "\(String(describing: timeout)) \(reactions) \(runs): \(result.label)")
                    }
                }
            }
        }
    }

    /// A batch size below 1 (0.2.0 trapped) sends at once; windows beyond the clock both ways.
    func testBatchInterceptorExtremes() async throws {
        for size in Self.hugeCounts + [nil] {
            for window in Self.hugeDurations + [nil] {
                let manager = URLTaskManager(
                    interceptors: [BatchInterceptor(size: size, window: window)], options: .init(maximumHoldTime: .milliseconds(200)))
                defer { manager.invalidateAndCancel() }
                let result = await fetched(manager.session, URLRequest(url: url("/ok")))
                if (size ?? 2) <= 1 || window.map({ $0 <= .zero }) == true {
                    XCTAssertEqual(result.status, 200, "size \(String(describing: size)), window \(String(describing: window))")
                } else {
                    XCTAssertTrue(result.status == 200 || result.taskError?.code == .holdTimedOut, result.label)
                }
            }
        }
    }

    /// The manager's options at their extremes: each request still ends.
    func testOptionsExtremes() async throws {
        for hold in Self.hugeDurations {
            for size in Self.hugeCounts {
                for window in Self.hugeDurations + [nil] {
                    let options = URLTaskManager.Options(
                        maximumHoldTime: hold, maximumReplayableBodySize: size, maximumRequestsInFlightPerHost: size,
                        eventBatchWindow: window)
                    let manager = URLTaskManager(
                        interceptors: [BatchInterceptor(size: 2, window: .milliseconds(50))],
                        reactors: [Unauthorized(configuration: .authentication)], options: options)
                    defer { manager.invalidateAndCancel() }
                    let events = manager.events(bufferingNewest: Int.min)
                    var request = URLRequest(url: url("/once", ["n": "o\(hold)\(size)\(String(describing: window))", "s": "401"]))
                    request.httpMethod = "POST"
                    request.httpBodyStream = InputStream(data: Data("body".utf8))
                    let result = await fetched(manager.session, request)
                    let ended =
                        result.status == 200 || result.taskError?.code == .holdTimedOut
                        || result.taskError?.code == .bodyNotReplayable
                    XCTAssertTrue(ended, "\(hold) \(size) \(String(describing: window)): \(result.label)")
                    _ = events
                }
            }
        }
    }

    /// A request's own `timeoutInterval` beyond what corelibs converts (it traps above about
    /// 9.2e15 s, on NaN and on infinity): the manager sends the longest wait instead.
    func testRequestTimeoutIntervalExtremes() async throws {
        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["X-Test": "1"])])
        defer { manager.invalidateAndCancel() }
        for interval in [1e16, 1e300, .infinity, .nan, .greatestFiniteMagnitude] {
            let result = await fetched(manager.session, URLRequest(url: url("/ok"), timeoutInterval: interval))
            XCTAssertEqual(result.status, 200, "\(interval)")
        }
    }

    // MARK: Resilience

    /// Back-off values that 0.2.0 refused with a trap (a multiplier below 1, jitter outside 0 to
    /// 1) or turned into one (`.seconds(inf)`): every wait is clamped to 0 to 100 years.
    func testRetryPolicyExtremes() {
        let longest = Duration.seconds(3_155_760_000)
        let answer = URLTaskOutcome.response(
            HTTPURLResponse(
                url: url("/x"), statusCode: 503, httpVersion: "HTTP/1.1", headerFields: ["Retry-After": "99999999999999999999"])!)
        for base in Self.hugeDurations {
            for maximum in Self.hugeDurations {
                for multiplier in Self.hugeDoubles {
                    for jitter in Self.hugeDoubles {
                        let backoff = RetryPolicy.Backoff(base: base, multiplier: multiplier, maximum: maximum, jitter: jitter)
                        for attempts in Self.hugeCounts {
                            let policy = RetryPolicy(maximumAttempts: attempts, backoff: backoff, maximumRetryAfter: maximum)
                            for attempt in [1, 2, 1_000, Int.max] {
                                let wait = policy.delay(afterAttempt: attempt, outcome: .failure(URLError(.timedOut)))
                                XCTAssertTrue((.zero...longest).contains(wait), "\(wait)")
                                let told = policy.delay(afterAttempt: attempt, outcome: answer)
                                XCTAssertEqual(told, min(max(maximum, .zero), longest), "Retry-After beyond any integer: the cap")
                            }
                        }
                    }
                }
            }
        }
    }

    /// A `Retry-After` beyond any integer, under caps beyond any clock: the reactor waits the
    /// longest wait (0.2.0 trapped in `Task.sleep`); its caller can still cancel.
    func testRetryReactorWaitsTheLongestWaitAndCancels() async throws {
        let policy = RetryPolicy(maximumRetryAfter: .seconds(Int64.max))
        let manager = URLTaskManager(reactors: [RetryReactor(policy: policy)])
        defer { manager.invalidateAndCancel() }
        let events = manager.events()
        let session = manager.session
        let request = URLRequest(url: url("/once", ["n": "huge", "r": "9223372036854775807"]))
        let call = Task { await fetched(session, request) }
        for await event in events {
            if case .reacted = event.kind { break }
        }
        call.cancel()
        let result = await call.value
        XCTAssertEqual(result.urlErrorCode, .cancelled, result.label)
    }

    /// Rates that are not positive (0.2.0 trapped on 0, negative and NaN) let one burst through
    /// and then nothing until the request's timeout; a tiny rate likewise (0.2.0 trapped
    /// converting 1e300 s); infinity limits nothing.
    func testRateLimiterRateExtremes() async throws {
        for rate in Self.hugeDoubles {
            for burst in [Int.min, Int.max] {
                let limiter = RateLimiter(
                    policy: .init(rate: rate, burst: burst, maximumQueueLength: Int.max, maximumPause: .seconds(Int64.max)))
                let manager = URLTaskManager(interceptors: [limiter])
                defer { manager.invalidateAndCancel() }
                let first = await fetched(manager.session, URLRequest(url: url("/ok"), timeoutInterval: 1))
                XCTAssertEqual(first.status, 200, "rate \(rate), burst \(burst)")
                let second = await fetched(manager.session, URLRequest(url: url("/ok"), timeoutInterval: 1))
                let flows = rate > 1 || burst == Int.max
                if flows {
                    XCTAssertEqual(second.status, 200, "rate \(rate), burst \(burst): \(second.label)")
                } else if !(rate > 0.1) {
                    XCTAssertEqual(second.urlErrorCode, .timedOut, "rate \(rate), burst \(burst): \(second.label)")
                }
            }
        }
    }

    /// A `Retry-After` of `Int64.max` under a pause cap of `Int64.max`: the host pauses for the
    /// longest wait and the next request times out (0.2.0 trapped in `Task.sleep(until:)`); a
    /// queue length below 1 refuses with a typed error.
    func testRateLimiterPauseAndQueueExtremes() async throws {
        let limiter = RateLimiter(policy: .init(rate: 1_000, burst: 10, maximumPause: .seconds(Int64.max)))
        let events = ResilienceTestKit.Events(limiter.events())
        let manager = URLTaskManager(interceptors: [limiter])
        defer { manager.invalidateAndCancel() }
        let paused = await fetched(manager.session, URLRequest(url: url("/once", ["n": "p", "s": "429", "r": "9223372036854775807"])))
        XCTAssertEqual(paused.status, 429)
        let next = await fetched(manager.session, URLRequest(url: url("/ok"), timeoutInterval: 1))
        XCTAssertEqual(next.urlErrorCode, .timedOut, next.label)
        try await events.wait("the host paused") { if case .paused = $0 { return true } else { return false } }
        let pauses = events.all.lazy.compactMap { if case .paused(_, let duration, _) = $0 { return duration } else { return nil } }.first
        XCTAssertEqual(pauses, .seconds(3_155_760_000))

        for length in [Int.min, -1, 0] {
            let limiter = RateLimiter(policy: .init(rate: 1e-300, burst: 1, maximumQueueLength: length))
            let manager = URLTaskManager(interceptors: [limiter])
            defer { manager.invalidateAndCancel() }
            _ = await fetched(manager.session, URLRequest(url: url("/ok")))
            let refused = await fetched(manager.session, URLRequest(url: url("/ok")))
            XCTAssertEqual(refused.taskError?.code, .rateLimitQueueFull, "\(length): \(refused.label)")
        }
    }

    /// Thresholds and windows at their extremes: a breaker counts and refuses, never traps.
    func testCircuitBreakerExtremes() async throws {
        for threshold in Self.hugeCounts {
            for duration in Self.hugeDurations {
                let breaker = CircuitBreaker(
                    policy: .init(failureThreshold: threshold, window: duration, coolDown: duration, probeTimeout: duration))
                let manager = URLTaskManager(interceptors: [breaker])
                defer { manager.invalidateAndCancel() }
                for _ in 0..<2 {
                    let result = await fetched(manager.session, URLRequest(url: url("/fail")))
                    XCTAssertTrue(result.status == 500 || result.taskError?.code == .circuitOpen, result.label)
                }
            }
        }
    }

    /// Probe intervals of zero (a tight loop) or beyond the clock, a probe timeout corelibs
    /// would trap on, a hold limit beyond the clock, a request timeout of 1e300 s (0.2.0
    /// trapped converting it to milliseconds): the request is held, probed and given up.
    func testOfflineHoldExtremes() async throws {
        let closed = try LoopbackServer()
        let unreachable = closed.url("/gone")
        closed.shutdown()
        for interval in Self.hugeDurations {
            for hold in [Duration.milliseconds(300), .seconds(Int64.min)] {
                let offline = OfflineHold(
                    policy: .init(
                        probeInterval: interval, maximumProbeInterval: interval, probeTimeout: .seconds(Int64.max), maximumHold: hold,
                        maximumHoldsPerTask: Int.max))
                let manager = URLTaskManager(reactors: [offline])
                defer { manager.invalidateAndCancel() }
                let result = await fetched(manager.session, URLRequest(url: unreachable, timeoutInterval: 1e300))
                XCTAssertEqual(result.urlErrorCode, .cannotConnectToHost, result.label)
            }
        }
        // Held until just before a timeout of 1e300 s: the longest wait, which the caller ends.
        for timeout in [1e300, .infinity, 9.3e15] {
            let offline = OfflineHold(policy: .init(maximumHoldsPerTask: Int.min))
            let held = ResilienceTestKit.Events(offline.events())
            let manager = URLTaskManager(reactors: [offline])
            defer { manager.invalidateAndCancel() }
            let session = manager.session
            let call = Task { await fetched(session, URLRequest(url: unreachable, timeoutInterval: timeout)) }
            try await held.wait("held (\(timeout))") { if case .held = $0 { return true } else { return false } }
            let host = held.all.lazy.compactMap { if case .held(_, let host, _) = $0 { return host } else { return nil } }.first
            XCTAssertNotNil(host, "\(timeout)")
            call.cancel()
            let result = await call.value
            XCTAssertEqual(result.urlErrorCode, .cancelled, "\(timeout): \(result.label)")
        }
        XCTAssertEqual(OfflineHold.holdLimit(timeoutInterval: 1e300), .seconds(3_155_760_000))
    }
}

/// Reacts to a 401 by asking `work` (when set) over HTTP, so its run takes a moment and its
/// deadline's timer starts, then has the task sent again.
private struct Unauthorized: URLTaskReactor {
    let configuration: URLTaskReactorConfiguration
    var work: URL?
    /// One session for every run.
    private static let session = URLSession(configuration: .ephemeral)

    func shouldReact(to outcome: URLTaskOutcome, of task: URLTask) -> Bool {
        if case .response(let response) = outcome { return response.statusCode == 401 }
        return false
    }

    func react(to outcome: URLTaskOutcome, body: Data, of task: URLTask) async throws {
        guard let work else { return }
        // Not cancelled with the run: corelibs traps when an async data task is cancelled as a
        // reactor's timeout cancels its work; the run's deadline leaves it to finish.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Self.session.dataTask(with: work) { _, _, _ in done.resume() }.resume()
        }
    }
}
