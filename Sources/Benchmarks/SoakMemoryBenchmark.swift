// Memory over a long run: `swift run -c release Benchmarks soak [REQUESTS] [IN-FLIGHT]`.
//
// REQUESTS GETs (200,000), IN-FLIGHT at a time (50), first through a plain URLSession, then
// through a manager with the OAuth2 kit (a BearerInterceptor and an OAuth2RefreshReactor), a
// reader draining `manager.events()`, and tokens that expire every 2 seconds (so the run
// refreshes about once every 2 s). Each client runs in a child process of its own against one
// OAuthServer in a third (so neither the server's request log nor the other client counts),
// and prints, at every tenth of the run, its resident memory after `malloc_trim` and its
// thread count. The parent prints both side by side and the growth per request from the first
// tenth to the end (the first tenth warms up caches, pools and connections).

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import URLTaskOAuth2

enum SoakMemoryBenchmark {
    struct Checkpoint {
        var requests: Int
        var residentKiB: Int
        var threads: Int
    }

    /// The parent: starts the server and each client, and prints what they measured.
    static func run(_ arguments: [String]) throws {
        let numbers = arguments.compactMap(Int.init)
        let requests = numbers.first ?? 200_000
        let inFlight = numbers.dropFirst().first ?? 50
        let server = try child(["serve-oauth"])
        let base = server.line
        defer { server.process.terminate() }
        print("soak: \(requests) GETs, \(inFlight) in flight, each client in its own process; resident memory after malloc_trim")
        var results: [String: [Checkpoint]] = [:]
        for kind in ["plain", "kit"] {
            let client = try child(["soak-client", kind, base, "\(requests)", "\(inFlight)"], waitForFirstLine: false)
            let output = String(decoding: client.output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            client.process.waitUntilExit()
            results[kind] = output.split(separator: "\n").compactMap { line -> Checkpoint? in
                let fields = line.split(separator: " ")
                guard fields.first == "CHECK", fields.count == 4, let n = Int(fields[1]), let kib = Int(fields[2]),
                    let threads = Int(fields[3])
                else { return nil }
                return Checkpoint(requests: n, residentKiB: kib, threads: threads)
            }
            for line in output.split(separator: "\n") where !line.hasPrefix("CHECK") { print("  \(kind): \(line)") }
        }
        let plain = results["plain"] ?? []
        let kit = results["kit"] ?? []
        print("requests    plain MiB  threads   kit MiB  threads")
        for (p, k) in zip(plain, kit) {
            print(
                "\(p.requests)".padding(toLength: 12, withPad: " ", startingAt: 0)
                    + String(
                        format: "%9.1f  %7d  %8.1f  %7d", Double(p.residentKiB) / 1024, p.threads, Double(k.residentKiB) / 1024, k.threads))
        }
        guard let p0 = plain.first, let p1 = plain.last, let k0 = kit.first, let k1 = kit.last, p1.requests > p0.requests else { return }
        let plainPerRequest = Double(p1.residentKiB - p0.residentKiB) * 1024 / Double(p1.requests - p0.requests)
        let kitPerRequest = Double(k1.residentKiB - k0.residentKiB) * 1024 / Double(k1.requests - k0.requests)
        print(
            String(
                format: "growth from %d to %d requests: plain %.0f B a request, kit %.0f B a request, kit - plain %.0f B a request",
                p0.requests, p1.requests, plainPerRequest, kitPerRequest, kitPerRequest - plainPerRequest))
    }

    /// A child: the OAuth server (`serve-oauth`, which prints its base URL, then serves until
    /// its standard input closes).
    static func serve() throws -> Never {
        let server = try OAuthServer(access: "start")
        server.setExpiresIn(2)
        server.expireAccessTokens(after: .seconds(2))
        FileHandle.standardOutput.write(Data("\(server.baseURL.absoluteString)\n".utf8))
        while FileHandle.standardInput.availableData.count > 0 {}
        server.shutdown()
        exit(0)
    }

    /// A child: one client (`soak-client plain|kit BASE REQUESTS IN-FLIGHT`), printing a
    /// `CHECK requests KiB threads` line at every tenth.
    static func client(_ arguments: [String]) async throws {
        guard arguments.count == 4, let base = URL(string: arguments[1]), let requests = Int(arguments[2]), let inFlight = Int(arguments[3])
        else { throw URLError(.badURL) }
        let url = base.appendingPathComponent("api/profile")
        let session: URLSession
        var reader: Task<Int, Never>?
        if arguments[0] == "kit" {
            let endpoint = OAuth2TokenEndpoint(url: base.appendingPathComponent("oauth/token"), clientID: "soak")
            let credential = OAuth2Credential(accessToken: "start", refreshToken: "refresh-0", expiresAt: Date().addingTimeInterval(2))
            let auth = OAuth2Authenticator(origins: [base], tokenEndpoint: endpoint, store: InMemoryCredentialStore(credential))
            let manager = URLTaskManager(
                interceptors: [BearerInterceptor(authenticator: auth)], reactors: [OAuth2RefreshReactor(authenticator: auth)],
                configuration: .ephemeral)
            let events = manager.events()
            reader = Task {
                var count = 0
                for await _ in events { count += 1 }
                return count
            }
            session = manager.session
        } else {
            session = URLSession(configuration: .ephemeral)
        }
        let checkpoint = max(1, requests / 10)
        let outcomes = await withTaskGroup(of: Int.self) { group in
            @Sendable func fetch() async -> Int {
                var request = URLRequest(url: url)
                if arguments[0] == "plain" { request.setValue("Bearer start", forHTTPHeaderField: "Authorization") }
                do {
                    let (_, response) = try await session.data(for: request)
                    return (response as? HTTPURLResponse)?.statusCode ?? -1
                } catch {
                    return -2
                }
            }
            var started = 0
            while started < min(inFlight, requests) {
                group.addTask { await fetch() }
                started += 1
            }
            var done = 0
            var statuses: [Int: Int] = [:]
            for await status in group {
                done += 1
                statuses[status, default: 0] += 1
                if done % checkpoint == 0 { print("CHECK \(done) \(ProcessStatus.residentKiBAfterTrim()) \(ProcessStatus.threads)") }
                if started < requests {
                    group.addTask { await fetch() }
                    started += 1
                }
            }
            return statuses
        }
        session.finishTasksAndInvalidate()
        let events = await reader?.value
        print("outcomes \(outcomes.sorted { $0.key < $1.key })" + (events.map { ", \($0) events read" } ?? ""))
    }

    private static func child(
        _ arguments: [String], waitForFirstLine: Bool = true
    ) throws -> (process: Process, output: Pipe, input: Pipe, line: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = arguments
        let output = Pipe()
        let input = Pipe()
        process.standardOutput = output
        process.standardInput = input
        try process.run()
        guard waitForFirstLine else { return (process, output, input, "") }
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { throw URLError(.cannotConnectToHost) }
            line.append(chunk)
        }
        return (process, output, input, String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }
}
