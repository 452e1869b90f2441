import Foundation
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2
import URLTaskRedis
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension Scenario {
    /// How many processes the fleet scenario starts, and how many requests each sends at once.
    static let fleetProcesses = 4
    static let fleetRequests = 50

    static let fleet = Scenario(
        name: "fleet",
        summary: "4 processes share one credential (one refresh) and one rate limit (50/s) through a local redis-server"
    ) { transcript in
        guard let executable = FleetRedis.executable else {
            throw Scenario.Skipped(reason: FleetRedis.missingMessage)
        }
        let redis = try FleetRedis(executable: executable)
        defer { redis.stop() }
        transcript.note("redis-server on 127.0.0.1:\(redis.port), no persistence, stopped at the end")
        let server = try OAuthServer(name: "fleet")  // no access token valid yet: the stored one has expired
        defer { server.shutdown() }

        // The fleet signs in once; every process loads the credential from Redis.
        let prefix = "urltask:cred:{examples}"
        let client = RedisClient(configuration: .init(endpoint: .tcp(host: "127.0.0.1", port: redis.port)))
        defer { client.close() }
        let signer = FleetCredential(
            client: client, configuration: .init(keyPrefix: prefix), tokenEndpoint: OAuth2TokenEndpoint(url: server.tokenURL))
        defer { signer.shutdown() }
        try await signer.makeAuthenticator(origins: [server.baseURL])
            .signIn(OAuth2Credential(accessToken: "expired", refreshToken: "refresh-0", expiresAt: .distantFuture))

        transcript.client(
            "\(fleetProcesses) processes × \(fleetRequests) GETs at once, token expired, fleet limit 50/s in bursts of 10")
        let started = ContinuousClock.now
        let workers = try (0..<fleetProcesses).map { index in
            try FleetWorkerProcess(
                arguments: [
                    "fleet-worker", String(redis.port), server.baseURL.absoluteString, server.tokenURL.absoluteString, prefix, "w\(index)",
                ])
        }
        var ok = 0
        for worker in workers {
            let line = try worker.result(within: 60)
            transcript.client(line)
            ok += Int(line.split(separator: " ").first { $0.hasPrefix("ok=") }?.dropFirst(3) ?? "") ?? 0
        }
        let elapsed = started.duration(to: .now)
        let arrivals = server.apiRequests.map(\.arrivedAt).sorted()
        let busiest = busiestSecond(arrivals)
        let tokenRequests = server.tokenRequestCount
        transcript.server(
            "token requests: \(tokenRequests); API requests: \(arrivals.count) (401s: \(server.unauthorizedCount)); busiest second: \(busiest)"
        )

        // One process's cost per request while the token is fresh, beside the in-memory store.
        let cost = try await freshTokenCost(server: server, client: client, prefix: prefix)
        transcript.note(
            "fresh token, 200 sequential GETs: fleet \(cost.fleet) µs, in-memory store \(cost.memory) µs a request; Redis commands: \(cost.commands)"
        )

        let total = fleetProcesses * fleetRequests
        try transcript.check(ok == total, "only \(ok) of \(total) requests succeeded")
        try transcript.check(tokenRequests == 1, "\(tokenRequests) token requests for one expiry")
        try transcript.check(busiest <= 60, "\(busiest) requests reached the server in one second")
        try transcript.check(cost.commands == 0, "\(cost.commands) Redis commands while the token was fresh")
        transcript.conclude(
            "\(ok)/\(total) ok in \(elapsed.milliseconds) ms, 1 token request, busiest second \(busiest), 0 Redis commands per fresh request"
        )
    }

    /// The most arrivals in any one-second window.
    private static func busiestSecond(_ arrivals: [ContinuousClock.Instant]) -> Int {
        var best = 0
        var end = 0
        for start in arrivals.indices {
            while end < arrivals.count, arrivals[end] < arrivals[start] + .seconds(1) { end += 1 }
            best = max(best, end - start)
        }
        return best
    }

    /// The mean time of a request with a fresh token through a fleet credential's authenticator
    /// and through an in-memory store's (each 200 sequential GETs after one to warm up), and
    /// the Redis commands the fleet's requests cost (`INFO stats`, less the one that asks).
    private static func freshTokenCost(
        server: OAuthServer, client: RedisClient, prefix: String
    ) async throws -> (fleet: Int, memory: Int, commands: Int) {
        let fresh = OAuth2Credential(
            accessToken: server.currentAccess ?? "", refreshToken: server.currentRefresh, expiresAt: .distantFuture)
        let endpoint = OAuth2TokenEndpoint(url: server.tokenURL)
        let fleet = FleetCredential(client: client, configuration: .init(keyPrefix: prefix), tokenEndpoint: endpoint)
        defer { fleet.shutdown() }
        let fleetAuth = fleet.makeAuthenticator(origins: [server.baseURL])
        let memoryAuth = OAuth2Authenticator(origins: [server.baseURL], tokenEndpoint: endpoint, store: InMemoryCredentialStore(fresh))
        func meanMicroseconds(_ auth: OAuth2Authenticator, before: (() async throws -> Void)? = nil) async throws -> Int {
            let manager = URLTaskManager(
                interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
            defer { manager.session.finishTasksAndInvalidate() }
            _ = try await manager.session.data(from: server.apiURL("/warm-up"))  // the load, the connection
            try await before?()
            let started = ContinuousClock.now
            for index in 0..<200 { _ = try await manager.session.data(from: server.apiURL("/cost/\(index)")) }
            let (seconds, attoseconds) = started.duration(to: .now).components
            return Int((seconds * 1_000_000 + attoseconds / 1_000_000_000_000) / 200)
        }
        let memory = try await meanMicroseconds(memoryAuth)
        var commandsBefore = 0
        let fleetCost = try await meanMicroseconds(fleetAuth) { commandsBefore = try await commandsProcessed(client) }
        let commands = try await commandsProcessed(client) - commandsBefore - 1
        return (fleetCost, memory, commands)
    }

    private static func commandsProcessed(_ client: RedisClient) async throws -> Int {
        let info = try await client.send(["INFO", "stats"]).string ?? ""
        let line = info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("total_commands_processed:") }
        return line.flatMap { Int($0.split(separator: ":")[1]) } ?? 0
    }

    /// The hidden `Examples fleet-worker <redis port> <api> <token url> <prefix> <name>`: one
    /// process of the fleet. Sends 50 GETs at once and prints one line,
    /// `FLEET-WORKER <name> ok=… failed=… refreshed=…`.
    static func runFleetWorker(_ arguments: [String]) async -> Int32 {
        guard arguments.count == 5, let port = Int(arguments[0]), let api = URL(string: arguments[1]),
            let tokenURL = URL(string: arguments[2])
        else {
            print("usage: Examples fleet-worker <redis port> <api> <token url> <prefix> <name>")
            return 2
        }
        let (prefix, name) = (arguments[3], arguments[4])

        // DocC fleet: begin
        let redis = RedisClient(configuration: .init(endpoint: .tcp(host: "127.0.0.1", port: port)))
        let fleet = FleetCredential(
            client: redis, configuration: .init(keyPrefix: prefix),
            tokenEndpoint: OAuth2TokenEndpoint(url: tokenURL))
        let auth = fleet.makeAuthenticator(origins: [api])  // renews 60 s ahead, or a quarter of a shorter token's life
        let limiter = FleetRateLimiter(redis: redis, policy: .init(rate: 50, burst: 10, processCount: 4))
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth), limiter],
            reactors: [OAuth2RefreshReactor(authenticator: auth)])
        // DocC fleet: end
        defer {
            fleet.shutdown()
            redis.close()
        }

        let refreshed = Counter()
        let events = fleet.events()
        let listener = Task {
            for await event in events where event == .refreshed { refreshed.next() }
        }
        defer { listener.cancel() }
        let results = await concurrentGETs(manager.session, api.appendingPathComponent("api/profile"), count: fleetRequests)
        let ok = results.filter { (try? $0.get()) == 200 }.count
        print("FLEET-WORKER \(name) ok=\(ok) failed=\(results.count - ok) refreshed_here=\(refreshed.value)")
        return ok == results.count ? 0 : 1
    }
}

/// A child process of the fleet scenario: this executable, run again with `fleet-worker`.
private final class FleetWorkerProcess {
    private let process = Process()
    private let pipe = Pipe()
    private let done = DispatchSemaphore(value: 0)

    init(arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: Bundle.main.executablePath ?? CommandLine.arguments[0])
        process.arguments = arguments
        process.standardOutput = pipe
        process.standardError = pipe
        process.terminationHandler = { [done] _ in done.signal() }
        try process.run()
    }

    /// The worker's `FLEET-WORKER` line, once it exited; killed after `seconds`.
    func result(within seconds: Int) throws -> String {
        let reader = pipe.fileHandleForReading
        let output = OutputBox()
        let drained = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            output.text = String(decoding: reader.readDataToEndOfFile(), as: UTF8.self)
            drained.signal()
        }
        guard done.wait(timeout: .now() + .seconds(seconds)) == .success else {
            kill(process.processIdentifier, SIGKILL)
            _ = drained.wait(timeout: .now() + 5)
            throw Transcript.CheckFailed(description: "a fleet worker did not finish in \(seconds) s: \(output.text.suffix(600))")
        }
        _ = drained.wait(timeout: .now() + 5)
        guard let line = output.text.split(separator: "\n").first(where: { $0.hasPrefix("FLEET-WORKER") }) else {
            throw Transcript.CheckFailed(description: "a fleet worker said nothing: \(output.text.suffix(600))")
        }
        return String(line)
    }

    /// What the reader thread drained, read by the waiting thread (after the drain, or on a
    /// timeout while the reader may still write).
    private final class OutputBox: @unchecked Sendable {  // `value` is guarded by `lock`.
        private let lock = NSLock()
        private var value = ""

        var text: String {
            get { lock.withLock { value } }
            set { lock.withLock { value = newValue } }
        }
    }
}

/// A `redis-server` of the scenario's own, on a free port of 127.0.0.1, without persistence.
private final class FleetRedis {
    static let missingMessage = "skipped: redis-server is not installed (apt-get install redis-server, or brew install redis)"

    /// `redis-server` on the PATH, or `nil`.
    static var executable: String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        return path.split(separator: ":").map { "\($0)/redis-server" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    let port: Int
    private let process = Process()
    private let directory: URL

    init(executable: String) throws {
        port = try Self.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("examples-redis-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = [
            "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", directory.path,
        ]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        // Ready when it says so (read from its output, within 10 s), not after a fixed time.
        let ready = DispatchSemaphore(value: 0)
        let reader = pipe.fileHandleForReading
        Thread.detachNewThread {
            var text = ""
            var told = false
            while true {
                let data = reader.availableData
                if data.isEmpty { break }
                text += String(decoding: data, as: UTF8.self)
                if !told, text.lowercased().contains("ready to accept connections") {
                    told = true
                    ready.signal()
                }
            }
        }
        guard ready.wait(timeout: .now() + 10) == .success else {
            stop()
            throw Transcript.CheckFailed(description: "redis-server did not become ready in 10 s")
        }
    }

    /// SIGKILL (nothing to save), and waits for the exit.
    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    private static func freePort() throws -> Int {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr = in_addr(s_addr: UInt32(0x7F00_0001).bigEndian)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard bound == 0 else { throw Transcript.CheckFailed(description: "no free port for redis-server") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
