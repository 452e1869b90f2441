import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2
import URLTaskResilience

// DocC putting-it-together app: begin
/// A command-line tool (or a server) with two backends and one session. The notes API acts for
/// the user, who signs in with a password once: the credential is kept in a file between runs
/// and renewed with its refresh token. The partner's API knows only the app: its client ID and
/// secret buy a token (the client-credentials grant), asked for again when it runs out.
struct NotesApp: Sendable {
    /// Where the backends are, who the app is to the partner, and where the user's credential is
    /// kept.
    struct Configuration: Sendable {
        var notesAPI: URL
        var notesTokenURL: URL
        var partnerAPI: URL
        var partnerTokenURL: URL
        /// The app's own credentials at the partner: a tool's or a server's (an app binary
        /// keeps no secret).
        var clientID: String
        var clientSecret: String
        /// Created owner-only (0600), replaced atomically on every change.
        var credentialFile: URL
    }

    let session: URLSession
    let user: OAuth2Authenticator
    let partner: OAuth2Authenticator
    let userEndpoint: OAuth2TokenEndpoint
    let partnerEndpoint: OAuth2TokenEndpoint

    init(_ configuration: Configuration) {
        let userEndpoint = OAuth2TokenEndpoint(url: configuration.notesTokenURL, clientID: "notes-cli")
        let user = OAuth2Authenticator(
            origins: [configuration.notesAPI], tokenEndpoint: userEndpoint,
            store: FileCredentialStore(url: configuration.credentialFile))
        let partnerEndpoint = OAuth2TokenEndpoint(
            url: configuration.partnerTokenURL, clientID: configuration.clientID, clientSecret: configuration.clientSecret)
        // This grant issues no refresh token (RFC 6749 §4.4.3): renewing is asking again.
        let partner = OAuth2Authenticator(
            origins: [configuration.partnerAPI], isTokenRequest: { partnerEndpoint.matches($0) },
            refresh: { _ in try await partnerEndpoint.requestToken(["grant_type": "client_credentials"]) })

        // The recommended stack, with a bearer and a refresh reactor per backend; the manager
        // checks the order at init.
        let breaker = CircuitBreaker(policy: .init(exempts: { user.isTokenRequest($0) || partner.isTokenRequest($0) }))
        let limiter = RateLimiter(policy: .init(rate: 20, burst: 10))
        session =
            URLTaskManager(
                interceptors: [
                    breaker, BearerInterceptor(authenticator: user), BearerInterceptor(authenticator: partner), CoalescingInterceptor(),
                    limiter,
                ],
                reactors: [
                    OAuth2RefreshReactor(authenticator: user), OAuth2RefreshReactor(authenticator: partner),
                    OfflineHold(), RetryReactor(),
                ],
                options: .init(responseValidation: .successfulStatusCodes)  // a 4xx or 5xx is an error, with its status
            ).session
        self.user = user
        self.partner = partner
        self.userEndpoint = userEndpoint
        self.partnerEndpoint = partnerEndpoint
    }
}
// DocC putting-it-together app: end

// DocC putting-it-together start: begin
extension NotesApp {
    /// At launch: the user's credential from the file, or a password sign-in when there is none
    /// (the first run); then the app's own token for the partner. Returns whether the user had
    /// to sign in.
    func start(askPassword: () async throws -> (username: String, password: String)) async throws -> Bool {
        let saved: OAuth2Credential?
        do {
            saved = try await user.currentCredential()  // loads the file; nil when there is none
        } catch is FileCredentialStoreError {
            saved = nil  // a file that is not a credential: signing in replaces it
        }
        if saved == nil { try await signIn(askPassword: askPassword) }
        try await partner.signIn(partnerEndpoint.requestToken(["grant_type": "client_credentials"]))
        return saved == nil
    }

    /// Signs the user in with a password and saves the credential to the file: at the first
    /// run, and when a request fails with `NotesError.sessionExpired`.
    func signIn(askPassword: () async throws -> (username: String, password: String)) async throws {
        let (username, password) = try await askPassword()
        do {
            try await user.signIn(userEndpoint.signIn(username: username, password: password))
        } catch let error as OAuth2Error where error.requiresSignIn {
            throw NotesError.wrongPassword  // invalid_grant: the username or the password is wrong
        }
    }

    /// GETs `url` from either backend: the body, or what to show instead.
    func get(_ url: URL, timeout: TimeInterval = 30) async -> Result<String, NotesError> {
        do {
            let (data, _) = try await session.data(for: URLRequest(url: url, timeoutInterval: timeout))
            return .success(String(decoding: data, as: UTF8.self))
        } catch {
            return .failure(NotesError(error))
        }
    }
}
// DocC putting-it-together start: end

// DocC putting-it-together errors: begin
/// What the app shows when something fails: every error its networking can throw is one of these.
enum NotesError: Error, Equatable {
    /// The sign-in was refused: ask again.
    case wrongPassword
    /// Only a new sign-in helps: the refresh token is dead, or the user signed out.
    case sessionExpired
    /// The network or the host cannot be reached: try again when it is back.
    case offline
    /// The service is failing or busy: try again later (after `retryAfter`, when known).
    case unavailable(retryAfter: Duration?)
    /// The server answered with a status the request does not accept.
    case rejected(status: Int)
    /// Cancelled by the app or its user: show nothing.
    case cancelled
    /// A bug or a misconfiguration: report it.
    case unexpected(String)
}

extension NotesError {
    /// Any error from the session, a sign-in or the credential file. The session's follow one
    /// rule whatever its stack: a `URLError` arrives as itself, anything else as a `URLTaskError`
    /// whose code says what happened.
    init(_ error: any Error) {
        switch error {
        case let error as NotesError: self = error
        case let error as URLError: self = NotesError(error)
        case let error as URLTaskError: self = NotesError(error)
        case let error as OAuth2Error: self = NotesError(error)  // a token request made by the app itself
        default: self = .unexpected(String(describing: error))  // FileCredentialStoreError (a full disk), a bug
        }
    }

    /// The transport's errors, and those a component passes on as they are: a refresh whose
    /// token endpoint cannot be reached, an offline hold that gave up at the request's timeout,
    /// a wait (for a rate, a refresh) past it.
    init(_ error: URLError) {
        switch error.code {
        case .cancelled: self = .cancelled
        case .notConnectedToInternet, .networkConnectionLost, .cannotConnectToHost, .cannotFindHost, .dnsLookupFailed, .timedOut:
            self = .offline
        default: self = .unexpected("URLError \(error.code.rawValue)")  // TLS, a malformed URL or answer
        }
    }

    /// Every code a `URLTaskError` has.
    init(_ error: URLTaskError) {
        switch error.code {
        case .responseRejected:  // response validation: a status (or content type) the request does not accept
            self = .rejected(status: error.response?.statusCode ?? 0)
        case .circuitOpen:  // CircuitBreaker: the host kept failing; nothing was sent
            self = .unavailable(retryAfter: (error.underlying as? CircuitOpenError)?.retryAfter)
        case .rateLimitQueueFull:  // RateLimiter: too many requests already wait for the host; nothing was sent
            self = .unavailable(retryAfter: nil)
        case .authenticationFailed:  // the OAuth2 kit: no token could be had, the OAuth2Error says why
            self = (error.underlying as? OAuth2Error).map { NotesError($0) } ?? .unexpected(error.description)
        case .reactorTimedOut:  // a reactor's work (a refresh) ran past its timeout
            self = .unavailable(retryAfter: nil)
        case .managerInvalidated:  // the session was invalidated before the request went out: the app is quitting
            self = .cancelled
        case .tooManyAttempts, .reactionLoop:  // a reactor took it too often: a fresh token refused again and again
            self = .unexpected(error.description)
        case .invalidHeader, .bodyNotReplayable, .uploadBodyUnavailable, .downloadNeedsPipeline, .holdTimedOut:
            self = .unexpected(error.description)  // a request the app built wrong, or a batch held too long
        case .interceptorFailed, .reactorFailed:  // a component of the app's own threw
            self = .unexpected(error.description)
        case .alreadyBeingRead, .spillLimitReached:  // bytes(for:): two tasks read one body, or its reader fell far behind
            self = .unexpected(error.description)
        case .responseTooLarge:  // an answer held whole (a 401's challenge, a reactor's) with a body past the limit
            self = .rejected(status: error.response?.statusCode ?? 0)
        default:  // a code a later version adds
            self = .unexpected(error.description)
        }
    }

    /// A token request's failure: a refresh (inside a `URLTaskError`) or one the app made.
    init(_ error: OAuth2Error) {
        if error.requiresSignIn {
            self = .sessionExpired  // invalid_grant, signed out, no refresh token
        } else if error.isConfigurationError {
            self = .unexpected(error.description)  // invalid_client and the like: ours to fix, not the user's
        } else {
            self = .unavailable(retryAfter: nil)  // a 5xx, malformed JSON, an answer that is not a token: the next request tries again
        }
    }
}
// DocC putting-it-together errors: end

extension Scenario {
    static let puttingItTogether = Scenario(
        name: "putting-it-together",
        summary: "The complete app: a password and a client-credentials grant, a credential file, the recommended stack, every error mapped"
    ) { transcript in
        // DocC putting-it-together run: begin
        let notesServer = try OAuthServer(name: "notes", users: ["ada": "lovelace"])
        let partnerServer = try OAuthServer(name: "partner")
        partnerServer.requireClient(id: "notes-sync", secret: "partner-secret")
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("notes-\(UUID().uuidString)")
        let configuration = NotesApp.Configuration(
            notesAPI: notesServer.baseURL, notesTokenURL: notesServer.tokenURL,
            partnerAPI: partnerServer.baseURL, partnerTokenURL: partnerServer.tokenURL,
            clientID: "notes-sync", clientSecret: "partner-secret",
            credentialFile: folder.appendingPathComponent("credential.json"))

        let firstRun = NotesApp(configuration)
        let signedIn = try await firstRun.start(askPassword: { ("ada", "lovelace") })  // true: no file yet
        let firstNotes = await firstRun.get(notesServer.apiURL("/notes"))  // .success("ok /api/notes")
        let secondRun = NotesApp(configuration)  // the next launch
        let restored = try await secondRun.start(askPassword: { ("ada", "lovelace") })  // false: read from the file
        // DocC putting-it-together run: end
        defer {
            notesServer.shutdown()
            partnerServer.shutdown()
            try? FileManager.default.removeItem(at: folder)
        }
        try await exercise(
            firstRun: (signedIn, firstNotes), secondRun: (secondRun, restored), notesServer: notesServer, partnerServer: partnerServer,
            configuration: configuration, transcript: transcript)
    }

    /// The checks of `putting-it-together`, after the two runs its listing shows.
    private static func exercise(
        firstRun: (signedIn: Bool, notes: Result<String, NotesError>), secondRun: (app: NotesApp, signedIn: Bool), notesServer: OAuthServer,
        partnerServer: OAuthServer, configuration: NotesApp.Configuration, transcript: Transcript
    ) async throws {
        let file = configuration.credentialFile
        let notesURL = notesServer.apiURL("/notes")
        let partnerURL = partnerServer.apiURL("/check")
        func saved() async throws -> OAuth2Credential? { try await FileCredentialStore(url: file).load() }

        // 1. The first run found no file and signed in; the second read the file instead.
        let permissions = (try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? NSNumber)?.intValue ?? 0
        transcript.client(
            "first run: no credential file, signed in with a password: \(firstRun.signedIn); saved \(file.lastPathComponent), "
                + "mode 0\(String(permissions, radix: 8))")
        try transcript.check(firstRun.signedIn && permissions == 0o600, "the first run did not sign in and save")
        let firstNotes = firstRun.notes
        transcript.client("first run: GET /api/notes → \(describe(firstNotes))")
        transcript.client("second run: signed in again: \(secondRun.signedIn) (credential restored from the file)")
        let restoredNotes = await secondRun.app.get(notesURL)
        transcript.client("second run: GET /api/notes → \(describe(restoredNotes))")
        transcript.server("notes token endpoint: \(notesServer.tokenRequestCount) request(s) for the two runs")
        try transcript.check(!secondRun.signedIn && notesServer.tokenRequestCount == 1, "the second run signed in again")
        try transcript.check(firstNotes == .success("ok /api/notes") && restoredNotes == firstNotes, "notes: \(restoredNotes)")

        let app = secondRun.app
        // 2. The notes API expires the token: one 401, one refresh, the rotated refresh token saved.
        notesServer.revokeAccess()
        let refreshed = await app.get(notesURL)
        let onDisk = try await saved()
        transcript.client("the server expired the token: GET /api/notes → \(describe(refreshed))")
        transcript.server(
            "notes: \(notesServer.unauthorizedCount) × 401, \(notesServer.refreshTokensReceived.count) refresh; "
                + "the file now holds refresh token \(onDisk?.refreshToken ?? "-")")
        try transcript.check(refreshed == .success("ok /api/notes") && notesServer.unauthorizedCount == 1, "refresh: \(refreshed)")
        try transcript.check(onDisk?.refreshToken == notesServer.currentRefresh, "the rotated refresh token was not saved")

        // 3. The partner, machine to machine: its token expires too, and is asked for again.
        let partnerFirst = await app.get(partnerURL)
        partnerServer.revokeAccess()
        let partnerAgain = await app.get(partnerURL)
        let grants = partnerServer.tokenRequests.map { OAuthServer.decodeForm($0.bodyText)["grant_type"] ?? "-" }
        transcript.client("partner: GET /api/check → \(describe(partnerFirst)); after its token expired → \(describe(partnerAgain))")
        transcript.server("partner token endpoint: \(grants.count) requests, grants \(Set(grants).sorted()), as client notes-sync")
        try transcript.check(partnerFirst == .success("ok /api/check") && partnerAgain == partnerFirst, "partner: \(partnerAgain)")
        try transcript.check(grants == Array(repeating: "client_credentials", count: 3), "partner grants: \(grants)")
        let partnerAuthorizations = Set(partnerServer.apiRequests.compactMap { $0.headers["authorization"] })
        try transcript.check(
            !partnerAuthorizations.contains { $0.contains("notes-") }, "a notes token reached the partner: \(partnerAuthorizations)")

        // 4. The partner fails (503): each request is retried, then rejected; after 5 such requests its
        // circuit opens and requests fail at once.
        let beforeOutage = partnerServer.server.requestCount(path: "/api/check")
        partnerServer.server.route("/api/check") { _ in ServerResponse(status: 503, headers: ["Retry-After": "0"]) }
        var failed: [Result<String, NotesError>] = []
        for _ in 0..<5 { failed.append(await app.get(partnerURL)) }
        let hits = partnerServer.server.requestCount(path: "/api/check") - beforeOutage
        let started = ContinuousClock.now
        let refused = await app.get(partnerURL)
        let refusedIn = started.duration(to: .now)
        let notesMeanwhile = await app.get(notesURL)
        transcript.client("partner down: 5 × GET /api/check → \(describe(failed[0])), \(hits) attempts in all")
        transcript.client("again → \(describe(refused)) in \(Int(refusedIn / .milliseconds(1))) ms, nothing sent")
        transcript.client("meanwhile GET /api/notes → \(describe(notesMeanwhile))")
        try transcript.check(
            failed.allSatisfy { $0 == .failure(.rejected(status: 503)) } && hits == 15, "a failing partner: \(failed), \(hits) attempts")
        guard case .failure(.unavailable(let retryAfter?)) = refused, retryAfter > .seconds(4) else {
            throw Transcript.CheckFailed(description: "expected an open circuit, got \(refused)")
        }
        try transcript.check(
            partnerServer.server.requestCount(path: "/api/check") - beforeOutage == hits, "the open circuit let a request through")
        try transcript.check(notesMeanwhile == .success("ok /api/notes"), "the notes API was affected: \(notesMeanwhile)")

        // 5. A host that cannot be reached: held by the offline hold, then the original error at the timeout.
        let gone = try LoopbackServer()
        let goneURL = gone.url("/api/notes")
        gone.shutdown()
        let offline = await app.get(goneURL, timeout: 1)
        transcript.client("a host that is down, 1 s timeout: GET → \(describe(offline))")
        try transcript.check(offline == .failure(.offline), "an unreachable host: \(offline)")

        // 6. The session ends (signed out elsewhere): sign in again, and the next request works.
        notesServer.revokeAccess()
        notesServer.revokeRefresh()
        let expired = await app.get(notesURL)
        var wrong: NotesError?
        do { try await app.signIn(askPassword: { ("ada", "babbage") }) } catch { wrong = NotesError(error) }
        try await app.signIn(askPassword: { ("ada", "lovelace") })
        let backIn = await app.get(notesURL)
        transcript.client("signed out elsewhere: GET /api/notes → \(describe(expired))")
        transcript.client(
            "sign in with a wrong password → \(wrong.map { describe($0) } ?? "ok"); with the right one, GET → \(describe(backIn))")
        try transcript.check(expired == .failure(.sessionExpired), "a dead session: \(expired)")
        try transcript.check(wrong == .wrongPassword && backIn == .success("ok /api/notes"), "signing in again: \(backIn)")

        // 7. A token endpoint's faulty answer is the server's, not the app's: a 200 with JSON cut
        // short is unavailable (try again later), an HTML page at the token URL unexpected (check it).
        let broken = try LoopbackServer()
        defer { broken.shutdown() }
        broken.route("POST", "/truncated") { _ in .json(Data(#"{"access_token": "ab"#.utf8)) }
        broken.route("POST", "/page") { _ in
            ServerResponse(status: 200, headers: ["Content-Type": "text/html"], body: .data(Data("<h1>Sign in</h1>".utf8)))
        }
        var faults: [String: NotesError] = [:]
        for path in ["/truncated", "/page"] {
            let endpoint = OAuth2TokenEndpoint(
                url: broken.url(path), clientID: configuration.clientID, clientSecret: configuration.clientSecret)
            do {
                _ = try await endpoint.requestToken(["grant_type": "client_credentials"])
            } catch {
                faults[path] = NotesError(error)
            }
        }
        transcript.client(
            "token endpoint answers 200 with truncated JSON → \(faults["/truncated"].map { describe($0) } ?? "a token"); "
                + "with an HTML page → \(faults["/page"].map { describe($0) } ?? "a token")")
        try transcript.check(
            faults["/truncated"] == .unavailable(retryAfter: nil), "truncated JSON: \(String(describing: faults["/truncated"]))")
        guard case .unexpected = faults["/page"] else {
            throw Transcript.CheckFailed(description: "an HTML page at the token URL: \(String(describing: faults["/page"]))")
        }

        // 8. A credential file that is not one: the next run signs in again and replaces it.
        try Data("not a credential".utf8).write(to: file)
        let thirdRun = try await NotesApp(configuration).start(askPassword: { ("ada", "lovelace") })
        let replaced = try await saved()
        transcript.client("third run with a corrupt file: signed in again: \(thirdRun); the file is a credential again: \(replaced != nil)")
        try transcript.check(thirdRun && replaced?.accessToken == notesServer.currentAccess, "the corrupt file was not replaced")
        transcript.conclude("signed in once, restored from the file, 401s refreshed on both grants, circuit open, every error mapped")
    }

    /// A result as the transcript shows it.
    private static func describe(_ result: Result<String, NotesError>) -> String {
        switch result {
        case .success(let body): "\"\(body)\""
        case .failure(let error): describe(error)
        }
    }

    private static func describe(_ error: NotesError) -> String {
        switch error {
        case .unavailable(let retryAfter?): "NotesError.unavailable(retryAfter: \(retryAfter.formatted(.units(allowed: [.seconds]))))"
        case .unexpected(let what): "NotesError.unexpected(\(what))"
        default: "NotesError.\(error)"
        }
    }
}
