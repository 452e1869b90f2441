import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
import LoopbackServer
@testable import URLTaskManager
@testable import URLTaskResilience
import TestSupport

/// Who may share a transfer (``TransferSharing``), judged on the request as it goes on the wire:
/// what the inner session adds (cookies from the configuration's storage), header names without
/// case, and credential-like headers that no ignore list can make shareable. Each test failed on
/// 0.3 as it stood (issue 37, findings 1, 2 and 7); over real HTTP on 127.0.0.1. Each manager
/// has an ephemeral configuration: cookies other tests were sent for 127.0.0.1 stay out.
final class SharingIdentityTests: XCTestCase {
    typealias Kit = ResilienceTestKit

    /// A server whose `/me` answers, once `gate` opens, with the cookie and tenant it received,
    /// as a private answer that varies on the first two (unless `vary` is `false`).
    private func privateServer(_ gate: Gate, chunkDelay: Duration? = nil, vary: Bool = true) throws -> LoopbackServer {
        let server = try LoopbackServer()
        server.route("/me") { request in
            _ = gate.wait(timeout: .seconds(10))
            let text =
                "cookie=\(request.headers["cookie"] ?? "-") tenant=\(request.headers["x-tenant"] ?? "-") key=\(request.headers["x-api-key"] ?? "-")"
            var headers: HTTPFields = ["Cache-Control": "private, no-store"]
            if vary { headers = ["Cache-Control": "private, no-store", "Vary": "Cookie, X-Tenant"] }
            guard let chunkDelay else { return ServerResponse(headers: headers, body: .data(Data(text.utf8))) }
            // The head and a first part now, the rest after `chunkDelay`: a request that arrives
            // meanwhile is a late join.
            return ServerResponse(headers: headers, body: .chunked([Data("[".utf8), Data(text.utf8)], chunkDelay: chunkDelay))
        }
        return server
    }

    private func cookie(_ value: String, for url: URL) -> HTTPCookie {
        HTTPCookie(properties: [.name: "session", .value: value, .domain: url.host!, .path: "/"])!
    }

    /// Finding 1: the configuration's cookie storage changes from alice's session to bob's while
    /// alice's identical GET is in flight; bob's GET must get bob's answer. 0.3 let it join
    /// alice's transfer (its key never saw the cookie the inner session adds) and handed it
    /// alice's `private, no-store` answer.
    func testARequestWhoseStoredCookieDiffersNeverJoinsAnotherUsersTransfer() async throws {
        let gate = Gate()
        let server = try privateServer(gate)
        defer { server.shutdown() }
        let configuration = URLSessionConfiguration.ephemeral
        let storage = try XCTUnwrap(configuration.httpCookieStorage)
        let coalescing = CoalescingInterceptor()
        let manager = URLTaskManager(interceptors: [coalescing], configuration: configuration)
        let events = Kit.Events(coalescing.events())
        let url = server.url("/me")

        storage.setCookie(cookie("alice", for: url))
        let alice = Task { await fetched(manager.session, URLRequest(url: url)) }
        try await events.wait("alice sent") { if case .started = $0 { return true } else { return false } }
        // Her request reached the server, so her inner task was made with her cookie (a change
        // before that would have sent bob's, as a plain session would).
        _ = try await server.waitForRequests(path: "/me", count: 1)
        storage.setCookie(cookie("bob", for: url))
        let bob = Task { await fetched(manager.session, URLRequest(url: url)) }
        try await events.wait("bob sent or joined", count: 2) {
            switch $0 {
            case .started, .joined: return true
            default: return false
            }
        }
        gate.open()
        let aliceText = await alice.value.text
        let bobText = await bob.value.text
        XCTAssertEqual(aliceText, "cookie=session=alice tenant=- key=-")
        XCTAssertEqual(bobText, "cookie=session=bob tenant=- key=-", "bob must never receive alice's private answer")
        XCTAssertEqual(server.requestCount(path: "/me"), 2)
    }

    /// Finding 1, late: bob arrives after alice's answer began (while it is still short enough to
    /// be handed to a late listener). 0.3 replayed alice's answer to bob.
    func testALateRequestWhoseStoredCookieDiffersIsNotHandedTheAnswerSoFar() async throws {
        let gate = Gate()
        gate.open()
        let server = try privateServer(gate, chunkDelay: .seconds(1))
        defer { server.shutdown() }
        let configuration = URLSessionConfiguration.ephemeral
        let storage = try XCTUnwrap(configuration.httpCookieStorage)
        let coalescing = CoalescingInterceptor()
        let delegate = RecordingDelegate()
        let manager = URLTaskManager(interceptors: [coalescing], configuration: configuration, delegate: delegate)
        let url = server.url("/me")

        storage.setCookie(cookie("alice", for: url))
        let aliceTask = manager.session.dataTask(with: url)
        aliceTask.resume()
        try await waitUntil("alice's answer began") { delegate.record(for: aliceTask).response != nil }
        storage.setCookie(cookie("bob", for: url))
        let bob = await fetched(manager.session, URLRequest(url: url))
        try await delegate.completion(of: aliceTask, timeout: .seconds(10))
        XCTAssertEqual(String(decoding: delegate.record(for: aliceTask).body, as: UTF8.self), "[cookie=session=alice tenant=- key=-")
        XCTAssertEqual(bob.text, "[cookie=session=bob tenant=- key=-", "bob must never be handed alice's answer so far")
        XCTAssertEqual(server.requestCount(path: "/me"), 2)
    }

    /// Finding 2: a request whose header names differ only in case (`X-Tenant: alice` and
    /// `x-tenant: bob`) carries one of the two on the wire; it must not share with a
    /// single-tenant request. 0.3 kept one value in the key while the wire carried the other, and
    /// a single-tenant caller received the other tenant's answer.
    func testHeaderNamesThatDifferOnlyInCaseNeverShare() async throws {
        for round in 0..<10 {
            let gate = Gate()
            let server = try privateServer(gate)
            defer { server.shutdown() }
            let coalescing = CoalescingInterceptor()
            let manager = URLTaskManager(interceptors: [coalescing], configuration: .ephemeral)
            let events = Kit.Events(coalescing.events())
            let url = server.url("/me")

            var mixed = URLRequest(url: url)
            mixed.allHTTPHeaderFields = ["X-Tenant": "alice", "x-tenant": "bob"]
            var alice = URLRequest(url: url)
            alice.setValue("alice", forHTTPHeaderField: "X-Tenant")
            var bob = URLRequest(url: url)
            bob.setValue("bob", forHTTPHeaderField: "X-Tenant")

            let mixedCall = Task { await fetched(manager.session, mixed) }
            _ = try await server.waitForRequests(path: "/me", count: 1)
            let aliceCall = Task { await fetched(manager.session, alice) }
            let bobCall = Task { await fetched(manager.session, bob) }
            try await events.wait("alice and bob sent or joined", count: 2) {
                switch $0 {
                case .started, .joined: return true
                default: return false
                }
            }
            gate.open()
            _ = await mixedCall.value
            let aliceText = await aliceCall.value.text
            let bobText = await bobCall.value.text
            XCTAssertEqual(aliceText, "cookie=- tenant=alice key=-", "round \(round)")
            XCTAssertEqual(bobText, "cookie=- tenant=bob key=-", "round \(round)")
            let joined = events.count { if case .joined = $0 { return true } else { return false } }
            XCTAssertEqual(joined, 0, "round \(round): a request with two spellings of one header shares with nobody")
        }
    }

    /// Finding 7: an ignore list that matches every `x-` header still never lets two different
    /// `X-API-Key` values share (a credential-like header identifies its caller, whatever the
    /// list says). 0.3 shared the first key's `private, no-store` answer with the second (the
    /// answer has no `Vary` that would have separated them).
    func testACredentialLikeHeaderIdentifiesItsCallerWhateverTheIgnoreListSays() async throws {
        let gate = Gate()
        let server = try privateServer(gate, vary: false)
        defer { server.shutdown() }
        let coalescing = CoalescingInterceptor(configuration: .init(headersThatNeverIdentifyACaller: ["x-*"]))
        let manager = URLTaskManager(interceptors: [coalescing], configuration: .ephemeral)
        let events = Kit.Events(coalescing.events())
        let url = server.url("/me")
        func request(key: String, trace: String) -> URLRequest {
            var request = URLRequest(url: url)
            request.setValue(key, forHTTPHeaderField: "X-API-Key")
            request.setValue(trace, forHTTPHeaderField: "X-Trace")
            return request
        }
        let first = Task { await fetched(manager.session, request(key: "k1", trace: "t1")) }
        try await events.wait("first sent") { if case .started = $0 { return true } else { return false } }
        let second = Task { await fetched(manager.session, request(key: "k2", trace: "t2")) }
        // An ignored header that is no credential still shares: the list keeps working.
        let third = Task { await fetched(manager.session, request(key: "k1", trace: "t3")) }
        try await events.wait("second and third sent or joined", count: 3) {
            switch $0 {
            case .started, .joined: return true
            default: return false
            }
        }
        gate.open()
        let firstText = await first.value.text
        let secondText = await second.value.text
        let thirdText = await third.value.text
        XCTAssertEqual(firstText, "cookie=- tenant=- key=k1")
        XCTAssertEqual(secondText, "cookie=- tenant=- key=k2", "another API key never shares")
        XCTAssertEqual(thirdText, "cookie=- tenant=- key=k1", "the same key with another ignored header shares")
        XCTAssertEqual(server.requestCount(path: "/me"), 2)
    }
}
