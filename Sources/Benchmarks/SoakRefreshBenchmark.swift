import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2

/// `swift run -c release Benchmarks soak-refresh [REQUESTS] [IN-FLIGHT]`: the OAuth2 kit under
/// tokens revoked again and again, as issue 28 measured the loop guard. REQUESTS GETs (100,000),
/// IN-FLIGHT at a time (50), through a ``BearerInterceptor`` and an ``OAuth2RefreshReactor`` with
/// the default ``URLTaskReactorConfiguration/authentication``, against an ``OAuthServer`` in this
/// process, in two scenarios: tokens living 6 s (`expires_in`, and enforced by the server's
/// clock) with every access token revoked each 7 s, and tokens living an hour revoked each 3 s.
/// Prints each scenario's outcomes (how many ended 200, 401, in `reactionLoop` or otherwise),
/// the token requests and the revocations.
enum SoakRefreshBenchmark {
    struct Scenario {
        var name: String
        var expiresIn: Int
        var revokeEvery: Duration
    }

    static let scenarios = [
        Scenario(name: "6 s tokens, revoked every 7 s", expiresIn: 6, revokeEvery: .seconds(7)),
        Scenario(name: "1 h tokens, revoked every 3 s", expiresIn: 3600, revokeEvery: .seconds(3)),
    ]

    static func run(_ arguments: [String]) async throws {
        let numbers = arguments.compactMap(Int.init)
        let requests = numbers.first ?? 100_000
        let inFlight = numbers.dropFirst().first ?? 50
        print("soak-refresh: \(requests) GETs, \(inFlight) in flight, OAuth2 kit with .authentication (loop guard 3 in 10 s)")
        for scenario in scenarios {
            try await run(scenario, requests: requests, inFlight: inFlight)
        }
    }

    /// Outcomes by kind, counted as tasks end.
    private struct Tally {
        var ok = 0
        var unauthorized = 0
        var reactionLoop = 0
        var other: [String: Int] = [:]

        mutating func count(_ outcome: Result<Int, any Error>) {
            switch outcome {
            case .success(200): ok += 1
            case .success(401): unauthorized += 1
            case .success(let status): other["\(status)", default: 0] += 1
            case .failure(let error as URLTaskError) where error.code == .reactionLoop: reactionLoop += 1
            case .failure(let error): other["\(error)", default: 0] += 1
            }
        }
    }

    private static func run(_ scenario: Scenario, requests: Int, inFlight: Int) async throws {
        let api = try OAuthServer(access: "start")
        defer { api.shutdown() }
        api.setExpiresIn(scenario.expiresIn)
        api.expireAccessTokens(after: .seconds(scenario.expiresIn))
        let endpoint = OAuth2TokenEndpoint(url: api.tokenURL, clientID: "soak")
        let credential = OAuth2Credential(
            accessToken: "start", refreshToken: "refresh-0", expiresAt: Date().addingTimeInterval(TimeInterval(scenario.expiresIn)))
        let auth = OAuth2Authenticator(
            origins: [api.baseURL],
            store: InMemoryCredentialStore(credential),
            isTokenRequest: { endpoint.matches($0) },
            refresh: { try await endpoint.refresh($0) }
        )
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)],
            reactors: [OAuth2RefreshReactor(authenticator: auth)],
            configuration: .ephemeral
        )
        defer { manager.session.finishTasksAndInvalidate() }
        let session = manager.session
        let url = api.apiURL()

        // The server's side of the soak: every access token valid now is revoked, each interval.
        let revoker = Task {
            var revocations = 0
            while !Task.isCancelled {
                do { try await Task.sleep(for: scenario.revokeEvery) } catch { break }
                api.revokeAccess()
                revocations += 1
            }
            return revocations
        }
        let started = ContinuousClock.now
        let tally = await withTaskGroup(of: Result<Int, any Error>.self) { group in
            @Sendable func fetch() async -> Result<Int, any Error> {
                do {
                    let (_, response) = try await session.data(from: url)
                    return .success((response as? HTTPURLResponse)?.statusCode ?? -1)
                } catch {
                    return .failure(error)
                }
            }
            var started = 0
            while started < min(inFlight, requests) {
                group.addTask { await fetch() }
                started += 1
            }
            var tally = Tally()
            for await outcome in group {
                tally.count(outcome)
                if started < requests {
                    group.addTask { await fetch() }
                    started += 1
                }
            }
            return tally
        }
        let wall = started.duration(to: .now)
        revoker.cancel()
        let revocations = await revoker.value
        let seconds = Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18
        let percent = Double(tally.reactionLoop) * 100 / Double(requests)
        print(
            "\(scenario.name): wall \(String(format: "%.1f", seconds)) s, revocations \(revocations), "
                + "token requests \(api.tokenRequestCount), 401s seen by the server \(api.unauthorizedCount)")
        print(
            "  200: \(tally.ok), 401: \(tally.unauthorized), reactionLoop: \(tally.reactionLoop) "
                + "(\(String(format: "%.1f", percent)) %), other: \(tally.other.isEmpty ? "0" : "\(tally.other)")")
    }
}
