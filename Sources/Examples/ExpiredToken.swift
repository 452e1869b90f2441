import Foundation
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2

extension Scenario {
    static let expiredToken = Scenario(name: "expired-token", summary: "50 requests with an expired token: one refresh, all succeed") {
        transcript in
        let server = try OAuthServer(name: "demo")
        defer { server.shutdown() }
        server.delayUnauthorized(by: .milliseconds(20))  // a 401 takes a moment, as a real server's does

        // The app signed in an hour ago; the server has expired that token since, which the
        // app cannot know until it gets a 401.
        let client = APIClient(api: server.baseURL, tokenURL: server.tokenURL)
        try await client.signIn(username: "ada", password: "lovelace")
        server.revokeAccess()

        transcript.client("50 GET /api/profile at once, with a token the server has expired")
        let results = await concurrentGETs(client.session, server.apiURL(), count: 50)
        let ok = results.filter { (try? $0.get()) == 200 }.count
        let refreshes = server.refreshTokensReceived.count
        transcript.client("\(ok) of 50 answered 200; no caller saw a 401")
        transcript.server(
            "refresh calls: \(refreshes); 401s: \(server.unauthorizedCount) (the requests already on the wire); API requests: \(server.apiRequests.count)"
        )
        try transcript.check(ok == 50, "only \(ok) of 50 succeeded")
        try transcript.check(refreshes == 1, "\(refreshes) refreshes")
        let firstRound401s = server.unauthorizedCount

        // Now the app knows when the token expires: it renews it before sending instead.
        try await client.auth.signIn(
            OAuth2Credential(
                accessToken: server.currentAccess ?? "", refreshToken: server.currentRefresh,
                expiresAt: Date().addingTimeInterval(5)))  // within the 60-second refresh leeway
        transcript.client("50 more at once, with a token that expires in 5 seconds")
        let proactive = await concurrentGETs(client.session, server.apiURL(), count: 50)
        let proactiveOK = proactive.filter { (try? $0.get()) == 200 }.count
        let new401s = server.unauthorizedCount - firstRound401s
        transcript.server("refresh calls: \(server.refreshTokensReceived.count - refreshes) (before sending); 401s: \(new401s)")
        try transcript.check(proactiveOK == 50, "only \(proactiveOK) of 50 succeeded")
        try transcript.check(new401s == 0, "\(new401s) requests went out with the expiring token")
        try transcript.check(
            server.refreshTokensReceived.count == 2, "\(server.refreshTokensReceived.count - refreshes) proactive refreshes")
        transcript.conclude("50/50 ok with 1 refresh and \(firstRound401s) × 401 absorbed; then 50/50 with 0 × 401")
    }
}
