// The client-credentials pattern of the OAuth2 article ("A machine client: client
// credentials"). This file is compiled twice: into Examples, and into URLTaskOAuth2Tests,
// where Tests/URLTaskOAuth2Tests/MachineClient.swift is a symbolic link to it, so that
// `MachineClientTests` runs this very code against LoopbackServer's `OAuthServer` and against
// django-oauth-toolkit. It needs nothing but the three modules it imports.
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import URLTaskManager
import URLTaskOAuth2

// DocC client credentials: begin
/// A machine client (a server, a daemon, a scheduled job): no user, only the client's own ID and
/// secret, which buy a token with the client-credentials grant (RFC 6749 §4.4). That grant
/// issues no refresh token (§4.4.3), so renewing is asking again: the authenticator's `refresh`
/// requests a new token, whenever the token is about to expire or the API answers 401.
struct MachineClient: Sendable {
    let session: URLSession
    let auth: OAuth2Authenticator
    let tokenEndpoint: OAuth2TokenEndpoint
    let grant: [String: String]

    init(api: URL, tokenURL: URL, clientID: String, clientSecret: String, scope: String? = nil) {
        // A confidential client: the secret goes in HTTP Basic (`clientAuthentication: .requestBody`
        // puts it in the form, for servers that want it there).
        let tokenEndpoint = OAuth2TokenEndpoint(url: tokenURL, clientID: clientID, clientSecret: clientSecret)
        let grant = scope.map { ["grant_type": "client_credentials", "scope": $0] } ?? ["grant_type": "client_credentials"]
        auth = OAuth2Authenticator(
            origins: [api], isTokenRequest: { tokenEndpoint.matches($0) },
            refresh: { _ in try await tokenEndpoint.requestToken(grant) })
        session =
            URLTaskManager(
                interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)]
            ).session
        self.tokenEndpoint = tokenEndpoint
        self.grant = grant
    }

    /// The first token, before the first request: a request sent without a token is not
    /// renewed (its 401 reaches the caller). A wrong ID or secret throws an `OAuth2Error` that
    /// `isConfigurationError`.
    func signIn() async throws {
        try await auth.signIn(tokenEndpoint.requestToken(grant))
    }
}
// DocC client credentials: end
