import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2

// The README's "Two ways in": the same manager through its session (for code that takes a
// `URLSession`) and through its own methods (for your code), with an expired token that both
// refresh once.
// README two ways in: begin
func throughBothDoors(_ manager: URLTaskManager, _ url: URL) async throws -> [String] {
    // Code that takes a URLSession (an SDK, swift-openapi-urlsession): hand it the session.
    let (viaSession, _) = try await manager.session.data(from: url)
    // Your own code: the same parts, without the URLSession task a session needs.
    let (viaManager, _) = try await manager.data(from: url)
    // A body as it arrives (corelibs' URLSession has no bytes(for:)).
    let (bytes, _) = try await manager.bytes(for: URLRequest(url: url))
    var streamed = Data()
    for try await chunk in bytes.chunks { streamed.append(chunk) }
    return [viaSession, viaManager, streamed].map { String(decoding: $0, as: UTF8.self) }
}
// README two ways in: end

// DocC two ways in: begin
func postReport(_ report: Data, to url: URL, through manager: URLTaskManager) async throws -> Int {
    var request = URLRequest(url: url)
    request.httpMethod = "POST"
    request.setValue("application/json", forHTTPHeaderField: "Content-Type")
    // The same interceptors and reactors as `manager.session.upload(for:from:)`.
    let (_, response) = try await manager.upload(for: request, from: report)
    return (response as? HTTPURLResponse)?.statusCode ?? 0
}
// DocC two ways in: end

extension Scenario {
    static let twoWaysIn = Scenario(
        name: "two-ways-in", summary: "One manager through its session and through its own data(for:) and bytes(for:)"
    ) { transcript in
        let server = try OAuthServer(name: "demo")
        defer { server.shutdown() }
        let client = APIClient(api: server.baseURL, tokenURL: server.tokenURL)
        try await client.signIn(username: "ada", password: "lovelace")
        server.revokeAccess()
        transcript.server("access token revoked: the next request gets a 401")
        let manager = URLTaskManager(
            interceptors: [BearerInterceptor(authenticator: client.auth)],
            reactors: [OAuth2RefreshReactor(authenticator: client.auth)]
        )
        defer { manager.invalidateAndCancel() }
        let tokenRequests = server.tokenRequestCount
        let answers = try await throughBothDoors(manager, server.apiURL())
        for (door, answer) in zip(["manager.session.data(from:)", "manager.data(from:)", "manager.bytes(for:)"], answers) {
            transcript.client("\(door.padding(toLength: 28, withPad: " ", startingAt: 0)) → \(answer)")
        }
        try transcript.check(Set(answers).count == 1, "every door got the same answer: \(answers)")
        let status = try await postReport(Data(#"{"ok":true}"#.utf8), to: server.apiURL("/upload"), through: manager)
        transcript.client("manager.upload(for:from:)    → \(status)")
        try transcript.check(status == 200, "the upload was answered 200, got \(status)")
        let refreshes = server.tokenRequestCount - tokenRequests
        try transcript.check(refreshes == 1, "one refresh for every door, got \(refreshes)")
        transcript.note("one refresh, the same answer through every door")
    }
}
