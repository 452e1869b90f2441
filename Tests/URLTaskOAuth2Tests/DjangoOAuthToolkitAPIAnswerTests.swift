import Foundation
import LoopbackServer
import XCTest

@testable import URLTaskManager
@testable import URLTaskOAuth2
import TestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What django-oauth-toolkit 3.4.1's two protected views answer to a token it no longer
/// accepts, as a plain session sees it (the OAuth2 article's "What the API must answer"): the
/// RFC 9728 view (`ProtectedResourceMetadataView`) answers RFC 6750's 401 with a Bearer
/// challenge, which ``OAuth2RefreshReactor`` refreshes on; the default `ProtectedResourceView`
/// a bare 403, which it does not (`DjangoOAuthToolkitTests`
/// `testAnExpiredTokenIsRefreshedOnTheAPIs401ButNotOnDOTsDefault403`).
final class DjangoOAuthToolkitAPIAnswerTests: XCTestCase {
    typealias Kit = ReactorTestKit

    func testAnExpiredTokenGetsA401WithABearerChallengeOrDOTsDefaultBare403() async throws {
        let server = try DjangoOAuthServer.start()
        let endpoint = OAuth2TokenEndpoint(
            url: server.tokenURL, clientID: DjangoOAuthServer.confidentialClientID, clientSecret: DjangoOAuthServer.confidentialClientSecret
        )
        let credential = try await endpoint.requestToken(["grant_type": "client_credentials"])
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        func get(_ url: URL, token: String?) async -> Kit.Fetch {
            var request = URLRequest(url: url)
            if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
            return await Kit.fetch(session, request)
        }
        for url in [server.apiURL, server.apiWithDOTDefaultURL] {
            let valid = await get(url, token: credential.accessToken)
            XCTAssertEqual(valid.status, 200, "\(url.path): \(valid.label)")
        }
        try await server.expireAccessToken(credential.accessToken)

        let refused = await get(server.apiURL, token: credential.accessToken)
        guard case .response(let status, let headers, _) = refused else { return XCTFail(refused.label) }
        XCTAssertEqual(status, 401)
        let challenge = try XCTUnwrap(headers["www-authenticate"], "RFC 6750 §3: a challenge with the 401")
        XCTAssertTrue(challenge.hasPrefix("Bearer "), challenge)
        XCTAssertTrue(challenge.contains(#"error="invalid_token""#), challenge)
        // Without a token at all: 401 with a challenge too (RFC 6750 §3.1: no error code).
        let anonymous = await get(server.apiURL, token: nil)
        guard case .response(401, let anonymousHeaders, _) = anonymous else { return XCTFail(anonymous.label) }
        XCTAssertEqual(anonymousHeaders["www-authenticate"]?.hasPrefix("Bearer"), true)

        let forbidden = await get(server.apiWithDOTDefaultURL, token: credential.accessToken)
        guard case .response(let defaultStatus, let defaultHeaders, let body) = forbidden else { return XCTFail(forbidden.label) }
        XCTAssertEqual(defaultStatus, 403)
        XCTAssertNil(defaultHeaders["www-authenticate"], "DOT's default view sends no challenge")
        XCTAssertEqual(body.count, 0)
    }
}
