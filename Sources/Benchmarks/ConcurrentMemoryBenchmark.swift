// Peak memory of many whole bodies at once: `swift run -c release Benchmarks concurrent-memory [COUNT] [KIB]`.
//
// COUNT (default 1,000) concurrent GETs of KIB KiB each (default 1,024) of `GeneratedBody`'s
// pattern from the server in a child process (`serve`, route `/generated/N`), each answer
// returned whole (`data(for:)`) and dropped once its length is checked, by one subject per row,
// each row in a process of its own:
//
//     plain URLSession            URLSession(configuration: .ephemeral).data(for:)
//     manager.data(for:)          a URLTaskManager without parts, its own method
//     manager.session             the same manager's session
//     OAuth2 kit, data(for:)      BearerInterceptor and OAuth2RefreshReactor, a long-lived token
//     OAuth2 kit, session         the same through the session
//
// Every configuration has no URL cache (a cache would keep the bodies). Each child first runs 10
// GETs (connections, lazy initialisation), gives freed memory back (`malloc_trim`) and resets the
// peak resident set (`/proc/self/clear_refs`); its growth is `VmHWM` after the COUNT GETs minus
// `VmRSS` before them. Linux only (`/proc`); never run by the tests.

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import URLTaskManager
import URLTaskOAuth2

enum ConcurrentMemoryBenchmark {
    /// One way of fetching a URL whole.
    private struct Subject: Sendable {
        let name: String
        let make: @Sendable (URL) -> @Sendable (URLRequest) async throws -> (Data, URLResponse)
    }

    private static func configuration() -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        return configuration
    }

    private static func kit(origin: URL) -> (BearerInterceptor, OAuth2RefreshReactor) {
        let auth = OAuth2Authenticator(
            origins: [origin], tokenEndpoint: OAuth2TokenEndpoint(url: origin.appendingPathComponent("token"), clientID: "bench"),
            store: InMemoryCredentialStore(OAuth2Credential(accessToken: "bench", expiresAt: .distantFuture)))
        return (BearerInterceptor(authenticator: auth), OAuth2RefreshReactor(authenticator: auth))
    }

    private static let subjects: [Subject] = [
        Subject(name: "plain URLSession") { _ in
            let session = URLSession(configuration: configuration())
            return { try await session.data(for: $0) }
        },
        Subject(name: "manager.data(for:)") { _ in
            let manager = URLTaskManager(configuration: configuration())
            return { try await manager.data(for: $0) }
        },
        Subject(name: "manager.session") { _ in
            let manager = URLTaskManager(configuration: configuration())
            return { try await manager.session.data(for: $0) }
        },
        Subject(name: "OAuth2 kit, data(for:)") { origin in
            let (bearer, reactor) = kit(origin: origin)
            let manager = URLTaskManager(interceptors: [bearer], reactors: [reactor], configuration: configuration())
            return { try await manager.data(for: $0) }
        },
        Subject(name: "OAuth2 kit, session") { origin in
            let (bearer, reactor) = kit(origin: origin)
            let manager = URLTaskManager(interceptors: [bearer], reactors: [reactor], configuration: configuration())
            return { try await manager.session.data(for: $0) }
        },
    ]

    /// The parent: the server, then one child per subject.
    static func run(_ arguments: [String]) async throws {
        let count = arguments.first.flatMap(Int.init) ?? 1_000
        let kib = arguments.dropFirst().first.flatMap(Int.init) ?? 1_024
        let (server, base) = try ServerProcess.start()
        defer { server.terminate() }
        print("\(count) concurrent GETs of \(kib) KiB, each returned whole; peak resident growth, each row in a process of its own")
        print("subject".padding(toLength: 26, withPad: " ", startingAt: 0) + "peak growth   per GET     vs plain")
        var plain: Int?
        for index in subjects.indices {
            let (status, line) = try ChildRow.run(["concurrent-memory-row", "\(index)", base.absoluteString, "\(count)", "\(kib)"])
            let figures = line.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            guard status == 0, figures.count == 2 else {
                print("\(subjects[index].name): the child failed (\(status)): \(line)")
                continue
            }
            let growth = figures[1] - figures[0]
            plain = plain ?? growth
            print(
                subjects[index].name.padding(toLength: 26, withPad: " ", startingAt: 0)
                    + String(format: "%+.0f MB", Double(growth) * 1024 / 1_000_000).padding(toLength: 14, withPad: " ", startingAt: 0)
                    + String(format: "%.2f MB", Double(growth) * 1024 / 1_000_000 / Double(max(1, count)))
                    .padding(toLength: 12, withPad: " ", startingAt: 0)
                    + String(format: "%.2fx", Double(growth) / Double(max(1, plain ?? growth))))
        }
    }

    /// A child (`concurrent-memory-row SUBJECT BASE COUNT KIB`): prints its resident KiB before
    /// the GETs and its peak after them.
    static func row(_ arguments: [String]) async throws {
        guard arguments.count == 4, let index = Int(arguments[0]), subjects.indices.contains(index),
            let base = URL(string: arguments[1]), let count = Int(arguments[2]), let kib = Int(arguments[3])
        else { throw URLError(.badURL) }
        let length = kib * 1_024
        let fetch = subjects[index].make(base)
        let request = URLRequest(url: base.appendingPathComponent("generated/\(length)"))
        try await fetchAll(10, fetch, request, length: length)
        guard ProcessStatus.resetPeak() else { throw URLError(.resourceUnavailable) }
        let before = ProcessStatus.residentKiBAfterTrim()
        try await fetchAll(count, fetch, request, length: length)
        print("\(before) \(ProcessStatus.peakKiB ?? -1)")
    }

    /// `count` concurrent fetches, each body's length checked and dropped.
    private static func fetchAll(
        _ count: Int, _ fetch: @escaping @Sendable (URLRequest) async throws -> (Data, URLResponse), _ request: URLRequest, length: Int
    ) async throws {
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<count { group.addTask { try await fetch(request).0.count } }
            for try await received in group where received != length {
                throw URLError(.cannotDecodeContentData, userInfo: [NSLocalizedDescriptionKey: "\(received) bytes of \(length)"])
            }
        }
    }
}
