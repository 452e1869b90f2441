import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2
import URLTaskResilience

extension Scenario {
    static let twoBackends = Scenario(
        name: "two-backends", summary: "Legacy login buys the new backend's token; both or neither; each host gets its own"
    ) { transcript in
        let legacy = try OAuthServer(name: "legacy", users: ["ada": "lovelace"])
        let modern = try OAuthServer(name: "new")
        defer { legacy.shutdown(); modern.shutdown() }
        let app = TwoBackendApp(legacy: (legacy.baseURL, legacy.tokenURL), modern: (modern.baseURL, modern.tokenURL))

        // 1. The new backend refuses to exchange the legacy token: the whole login fails.
        modern.acceptExchange(of: nil)
        let refused = await app.logIn(username: "ada", password: "lovelace")
        let legacyStored = try await app.legacyAuth.currentCredential()
        let modernStored = try await app.modernAuth.currentCredential()
        transcript.client(
            "login with the new backend refusing: \(refused.map { "\($0)" } ?? "ok"); stored: legacy \(legacyStored == nil ? "none" : "yes"), new \(modernStored == nil ? "none" : "yes")"
        )
        transcript.server(
            "legacy issued \(legacy.tokenRequestCount) token (dropped, not stored); new refused \(modern.tokenRequestCount) exchange")
        try transcript.check(refused == .linkedAccountUnavailable, "expected linkedAccountUnavailable, got \(String(describing: refused))")
        try transcript.check(legacyStored == nil && modernStored == nil, "half a login was stored")

        let wrong = await app.logIn(username: "ada", password: "babbage")
        transcript.client("login with a wrong password: \(wrong.map { "\($0)" } ?? "ok")")
        try transcript.check(wrong == .wrongPassword, "expected wrongPassword, got \(String(describing: wrong))")

        // 2. The new backend accepts the legacy backend's current token: both are stored.
        modern.acceptExchange { $0 == legacy.currentAccess }
        let accepted = await app.logIn(username: "ada", password: "lovelace")
        try transcript.check(accepted == nil, "login failed: \(String(describing: accepted))")
        transcript.client("login: ok, both credentials stored")

        // 3. One session for both backends; each request carries only its own backend's token.
        async let orders = concurrentGETs(app.session, legacy.apiURL("/orders"), count: 5)
        async let profile = concurrentGETs(app.session, modern.apiURL("/profile"), count: 5)
        let statuses = await (orders + profile).compactMap { try? $0.get() }
        let legacyTokens = Set(legacy.apiRequests.compactMap { $0.headers["authorization"] })
        let modernTokens = Set(modern.apiRequests.compactMap { $0.headers["authorization"] })
        transcript.client("5 GET legacy /api/orders + 5 GET new /api/profile → \(statuses.filter { $0 == 200 }.count) × 200")
        transcript.server("legacy saw \(legacyTokens.sorted()); new saw \(modernTokens.sorted())")
        try transcript.check(statuses.count == 10 && statuses.allSatisfy { $0 == 200 }, "statuses \(statuses)")
        try transcript.check(legacyTokens == ["Bearer \(legacy.currentAccess ?? "?")"], "legacy saw \(legacyTokens)")
        try transcript.check(modernTokens == ["Bearer \(modern.currentAccess ?? "?")"], "new saw \(modernTokens)")

        // 4. The new backend ends the session: the library's typed error becomes the app's own.
        modern.revokeAccess()
        modern.revokeRefresh()
        let expired = await app.get(modern.apiURL("/profile"))
        let stillFine = await app.get(legacy.apiURL("/orders"))
        transcript.client("new backend revoked the session: \(expired); legacy still answers: \(stillFine)")
        try transcript.check(expired == .failure(.sessionExpired(backend: "new")), "got \(expired)")
        try transcript.check(stillFine == .success(200), "legacy got \(stillFine)")
        transcript.conclude("login is all or nothing, tokens never cross hosts, errors arrive as AppError")
    }
}

extension AppError: CustomStringConvertible {
    var description: String {
        switch self {
        case .wrongPassword: "AppError.wrongPassword"
        case .linkedAccountUnavailable: "AppError.linkedAccountUnavailable"
        case .sessionExpired(let backend): "AppError.sessionExpired(\(backend))"
        case .offline: "AppError.offline"
        case .unavailable(let retryAfter): "AppError.unavailable(retryAfter: \(retryAfter.map { "\($0)" } ?? "-"))"
        case .rejected(let status): "AppError.rejected(\(status))"
        case .unexpected(let what): "AppError.unexpected(\(what))"
        }
    }
}

/// One session for two backends: a legacy one that signs in with a password, and a new one
/// whose token is only issued in exchange for the legacy token.
struct TwoBackendApp: Sendable {
    let legacyAuth: OAuth2Authenticator
    let modernAuth: OAuth2Authenticator
    private let legacyEndpoint: OAuth2TokenEndpoint
    private let modernEndpoint: OAuth2TokenEndpoint
    let session: URLSession

    init(legacy: (api: URL, token: URL), modern: (api: URL, token: URL)) {
        legacyEndpoint = OAuth2TokenEndpoint(url: legacy.token, clientID: "example-app")
        modernEndpoint = OAuth2TokenEndpoint(url: modern.token, clientID: "example-app")
        legacyAuth = OAuth2Authenticator(origins: [legacy.api], tokenEndpoint: legacyEndpoint)
        modernAuth = OAuth2Authenticator(origins: [modern.api], tokenEndpoint: modernEndpoint)
        // DocC two backends: begin
        session =
            URLTaskManager(
                interceptors: [BearerInterceptor(authenticator: legacyAuth), BearerInterceptor(authenticator: modernAuth)],
                reactors: [OAuth2RefreshReactor(authenticator: legacyAuth), OAuth2RefreshReactor(authenticator: modernAuth)]
            ).session
        // DocC two backends: end
    }

    /// Returns `nil` on success: both credentials are stored, or (on any error) neither is.
    func logIn(username: String, password: String) async -> AppError? {
        let (legacyEndpoint, modernEndpoint) = (self.legacyEndpoint, self.modernEndpoint)
        do {
            // DocC chained login: begin
            try await OAuth2Authenticator.signIn(
                legacyAuth,
                using: {
                    do { return try await legacyEndpoint.signIn(username: username, password: password) } catch let error as OAuth2Error
                        where error.requiresSignIn
                    { throw AppError.wrongPassword }
                },
                then: modernAuth,
                using: { legacyToken in
                    do { return try await modernEndpoint.exchange(legacyToken) } catch let error as OAuth2Error where error.requiresSignIn {
                        throw AppError.linkedAccountUnavailable
                    }
                })
            // DocC chained login: end
            return nil
        } catch {
            return AppError(error)
        }
    }

    /// GETs `url`; the status code, or the failure as the app's own error.
    func get(_ url: URL) async -> Result<Int, AppError> {
        do {
            let (_, response) = try await session.data(from: url)
            return .success((response as? HTTPURLResponse)?.statusCode ?? 0)
        } catch {
            return .failure(AppError(error, backend: modernAuth.authorizes(url) ? "new" : "legacy"))
        }
    }
}

// DocC error mapping: begin
/// The app's own errors: what its screens know how to show.
enum AppError: Error, Equatable {
    /// The password was wrong.
    case wrongPassword
    /// The second backend would not exchange the first one's token.
    case linkedAccountUnavailable
    /// Only a new sign-in helps: the refresh token is dead, or the user signed out.
    case sessionExpired(backend: String)
    /// The network or the host cannot be reached: try again when it is back.
    case offline
    /// The service is failing or busy: try again later (after `retryAfter`, when known).
    case unavailable(retryAfter: Duration?)
    /// The server answered, with something the request does not accept.
    case rejected(status: Int)
    /// A bug or a misconfiguration: report it.
    case unexpected(String)
}

extension AppError {
    /// Maps what the networking layer throws to what the app's screens understand. The errors
    /// follow one rule whatever the session's interceptors and reactors: a `URLError` arrives
    /// as itself, everything else as a `URLTaskError` whose code says what happened.
    init(_ error: any Error, backend: String = "") {
        let oauth = (error as? URLTaskError)?.underlying as? OAuth2Error
        switch error {
        case let error as AppError:
            self = error
        // The transport, a refresh whose token endpoint cannot be reached, an offline hold that gave up.
        case let error as URLError where Self.offlineCodes.contains(error.code):
            self = .offline
        // The token endpoint refused the refresh (invalid_grant), or the user signed out.
        case let error as URLTaskError where error.code == .authenticationFailed && oauth?.requiresSignIn == true:
            self = .sessionExpired(backend: backend)
        // The token endpoint failed (a 5xx, a malformed answer): the next request tries again.
        case let error as URLTaskError where error.code == .authenticationFailed && oauth?.isConfigurationError == false:
            self = .unavailable(retryAfter: nil)
        case let error as URLTaskError where error.code == .circuitOpen:
            self = .unavailable(retryAfter: (error.underlying as? CircuitOpenError)?.retryAfter)
        case let error as URLTaskError where [.rateLimitQueueFull, .reactorTimedOut].contains(error.code):
            self = .unavailable(retryAfter: nil)
        case let error as URLTaskError where error.code == .responseRejected:
            self = .rejected(status: error.response?.statusCode ?? 0)
        default:  // a client misconfiguration, a failing component of the app's own, a bug
            self = .unexpected(String(describing: error))
        }
    }

    /// The `URLError`s that mean the network or the host cannot be reached (a request that
    /// waited past its `timeoutInterval` too).
    static let offlineCodes: Set<URLError.Code> = [
        .notConnectedToInternet, .networkConnectionLost, .cannotConnectToHost, .cannotFindHost, .timedOut,
    ]
}
// DocC error mapping: end
