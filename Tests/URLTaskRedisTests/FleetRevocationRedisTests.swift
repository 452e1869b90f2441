import Foundation
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2
import XCTest

@testable import URLTaskRedis

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A fleet's sign-out over a real `redis-server` (skipped, with how to install it, where it is
/// absent) and LoopbackServer's `OAuthServer`: two members, each with its own ``RedisClient``
/// and ``FleetCredential`` as two processes would have. One signs out: the server sees one
/// revocation per token (RFC 7009), and the other member forgets the credential without
/// revoking it again.
final class FleetRevocationRedisTests: XCTestCase {
    private struct Member: Sendable {
        let client: RedisClient
        let fleet: FleetCredential
        let authenticator: OAuth2Authenticator
        let manager: URLTaskManager
        let events: FleetEventLog
    }

    private func member(_ redis: RedisServerProcess, _ server: OAuthServer, prefix: String) -> Member {
        let client = RedisClient(configuration: redis.configuration(replyTimeout: .seconds(1)))
        let fleet = FleetCredential(
            client: client, configuration: .init(keyPrefix: prefix, leaseTimeToLive: .seconds(5)),
            tokenEndpoint: OAuth2TokenEndpoint(
                url: server.tokenURL, revocationURL: server.revocationURL, clientID: "fleet", clientSecret: "fleet-secret",
                timeout: .seconds(3)))
        let authenticator = fleet.makeAuthenticator(origins: [server.baseURL], refreshBackoff: .zero)
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: authenticator)], reactors: [OAuth2RefreshReactor(authenticator: authenticator)])
        return Member(client: client, fleet: fleet, authenticator: authenticator, manager: manager, events: FleetEventLog(fleet))
    }

    private func status(_ member: Member, _ url: URL) async -> Int {
        do {
            let (_, response) = try await member.manager.session.data(for: URLRequest(url: url))
            return (response as? HTTPURLResponse)?.statusCode ?? -1
        } catch {
            return -1
        }
    }

    /// The record under `prefix`, read as a process starting now would.
    private func stored(_ redis: RedisServerProcess, prefix: String) async throws -> OAuth2Credential? {
        let client = RedisClient(configuration: redis.configuration())
        defer { client.close() }
        let fleet = FleetCredential(client: client, configuration: .init(keyPrefix: prefix), refresh: { $0 })
        defer { fleet.shutdown() }
        return try await fleet.store.load()
    }

    private func signedInFleet() throws -> (RedisServerProcess, OAuthServer, String) {
        let redis = try RedisServerProcess()
        let server = try OAuthServer(name: "f", access: "f-access-0", refresh: "refresh-0")
        server.requireClient(id: "fleet", secret: "fleet-secret")
        return (redis, server, "urltask:cred:revoke-\(UUID().uuidString.prefix(8))")
    }

    func testOneMemberSignsOutTheServerSeesOneRevocationPerTokenAndTheOtherForgetsTheCredential() async throws {
        let (redis, server, prefix) = try signedInFleet()
        defer { redis.stop() }
        defer { server.shutdown() }
        let members = [member(redis, server, prefix: prefix), member(redis, server, prefix: prefix)]
        defer {
            for member in members {
                member.manager.invalidateAndCancel()
                member.fleet.shutdown()
                member.client.close()
            }
        }
        let (a, b) = (members[0], members[1])
        try await a.authenticator.signIn(
            OAuth2Credential(accessToken: "f-access-0", refreshToken: "refresh-0", expiresAt: Date().addingTimeInterval(3600)))
        for member in members {
            let answer = await status(member, server.apiURL())
            XCTAssertEqual(answer, 200, "signed in, each member loaded the credential")
        }

        let outcome = try await a.manager.signOut(of: a.authenticator)

        guard case .revoked = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(server.revokedTokens, ["refresh-0", "f-access-0"], "one revocation per token, refresh token first")
        for request in server.revocationRequests {
            XCTAssertEqual(OAuthServer.decodeBasicClient(request.headers["Authorization"])?.id, "fleet", "the token endpoint's Basic")
        }
        // The other member heard of it through Redis and forgot the credential, revoking nothing.
        try await b.events.wait(for: .signOutAdopted, within: .seconds(5))
        let held = try await b.authenticator.currentCredential()
        XCTAssertNil(held)
        let apiRequestsBefore = server.apiRequests.count
        let next = await status(b, server.apiURL("/after"))
        XCTAssertEqual(next, 401, "signed out: the API's 401 reaches the caller")
        let sent = server.apiRequests.dropFirst(apiRequestsBefore)
        XCTAssertEqual(sent.count, 1)
        XCTAssertEqual(sent.map { $0.headers["Authorization"] }, [nil], "the other member's next request carries no token")

        // The other member's own sign-out now: nothing to revoke, nothing sent.
        let again = try await b.manager.signOut(of: b.authenticator)
        guard case .nothingToRevoke = again else { return XCTFail("\(again)") }
        XCTAssertEqual(server.revocationRequests.count, 2)
        let inRedis = try await stored(redis, prefix: prefix)
        XCTAssertNil(inRedis, "the fleet is signed out")
        XCTAssertFalse(a.events.contains(.signOutAdopted), "the member that signed out adopts nothing")
    }

    func testTwoMembersSigningOutAtOnceRevokeOnceForTheFleet() async throws {
        let (redis, server, prefix) = try signedInFleet()
        defer { redis.stop() }
        defer { server.shutdown() }
        let members = [member(redis, server, prefix: prefix), member(redis, server, prefix: prefix)]
        defer {
            for member in members {
                member.manager.invalidateAndCancel()
                member.fleet.shutdown()
                member.client.close()
            }
        }
        try await members[0].authenticator.signIn(
            OAuth2Credential(accessToken: "f-access-0", refreshToken: "refresh-0", expiresAt: Date().addingTimeInterval(3600)))
        for member in members { _ = try await member.authenticator.currentCredential() }

        async let first = members[0].manager.signOut(of: members[0].authenticator)
        async let second = members[1].manager.signOut(of: members[1].authenticator)
        let outcomes = try await ["\(first)", "\(second)"]

        XCTAssertEqual(outcomes.sorted(), ["nothing to revoke", "revoked"], "\(outcomes)")
        XCTAssertEqual(server.revokedTokens, ["refresh-0", "f-access-0"])
        let inRedis = try await stored(redis, prefix: prefix)
        XCTAssertNil(inRedis)
    }
}
