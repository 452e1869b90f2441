import Foundation
import URLTaskManager
import URLTaskOAuth2
@testable import URLTaskRedis
import URLTaskResilience
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a fleet's child process does (``FleetChildProcess`` starts it): it builds what an app
/// of the fleet builds, a `RedisClient`, a ``FleetCredential`` and a manager with its bearer
/// interceptor and refresh reactor (and a ``FleetRateLimiter`` when given a rate), prints
/// `FLEET-READY`, then obeys one command a line on its standard input:
///
/// - `GO <n>`: `n` concurrent GETs of the API; prints `FLEET-ROUND ok=… failed=…` (and, with
///   a limiter, `turns=… turns_given_back=…`: the turns it took from Redis so far).
/// - `WARM <n>`: the same to `/api/warm/…`, which the rate limit exempts: opens the
///   process's connections before a measured round.
/// - `WAIT-WROTE-BACK`: waits (at most 20 s) for the fleet credential's `wroteBack` event;
///   prints `FLEET-WROTE-BACK ok=1` (or `ok=0` at the deadline).
/// - `END`: prints `FLEET-RESULT ok=… failed=… invalid_grant=… refreshed=… adopted=…
///   lease_expired=… refreshed_alone=… unreachable=… wrote_back=…` and returns.
///
/// In the mode `holder` its refresh, once it holds the fleet's lease, prints
/// `FLEET-LEASE-TAKEN` and never sends the token request: the parent kills it there.
enum FleetWorker {
    static let modeVariable = "URLTASK_FLEET_WORKER"
    static let nameVariable = "URLTASK_FLEET_NAME"
    static let redisPortVariable = "URLTASK_FLEET_REDIS_PORT"
    static let apiVariable = "URLTASK_FLEET_API"
    static let tokenVariable = "URLTASK_FLEET_TOKEN_URL"
    static let prefixVariable = "URLTASK_FLEET_PREFIX"
    static let leaseVariable = "URLTASK_FLEET_LEASE_MS"
    static let rateVariable = "URLTASK_FLEET_RATE"
    static let burstVariable = "URLTASK_FLEET_BURST"
    static let processesVariable = "URLTASK_FLEET_PROCESSES"
    static let outageWaitVariable = "URLTASK_FLEET_OUTAGE_WAIT_MS"
    static let takeoverVariable = "URLTASK_FLEET_TAKEOVER"

    /// The settings a parent passes to every child of one fleet.
    static func environment(
        redisPort: Int, api: URL, tokenURL: URL, prefix: String, lease: Duration? = nil,
        rate: (rate: Double, burst: Int, processes: Int)? = nil, outageWait: Duration? = nil,
        takeover: FleetCredential.Configuration.InFlightTakeover? = nil
    ) -> [String: String] {
        var environment = [
            redisPortVariable: String(redisPort), apiVariable: api.absoluteString, tokenVariable: tokenURL.absoluteString,
            prefixVariable: prefix,
        ]
        func milliseconds(_ duration: Duration) -> String {
            String(duration.components.seconds * 1_000 + duration.components.attoseconds / 1_000_000_000_000_000)
        }
        if let lease { environment[leaseVariable] = milliseconds(lease) }
        if let outageWait { environment[outageWaitVariable] = milliseconds(outageWait) }
        if takeover == .requireSignIn { environment[takeoverVariable] = "require-sign-in" }
        if let rate {
            environment[rateVariable] = String(rate.rate)
            environment[burstVariable] = String(rate.burst)
            environment[processesVariable] = String(rate.processes)
        }
        return environment
    }

    /// `key=value` pairs of a `FLEET-…` line.
    static func figures(_ line: String) -> [String: Int] {
        var figures: [String: Int] = [:]
        for field in line.split(separator: " ").dropFirst() {
            let parts = field.split(separator: "=", maxSplits: 1)
            if parts.count == 2, let value = Int(parts[1]) { figures[String(parts[0])] = value }
        }
        return figures
    }

    /// Writes a line at once (`print` buffers when standard output is a pipe).
    static func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    static func run(mode: String, environment: [String: String]) async throws {
        guard let port = environment[redisPortVariable].flatMap(Int.init), let api = environment[apiVariable].flatMap(URL.init(string:)),
            let tokenURL = environment[tokenVariable].flatMap(URL.init(string:)), let prefix = environment[prefixVariable]
        else { throw TestFailure("a fleet worker without its settings") }
        let name = environment[nameVariable] ?? "worker"
        let lease = environment[leaseVariable].flatMap(Int64.init).map { Duration.milliseconds($0) } ?? .seconds(30)

        let redis = RedisClient(
            configuration: .init(
                endpoint: .tcp(host: "127.0.0.1", port: port), connectTimeout: .milliseconds(500), replyTimeout: .seconds(2),
                reconnectDelay: .milliseconds(20), maximumReconnectDelay: .milliseconds(200)))
        defer { redis.close() }
        let endpoint = OAuth2TokenEndpoint(url: tokenURL)
        var configuration = FleetCredential.Configuration(keyPrefix: prefix, leaseTimeToLive: lease)
        if let wait = environment[outageWaitVariable].flatMap(Int64.init) { configuration.redisOutageWait = .milliseconds(wait) }
        if environment[takeoverVariable] == "require-sign-in" { configuration.refreshTokenInFlightAtTakeover = .requireSignIn }
        let fleet: FleetCredential
        if mode == "holder" {
            fleet = FleetCredential(client: redis, configuration: configuration, isTokenRequest: { endpoint.matches($0) }) { _ in
                // Called only in the process that holds the lease, before the token request.
                say("FLEET-LEASE-TAKEN")
                try await Task.sleep(for: .seconds(3_600))  // killed long before
                throw CancellationError()
            }
        } else {
            fleet = FleetCredential(client: redis, configuration: configuration, tokenEndpoint: endpoint)
        }
        defer { fleet.shutdown() }
        let tally = FleetTally()
        let events = fleet.events()
        let listener = Task {
            for await event in events { tally.count(event) }
        }
        defer { listener.cancel() }
        let auth = fleet.makeAuthenticator(origins: [api]) { error in
            if (error as? OAuth2Error)?.serverErrorCode == "invalid_grant" { tally.add("invalid_grant") }
            tally.add("refresh_failures")
        }
        var interceptors: [any URLTaskInterceptor] = [BearerInterceptor(authenticator: auth)]
        var limiter: FleetRateLimiter?
        if let rate = environment[rateVariable].flatMap(Double.init) {
            let burst = environment[burstVariable].flatMap(Int.init) ?? 1
            let processes = environment[processesVariable].flatMap(Int.init) ?? 1
            let fleetLimiter = FleetRateLimiter(
                redis: redis,
                policy: .init(
                    rate: rate, burst: burst, processCount: processes, keyPrefix: prefix + ":limit",
                    exempts: { $0.url?.path.contains("/warm/") == true }))
            interceptors.append(fleetLimiter)
            limiter = fleetLimiter
        }
        let manager = URLTaskManager(interceptors: interceptors, reactors: [OAuth2RefreshReactor(authenticator: auth)])
        defer { manager.session.invalidateAndCancel() }

        say("FLEET-READY \(name)")
        var round = 0
        for await command in commandLines() {
            if command.hasPrefix("GO ") || command.hasPrefix("WARM ") {
                let warm = command.hasPrefix("WARM ")
                let count = Int(command.split(separator: " ").last ?? "") ?? 0
                round += 1
                let (ok, failed, signIn, firstError) = await requests(
                    manager.session, api: api, path: warm ? "warm" : "items", name: name, round: round, count: count)
                tally.add("ok", ok)
                tally.add("failed", failed)
                // The limiter's turns so far: taken from Redis, given back (a joined transfer).
                let turns = limiter.map { " turns=\($0.passes.taken) turns_given_back=\($0.passes.givenBack)" } ?? ""
                say(
                    "FLEET-ROUND ok=\(ok) failed=\(failed) sign_in=\(signIn)\(turns)" + (firstError.map { " first_error=\($0)" } ?? ""))
            } else if command == "WAIT-WROTE-BACK" {
                // Told by the fleet credential's events, not found by polling.
                let written = await tally.wait(for: "wrote_back", within: .seconds(20))
                say("FLEET-WROTE-BACK \(written ? "ok=1" : "ok=0")")
            } else if command == "END" {
                break
            }
        }
        let keys = [
            "ok", "failed", "invalid_grant", "refresh_failures", "refreshed", "adopted", "lease_expired", "refreshed_alone", "unreachable",
            "wrote_back",
        ]
        say("FLEET-RESULT " + keys.map { "\($0)=\(tally[$0])" }.joined(separator: " "))
    }

    /// `count` concurrent GETs: how many answered 200, how many did not, how many of those
    /// failed as an app's sign-in handler expects (`authenticationFailed` with an `OAuth2Error`
    /// that `requiresSignIn`), and the first error.
    private static func requests(
        _ session: URLSession, api: URL, path: String, name: String, round: Int, count: Int
    ) async -> (ok: Int, failed: Int, signIn: Int, firstError: String?) {
        await withTaskGroup(of: String?.self) { group in
            for index in 0..<count {
                var request = URLRequest(
                    url: api.appendingPathComponent("api").appendingPathComponent(path).appendingPathComponent("\(name)-\(round)-\(index)"))
                request.timeoutInterval = 60
                group.addTask {
                    do {
                        let (_, response) = try await session.data(for: request)
                        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
                        return status == 200 ? nil : "status-\(status)"
                    } catch {
                        let text = "\(error)".replacingOccurrences(of: " ", with: "_").replacingOccurrences(of: "\n", with: "_")
                        if let error = error as? URLTaskError, error.code == .authenticationFailed,
                            (error.underlying as? OAuth2Error)?.requiresSignIn == true
                        {
                            return "SIGN-IN " + text
                        }
                        return text
                    }
                }
            }
            var ok = 0
            var failed = 0
            var signIn = 0
            var firstError: String?
            for await outcome in group {
                if let outcome {
                    failed += 1
                    if outcome.hasPrefix("SIGN-IN ") { signIn += 1 }
                    firstError = firstError ?? outcome
                } else {
                    ok += 1
                }
            }
            return (ok, failed, signIn, firstError)
        }
    }

    /// The lines of standard input, read on a thread of their own; ends at end of input (the
    /// parent gone).
    private static func commandLines() -> AsyncStream<String> {
        AsyncStream { continuation in
            Thread.detachNewThread {
                while let line = readLine() { continuation.yield(line) }
                continuation.finish()
            }
        }
    }
}

/// Counts by name, from several tasks.
final class FleetTally: @unchecked Sendable {  // `counts`, `waiters` are guarded by `lock`.
    private let lock = NSLock()
    private var counts: [String: Int] = [:]
    private var waiters: [UUID: (key: String, continuation: CheckedContinuation<Bool, Never>)] = [:]

    func add(_ key: String, _ amount: Int = 1) {
        let woken = lock.withLock { () -> [CheckedContinuation<Bool, Never>] in
            counts[key, default: 0] += amount
            let due = waiters.filter { $0.value.key == key }
            for id in due.keys { waiters[id] = nil }
            return due.values.map(\.continuation)
        }
        for continuation in woken { continuation.resume(returning: true) }
    }

    subscript(_ key: String) -> Int { lock.withLock { counts[key, default: 0] } }

    /// Whether `key` was counted at least once, by the end of `limit`.
    func wait(for key: String, within limit: Duration) async -> Bool {
        let id = UUID()
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let now = lock.withLock { () -> Bool in
                if counts[key, default: 0] > 0 { return true }
                waiters[id] = (key, continuation)
                return false
            }
            if now { return continuation.resume(returning: true) }
            Task {
                try? await Task.sleep(for: limit)  // the deadline, not a synchronisation
                let late = self.lock.withLock { self.waiters.removeValue(forKey: id) }
                late?.continuation.resume(returning: false)
            }
        }
    }

    func count(_ event: FleetCredential.Event) {
        switch event {
        case .refreshed: add("refreshed")
        case .adopted: add("adopted")
        case .leaseExpired: add("lease_expired")
        case .refreshedAlone: add("refreshed_alone")
        case .redisUnreachable: add("unreachable")
        case .wroteBack: add("wrote_back")
        case .leaseWon: add("lease_won")
        case .refusalRecorded: add("refusal_recorded")
        case .refusalAdopted: add("refusal_adopted")
        case .waitingForRedis: add("waiting_for_redis")
        case .keptWhileRedisAway: add("kept_while_away")
        case .signOutAdopted: add("sign_out_adopted")
        case .redisReachable, .staleWriteRefused: add("\(event)")
        }
    }
}
