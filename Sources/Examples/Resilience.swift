import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2
import URLTaskResilience

extension Scenario {
    static let coalescing = Scenario(
        name: "coalescing", summary: "100 identical GETs in flight at once: one request reaches the server, every caller gets the answer"
    ) { transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let catalog = Data(repeating: UInt8(ascii: "c"), count: 64 << 10)
        // The server answers once every caller is on its way (a slow backend, made certain: on
        // a busy machine the 100th task may start more than a fixed delay after the first).
        let answer = Gate()
        server.route("/catalog") { _ in
            _ = answer.wait(timeout: .seconds(10))
            return ServerResponse(body: .data(catalog))
        }

        // DocC coalescing: begin
        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(interceptors: [coalescing])
        // DocC coalescing: end

        // Open the answer once 99 callers listen to the one request that went out.
        let decisions = coalescing.events()
        Task {
            var joined = 0
            for await event in decisions {
                if case .joined = event { joined += 1 }
                if joined == 99 { break }
            }
            answer.open()
        }

        let started = ContinuousClock.now
        let bodies = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<100 { group.addTask { try await manager.session.data(from: server.url("/catalog")).0.count } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let elapsed = started.duration(to: .now)
        transcript.client(
            "100 × GET /catalog → \(bodies.filter { $0 == catalog.count }.count) complete 64 KiB bodies in \(elapsed.milliseconds) ms")
        transcript.server("/catalog was requested \(server.requestCount(path: "/catalog")) time(s)")
        try transcript.check(bodies.allSatisfy { $0 == catalog.count }, "a caller got a partial body")
        try transcript.check(server.requestCount(path: "/catalog") == 1, "more than one request reached the server")
        transcript.conclude("100 callers, 1 server hit")
    }

    static let circuitBreaker = Scenario(
        name: "circuit-breaker", summary: "A failing host: the circuit opens after 3 failures, fails fast, then one probe closes it"
    ) { transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let healthy = Counter()
        server.route("/status") { _ in healthy.value > 0 ? .text("up") : .status(503) }

        // DocC circuit-breaker: begin
        let breaker = CircuitBreaker(policy: .init(failureThreshold: 3, window: .seconds(10), coolDown: .milliseconds(300)))
        let manager = URLTaskManager(interceptors: [breaker])
        // DocC circuit-breaker: end

        for _ in 0..<3 {
            let (_, response) = try await manager.session.data(from: server.url("/status"))
            transcript.client("GET /status → \((response as? HTTPURLResponse)?.statusCode ?? 0)")
        }
        let started = ContinuousClock.now
        var refusal = ""
        do {
            _ = try await manager.session.data(from: server.url("/status"))
        } catch let error as URLTaskError where error.code == .circuitOpen {
            refusal = "\(error.underlying!)"
        }
        let refusalTime = started.duration(to: .now)
        transcript.client("GET /status → failed in \(refusalTime.milliseconds) ms: \(refusal)")
        transcript.server("/status answered \(server.requestCount(path: "/status")) times")
        try transcript.check(!refusal.isEmpty && server.requestCount(path: "/status") == 3, "the open circuit did not fail fast")

        healthy.next()
        try await Task.sleep(for: .milliseconds(350))  // the cool-down, as an app would live through it
        let (probe, _) = try await manager.session.data(from: server.url("/status"))
        transcript.client("after the cool-down: GET /status (the probe) → \(String(decoding: probe, as: UTF8.self)); circuit closed")
        try transcript.check(
            String(decoding: probe, as: UTF8.self) == "up" && !breaker.isOpen(for: server.url("/")), "the probe did not close it")
        transcript.conclude("opened after 3 failures, refused in \(refusalTime.milliseconds) ms without the network, closed by one probe")
    }

    static let rateLimit = Scenario(
        name: "rate-limit", summary: "10 requests at 5 a second (bursts of 2), in order; a 429 with Retry-After pauses the host"
    ) { transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let limited = Counter()
        server.route("/items") { _ in .text("ok") }
        server.route("/busy") { _ in
            limited.next() == 1 ? ServerResponse(status: 429, headers: ["Retry-After": "1"]) : .text("ok")
        }

        // DocC rate-limit: begin
        let limiter = RateLimiter(policy: .init(rate: 5, burst: 2))
        let manager = URLTaskManager(interceptors: [limiter], reactors: [RetryReactor()])
        // DocC rate-limit: end

        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<10 {
                group.addTask { _ = try await manager.session.data(from: server.url("/items?n=\(index)")) }
            }
            try await group.waitForAll()
        }
        let arrivals = server.requests(path: "/items").map { started.duration(to: $0.arrivedAt).milliseconds }
        transcript.server("/items arrivals (ms): \(arrivals.map(String.init).joined(separator: " "))")
        let spread = started.duration(to: .now)
        try transcript.check(spread >= .milliseconds(1_400), "10 requests at 5/s with a burst of 2 took only \(spread)")

        let pausedStart = ContinuousClock.now
        let (busy, _) = try await manager.session.data(from: server.url("/busy"))
        let paused = pausedStart.duration(to: .now)
        transcript.client(
            "GET /busy → 429 Retry-After: 1, retried after the pause → \(String(decoding: busy, as: UTF8.self)) in \(paused.milliseconds) ms"
        )
        try transcript.check(paused >= .milliseconds(950), "Retry-After did not pause the host")
        transcript.conclude("10 requests spread over \(spread.milliseconds) ms; a 429 paused the host \(paused.milliseconds) ms")
    }

    static let offline = Scenario(
        name: "offline", summary: "A request to a host that is down is held, and sent when a probe finds the host back"
    ) { transcript in
        let first = try LoopbackServer()
        let port = first.port
        first.shutdown()

        // DocC offline: begin
        let hold = OfflineHold(policy: .init(probeInterval: .milliseconds(100), maximumProbeInterval: .seconds(1)))
        let manager = URLTaskManager(reactors: [hold, RetryReactor()])
        // DocC offline: end

        let events = hold.events()
        let request = Task { try await manager.session.data(from: first.url("/inbox")) }
        for await event in events {
            if case .held(_, let host, let code) = event {
                transcript.client("GET /inbox: \(host) cannot be reached (\(code.rawValue)); held")
                break
            }
        }
        let server = try LoopbackServer(configuration: .init(port: port))
        defer { server.shutdown() }
        server.route("/inbox") { _ in .text("3 new messages") }
        transcript.server("back on port \(port)")
        let (data, _) = try await request.value
        transcript.client("GET /inbox → \(String(decoding: data, as: UTF8.self))")
        try transcript.check(String(decoding: data, as: UTF8.self) == "3 new messages", "the held request did not complete")
        transcript.conclude("held while the host was down, answered once a probe found it back")
    }
}

extension Duration {
    /// Whole milliseconds, for a transcript line.
    var milliseconds: Int {
        let (seconds, attoseconds) = components
        return Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000)
    }
}

// The resilience components with the OAuth2 kit, in the documented order (compiled, shown in
// the README and the Resilience article; `swift run Examples putting-it-together` runs it with
// two authenticators).
// README resilience: begin
func recommendedManager(auth: OAuth2Authenticator) -> URLTaskManager {
    let breaker = CircuitBreaker(policy: .init(exempts: { auth.isTokenRequest($0) }))
    let limiter = RateLimiter(policy: .init(rate: 20, burst: 10))
    let coalescing = CoalescingInterceptor()
    return URLTaskManager(
        // the manager checks the order: a wrong one stops at init, naming the parts and an order that works
        interceptors: [breaker, BearerInterceptor(authenticator: auth), coalescing, limiter],
        reactors: [OAuth2RefreshReactor(authenticator: auth), OfflineHold(), RetryReactor()]
    )
}
// README resilience: end

// Every setting of the resilience parts and of the OAuth2 kit's endpoint and authenticator,
// spelled out with its default (compiled; shown in the Resilience and OAuth2 articles).
// DocC every setting: begin
func everySetting(api: URL, tokenURL: URL) -> URLTaskManager {
    let retry = RetryPolicy(
        maximumAttempts: 3, retryableStatusCodes: [408, 429, 500, 502, 503, 504],
        retryableMethods: ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"],
        retryableURLErrorCodes: [.timedOut, .networkConnectionLost, .cannotConnectToHost],
        backoff: RetryPolicy.Backoff(base: .milliseconds(500), multiplier: 2, maximum: .seconds(30), jitter: 0.5),
        honorsRetryAfter: true, maximumRetryAfter: .seconds(60))
    let breaker = CircuitBreaker(
        policy: .init(
            failureThreshold: 5, failureRatio: 0.5, window: .seconds(30), coolDown: .seconds(5),
            maximumCoolDown: .seconds(60), probeTimeout: .seconds(60), maximumHosts: 4_096),
        health: .shared)
    let limiter = RateLimiter(
        policy: .init(rate: 20, burst: 10, maximumQueueLength: 100, pausingStatuses: [429, 503], maximumPause: .seconds(60)))
    let hold = OfflineHold(
        policy: .init(
            codes: [.notConnectedToInternet, .cannotConnectToHost, .networkConnectionLost],
            probeInterval: .milliseconds(500), maximumProbeInterval: .seconds(10), probeTimeout: .seconds(5),
            probeURL: OfflineHold.hostRoot, maximumHold: .seconds(120), maximumHoldsPerTask: 10))
    let endpoint = OAuth2TokenEndpoint(
        url: tokenURL, clientID: "app", clientSecret: nil, clientAuthentication: .basic,
        timeout: OAuth2TokenEndpoint.defaultTimeout, lateAnswerLimit: OAuth2TokenEndpoint.defaultLateAnswerLimit,
        answerSizeLimit: OAuth2TokenEndpoint.defaultAnswerSizeLimit)
    let auth = OAuth2Authenticator(
        origins: [api], tokenEndpoint: endpoint, store: InMemoryCredentialStore(),
        refreshLeeway: .seconds(60), refreshBackoff: OAuth2Authenticator.defaultRefreshBackoff)
    return URLTaskManager(
        interceptors: [breaker, BearerInterceptor(authenticator: auth), CoalescingInterceptor(), limiter],
        reactors: [OAuth2RefreshReactor(authenticator: auth), hold, RetryReactor(policy: retry)])
}
// DocC every setting: end
