import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2

extension Scenario {
    static let signOut = Scenario(
        name: "sign-out",
        summary: "Endpoints found from the issuer (RFC 8414); signing out revokes both tokens (RFC 7009), a failure is reported"
    ) { transcript in
        let oauth = try OAuthServer(name: "demo", users: ["ada": "lovelace"])
        defer { oauth.shutdown() }
        let issuer = oauth.baseURL

        // DocC discovery: begin
        let metadata = try await OAuth2ServerMetadata.discover(issuer: issuer)  // once, at launch: keep it
        let tokenEndpoint = metadata.tokenEndpoint(clientID: "example-app")  // with its revocation_endpoint
        // DocC discovery: end
        transcript.client(
            "discovered from \(issuer.absoluteString): token \(metadata.tokenEndpoint.path), revocation \(metadata.revocationEndpoint?.path ?? "none")"
        )

        let auth = OAuth2Authenticator(origins: [oauth.baseURL], tokenEndpoint: tokenEndpoint)
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)])
        defer { manager.invalidateAndCancel() }
        var failures: [String] = []
        func report(_ error: any Error) { failures.append("\(error)") }

        for attempt in ["the server answers", "the revocation endpoint answers 503"] {
            try await auth.signIn(tokenEndpoint.signIn(username: "ada", password: "lovelace"))
            let (refresh, access) = (oauth.currentRefresh ?? "", oauth.currentAccess ?? "")
            let signedIn = await concurrentGETs(manager.session, oauth.apiURL(), count: 1)
            try transcript.check((try? signedIn.first?.get()) == 200, "the signed-in GET failed")
            if attempt != "the server answers" { oauth.setRevocationAnswer(.reject(status: 503, error: "temporarily_unavailable")) }
            let revokedBefore = oauth.revokedTokens.count

            // DocC sign out: begin
            let revocation = try await manager.signOut(of: auth)  // signed out here first, whatever the server says
            if case .failed(let error) = revocation {
                // The server may still honour the tokens until they expire: tell the user, or log it.
                report(error)
            }
            // DocC sign out: end

            let held = try await auth.currentCredential()
            transcript.client("\(attempt): signOut(of:) → \(revocation); signed out here: \(held == nil)")
            transcript.server(
                "revocation requests: \(oauth.revocationRequests.count); refresh token valid: \(oauth.currentRefresh == refresh), access token valid: \(oauth.currentAccess == access)"
            )
            try transcript.check(held == nil, "still signed in after signOut(of:)")
            if attempt == "the server answers" {
                guard case .revoked = revocation else { throw Transcript.CheckFailed(description: "not revoked: \(revocation)") }
                try transcript.check(
                    oauth.revokedTokens.dropFirst(revokedBefore) == [refresh, access], "not the refresh token, then the access token")
                try transcript.check(oauth.currentRefresh == nil && oauth.currentAccess == nil, "a token is still valid at the server")
            } else {
                try transcript.check(failures.count == 1, "the 503 was not reported")
                try transcript.check(oauth.currentRefresh == refresh, "the 503 revoked the refresh token")
            }
        }
        transcript.note("reported: \(failures.joined(separator: "; "))")
        transcript.conclude("revoked: the refresh token, then the access token; a 503 reported, the sign-out done anyway")
    }
}
