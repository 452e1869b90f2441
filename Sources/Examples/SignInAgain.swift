import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2

extension Scenario {
    static let signInAgain = Scenario(
        name: "sign-in-again", summary: "The refresh token was revoked: every request fails once, typed; login runs once"
    ) { transcript in
        let server = try OAuthServer(name: "demo", users: ["ada": "lovelace"])
        defer { server.shutdown() }
        let logins = Counter()
        // The hook runs on its own task (the failed requests do not wait for it): the example
        // waits for its first call.
        let (loginShown, shown) = AsyncStream<Void>.makeStream()
        let client = APIClient(
            api: server.baseURL, tokenURL: server.tokenURL,
            showLogin: {
                logins.next()
                shown.yield()
            })
        try await client.signIn(username: "ada", password: "lovelace")
        // Signed out on another device: both of the app's tokens are dead.
        server.revokeAccess()
        server.revokeRefresh()

        transcript.client("20 GET /api/profile at once; the refresh token has been revoked")
        let results = await concurrentGETs(client.session, server.apiURL(), count: 20)
        // DocC sign in again: begin
        let sessionOver = results.filter { result in
            guard case .failure(let error as URLTaskError) = result, error.code == .authenticationFailed,
                let oauth = error.underlying as? OAuth2Error
            else { return false }
            return oauth.requiresSignIn  // the refresh token is dead: only a new login helps
        }
        // DocC sign in again: end
        transcript.client("\(sessionOver.count) of 20 failed with URLTaskError authenticationFailed (OAuth2RefreshReactor, invalid_grant)")
        try transcript.check(await first(of: loginShown, within: .seconds(5)), "the login hook never ran")
        transcript.client("the app's login hook ran \(logins.value) time(s)")
        transcript.server(
            "refresh attempts: \(server.refreshTokensReceived.count) (refused with 400 invalid_grant); 401s: \(server.unauthorizedCount)")
        try transcript.check(sessionOver.count == 20, "only \(sessionOver.count) failed with the typed error")
        try transcript.check(logins.value == 1, "login hook ran \(logins.value) times")
        try transcript.check(server.refreshTokensReceived.count == 1, "\(server.refreshTokensReceived.count) refresh attempts")

        let before = server.apiRequests.count
        let early = await concurrentGETs(client.session, server.apiURL(), count: 1)
        if case .failure = early.first {} else { throw Transcript.CheckFailed(description: "a request before signing in succeeded") }
        transcript.client("a request before signing in fails at once; the server saw \(server.apiRequests.count - before) new requests")
        try transcript.check(server.apiRequests.count == before, "it reached the server")

        try await client.signIn(username: "ada", password: "lovelace")
        let (data, response) = try await client.session.data(from: server.apiURL())
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        transcript.client("signed in with username and password; GET /api/profile → \(status) \(String(decoding: data, as: UTF8.self))")
        try transcript.check(status == 200, "after signing in: \(status)")
        try transcript.check(logins.value == 1, "login hook ran again")
        transcript.conclude("20 failed once with the typed error, 1 login prompt, next request 200")
    }
}
