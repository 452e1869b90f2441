// What a session leaves behind once it is dropped: `swift run -c release Benchmarks lifetime`.
//
// 10,000 times: create a session (plain, or a manager's with one interceptor), send one GET,
// drop every reference without invalidating. Resident memory and open descriptors are read
// before and after (after waiting, with a deadline, for closed connections to settle), for
// each kind in turn in one process, so a leak per session shows as growth per iteration.

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager

enum LifetimeBenchmark {
    struct Reading {
        var residentKiB: Int
        var descriptors: Int

        static var now: Reading {
            Reading(
                residentKiB: ProcessStatus.field("VmRSS") ?? -1,
                descriptors: (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1)
        }

    }

    static func run(iterations: Int) async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("GET", "/small") { _ in .text("ok") }
        let url = server.url("/small")
        let kinds: [(name: String, make: () -> URLSession)] = [
            ("plain URLSession", { URLSession(configuration: .default) }),
            ("manager, 1 HeaderInterceptor", { URLTaskManager(interceptors: [HeaderInterceptor(["X-Bench": "1"])]).session }),
        ]
        print(
            "Session lifetime: \(iterations) x (create, one GET, drop without invalidating), \(ProcessInfo.processInfo.activeProcessorCount) cores"
        )
        print(
            "kind".padding(toLength: 32, withPad: " ", startingAt: 0)
                + "RSS before   RSS after   growth     per session   fds before  fds after")
        for kind in kinds {
            // Warm up lazily created globals (curl, the shared queues) outside the measurement.
            try await loop(kind.make, url: url, count: 200)
            let before = await settled(Reading.now)
            try await loop(kind.make, url: url, count: iterations)
            let after = await settled(before)
            let growth = after.residentKiB - before.residentKiB
            print(
                kind.name.padding(toLength: 32, withPad: " ", startingAt: 0)
                    + "\(before.residentKiB) KiB".padding(toLength: 13, withPad: " ", startingAt: 0)
                    + "\(after.residentKiB) KiB".padding(toLength: 12, withPad: " ", startingAt: 0)
                    + "\(growth) KiB".padding(toLength: 11, withPad: " ", startingAt: 0)
                    + String(format: "%.0f B", Double(growth * 1024) / Double(iterations)).padding(
                        toLength: 14, withPad: " ", startingAt: 0)
                    + "\(before.descriptors)".padding(toLength: 12, withPad: " ", startingAt: 0)
                    + "\(after.descriptors)")
        }
    }

    private static func loop(_ make: () -> URLSession, url: URL, count: Int) async throws {
        for _ in 0..<count {
            let session = make()
            let (_, response) = try await session.data(from: url)
            guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw URLError(.badServerResponse) }
        }
    }

    /// Reads again until the descriptors are back to `baseline`'s count, or 5 s have passed:
    /// sockets close when curl's handles are freed, a moment after the session.
    private static func settled(_ baseline: Reading) async -> Reading {
        let deadline = ContinuousClock.now + .seconds(5)
        var reading = Reading.now
        while reading.descriptors > baseline.descriptors, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
            reading = Reading.now
        }
        return reading
    }
}
