import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import URLTaskManager
import URLTaskOAuth2

/// Plain URLSession beside the manager's configurations: sequential and concurrent GETs.
enum LatencyBenchmark {
    /// One way of sending a GET, and how to let go of what it holds when the run ends. Most
    /// are a `URLSession`; `RemoteBenchmark.run` also takes others, built outside this package
    /// (the README's comparison with Alamofire).
    struct Configuration: Sendable {
        let name: String
        let get: @Sendable (URL) async throws -> Void
        let invalidate: @Sendable () -> Void

        init(name: String, get: @escaping @Sendable (URL) async throws -> Void, invalidate: @escaping @Sendable () -> Void) {
            self.name = name
            self.get = get
            self.invalidate = invalidate
        }

        init(name: String, session: URLSession) {
            self.init(name: name, get: { try await LatencyBenchmark.get(session, $0) }, invalidate: { session.finishTasksAndInvalidate() })
        }
    }

    static let rounds = 5
    static let sequentialCount = 2_000
    static let concurrency = [10, 200, 1_000]

    static func run() async throws {
        let (server, base) = try ServerProcess.start()
        defer { server.terminate() }
        let url = base.appendingPathComponent("small")
        let configurations = makeConfigurations(base: base, indices: defaultIndices)
        defer { for configuration in configurations { configuration.invalidate() } }

        // Warm up: connections, caches, lazy initialisation.
        for configuration in configurations {
            try await sequential(configuration, url, count: 200)
            try await concurrent(configuration, url, count: 200)
        }

        var sequentialRounds = Array(repeating: [PerRequest](), count: configurations.count)
        var concurrentRounds = Array(repeating: Array(repeating: [PerRequest](), count: configurations.count), count: concurrency.count)
        for _ in 0..<rounds {
            for (index, configuration) in configurations.enumerated() {
                let start = Usage.now
                try await sequential(configuration, url, count: sequentialCount / rounds)
                sequentialRounds[index].append(Usage.perRequest(since: start, requests: sequentialCount / rounds))
            }
            for (level, count) in concurrency.enumerated() {
                for (index, configuration) in configurations.enumerated() {
                    let start = Usage.now
                    try await concurrent(configuration, url, count: count)
                    concurrentRounds[level][index].append(Usage.perRequest(since: start, requests: count))
                }
            }
        }

        print(
            "URLTaskManager benchmarks: \(ProcessInfo.processInfo.activeProcessorCount) cores, server in a child process on 127.0.0.1, GET of a 2-byte body"
        )
        print("medians of \(rounds) interleaved rounds, per request; ratio = configuration / plain URLSession in this run\n")
        report("\(sequentialCount) sequential GETs", configurations, sequentialRounds)
        for (level, count) in concurrency.enumerated() {
            report("\(count) concurrent GETs", configurations, concurrentRounds[level])
        }
    }

    /// The configurations of the default run: 0 to 5 and the manager's own `data(for:)` (11
    /// and 12, beside the session door's 2 and 5). Left out: the streamed forwarding protocol
    /// and the async-only header, experiments run with `against ... --configurations 0,1,2,6`
    /// and `--configurations 0,3,7,8`, and plain sessions that send a header themselves
    /// (`--configurations 0,9,10`).
    static let defaultIndices = Array(0...5) + [11, 12]

    /// The configurations compared, plain URLSession first (their indices name them on the
    /// command line of `profile`, `against` and `requests`).
    static let names = [
        "plain URLSession",
        "bare forwarding URLProtocol",
        "manager, no interceptors",
        "manager, 1 HeaderInterceptor",
        "  … with an events reader",
        "manager, OAuth2 bearer + refresh",
        "forwarding URLProtocol, streamed",
        "manager, 1 Header, async path",
        "manager, 1 setValue interceptor",
        "plain URLSession, 1 header",
        "plain URLSession, bearer header",
        "manager.data(for:), no interceptors",
        "manager.data(for:), OAuth2 kit",
    ]

    /// Every configuration, or those at `indices`, in that order.
    static func makeConfigurations(base: URL, indices: [Int]? = nil) -> [Configuration] {
        (indices ?? Array(names.indices)).map { makeConfiguration($0, base: base) }
    }

    /// Configuration `index` (an index of `names`): a session's `data(from:)`, or the manager's
    /// own `data(for:)` (11 and 12: configurations 2 and 5 through the methods, no outer task).
    static func makeConfiguration(_ index: Int, base: URL) -> Configuration {
        let manager: URLTaskManager
        switch index {
        case 11: manager = URLTaskManager()
        case 12: manager = oauth2Manager(base: base)
        default: return Configuration(name: names[index], session: makeSession(index, base: base))
        }
        return Configuration(
            name: names[index],
            get: { url in
                let (_, response) = try await manager.data(for: URLRequest(url: url))
                guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw URLError(.badServerResponse) }
            },
            invalidate: { manager.finishTasksAndInvalidate() })
    }

    /// The session of configuration `index` (an index of `names`).
    static func makeSession(_ index: Int, base: URL) -> URLSession {
        switch index {
        case 0:
            return URLSession(configuration: .default)
        case 1:
            // The floor of any URLProtocol over an inner URLSession (see ForwardingProtocol).
            return ForwardingProtocol.makeSession()
        case 2:
            return URLTaskManager().session
        case 3:
            return URLTaskManager(interceptors: [HeaderInterceptor(["X-Bench": "1"])]).session
        case 4:
            // The same with someone reading every task's events (the row above has no reader).
            return observedSession()
        case 6:
            // The floor with the manager's way of delivering: three delegate events, not one
            // completion (see StreamingForwardingProtocol).
            return StreamingForwardingProtocol.makeSession()
        case 7:
            // Configuration 3's HeaderInterceptor behind the public async `intercept` alone: the
            // same work, plus the Swift task the manager starts for an async interceptor.
            return URLTaskManager(interceptors: [AsyncOnly(HeaderInterceptor(["X-Bench": "1"]))]).session
        case 8:
            // The same header as a third party writes it: `setValue` in the async `intercept`.
            return URLTaskManager(interceptors: [SetValueHeader()]).session
        case 9:
            // Plain URLSession sending configuration 3's header itself: what corelibs charges for
            // a request with a header at all, whoever put it there.
            let configuration = URLSessionConfiguration.default
            configuration.httpAdditionalHeaders = ["X-Bench": "1"]
            return URLSession(configuration: configuration)
        case 10:
            // The same with configuration 5's `Authorization` header.
            let configuration = URLSessionConfiguration.default
            configuration.httpAdditionalHeaders = ["Authorization": "Bearer bench"]
            return URLSession(configuration: configuration)
        default:
            return oauth2Manager(base: base).session
        }
    }

    /// A bearer header on every request and a refresh reactor that holds new tasks, so the
    /// manager also keeps the per-host queue.
    static func oauth2Manager(base: URL) -> URLTaskManager {
        let authenticator = OAuth2Authenticator(
            origins: [base],
            store: InMemoryCredentialStore(OAuth2Credential(accessToken: "bench", refreshToken: "r", expiresAt: .distantFuture)),
            refresh: { _ in fatalError("the benchmark's token never needs a refresh") }
        )
        return URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: authenticator)],
            reactors: [OAuth2RefreshReactor(authenticator: authenticator)]
        )
    }

    /// A manager with one header interceptor whose events a task reads and drops.
    static func observedSession() -> URLSession {
        let manager = URLTaskManager(interceptors: [HeaderInterceptor(["X-Bench": "1"])])
        let events = manager.events()
        Task { for await _ in events {} }
        return manager.session
    }

    /// One configuration alone, `concurrency` GETs at a time for `seconds`, for a profiler:
    /// `perf record -e cpu-clock -g .build/release/Benchmarks profile 1 200 10`.
    static func profile(configuration index: Int, concurrency: Int, seconds: Double) async throws {
        let (server, base) = try ServerProcess.start()
        defer { server.terminate() }
        let url = base.appendingPathComponent("small")
        let configurations = makeConfigurations(base: base)
        guard configurations.indices.contains(index) else {
            print("configurations: " + configurations.enumerated().map { "\($0.offset) \($0.element.name)" }.joined(separator: ", "))
            return
        }
        let configuration = configurations[index]
        let start = Usage.now
        var requests = 0
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            if concurrency <= 1 {
                try await configuration.get(url)
            } else {
                try await concurrent(configuration, url, count: concurrency)
            }
            requests += max(concurrency, 1)
        }
        let figures = Usage.perRequest(since: start, requests: requests)
        print(
            "\(configurations[index].name): \(requests) GETs, per request: wall \(figures.wallMilliseconds) ms, CPU \(figures.cpuMilliseconds) ms, \(figures.contextSwitches) context switches"
        )
    }

    static func get(_ session: URLSession, _ url: URL) async throws {
        let (_, response) = try await session.data(from: url)
        guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw URLError(.badServerResponse) }
    }

    static func sequential(_ configuration: Configuration, _ url: URL, count: Int) async throws {
        let get = configuration.get
        for _ in 0..<count { try await get(url) }
    }

    static func concurrent(_ configuration: Configuration, _ url: URL, count: Int) async throws {
        let get = configuration.get
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<count { group.addTask { try await get(url) } }
            try await group.waitForAll()
        }
    }

    static func report(_ title: String, _ configurations: [Configuration], _ rounds: [[PerRequest]]) {
        func cell(_ text: String, _ width: Int, left: Bool = false) -> String {
            let pad = String(repeating: " ", count: max(0, width - text.count))
            return left ? text + pad : pad + text
        }
        func number(_ value: Double, _ digits: Int) -> String { String(format: "%.\(digits)f", value) }
        let medians = rounds.map(PerRequest.median)
        let plain = medians[0]
        print(title)
        print(
            cell("", 38, left: true) + cell("wall ms", 9) + cell("ratio", 7) + cell("CPU ms", 9) + cell("ratio", 7) + cell("ctx sw", 8)
                + cell("+plain", 8))
        for (index, configuration) in configurations.enumerated() {
            let m = medians[index]
            print(
                cell("  " + configuration.name, 38, left: true)
                    + cell(number(m.wallMilliseconds, 3), 9) + cell(number(m.wallMilliseconds / plain.wallMilliseconds, 2) + "x", 7)
                    + cell(number(m.cpuMilliseconds, 3), 9) + cell(number(m.cpuMilliseconds / plain.cpuMilliseconds, 2) + "x", 7)
                    + cell(number(m.contextSwitches, 1), 8)
                    + cell(String(format: index == 0 ? "%.1f" : "%+.1f", m.contextSwitches - plain.contextSwitches), 8))
        }
        print("")
    }
}

/// An interceptor reached through the public async `intercept` only, as any interceptor of a
/// third party is: configuration 3 against 7 is what the manager's synchronous path saves.
struct AsyncOnly: URLTaskInterceptor {
    let wrapped: any URLTaskInterceptor

    init(_ wrapped: any URLTaskInterceptor) {
        self.wrapped = wrapped
    }

    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        try await wrapped.intercept(&task, context: context)
    }
}

/// Sets `X-Bench: 1` as an app would write it: `setValue` in the async `intercept`.
struct SetValueHeader: URLTaskInterceptor {
    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        task.request.setValue("1", forHTTPHeaderField: "X-Bench")
        return .execute
    }
}
