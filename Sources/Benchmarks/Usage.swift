import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What this process has used so far: wall clock, CPU time and context switches (getrusage).
/// The server runs in another process, so these are the client's alone.
struct Usage {
    var wall: ContinuousClock.Instant
    var cpuSeconds: Double
    var contextSwitches: Int

    static var now: Usage {
        var usage = rusage()
        #if canImport(Glibc)
        getrusage(RUSAGE_SELF.rawValue, &usage)
        #else
        getrusage(RUSAGE_SELF, &usage)
        #endif
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return Usage(
            wall: .now,
            cpuSeconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
            contextSwitches: Int(usage.ru_nvcsw) + Int(usage.ru_nivcsw)
        )
    }

    /// Per-request figures between `start` and now, for `requests` requests.
    static func perRequest(since start: Usage, requests: Int) -> PerRequest {
        let end = Usage.now
        let wall = start.wall.duration(to: end.wall)
        let (seconds, attoseconds) = wall.components
        let wallSeconds = Double(seconds) + Double(attoseconds) / 1e18
        return PerRequest(
            wallMilliseconds: wallSeconds * 1_000 / Double(requests),
            cpuMilliseconds: (end.cpuSeconds - start.cpuSeconds) * 1_000 / Double(requests),
            contextSwitches: Double(end.contextSwitches - start.contextSwitches) / Double(requests)
        )
    }
}

/// One round's figures, per request.
struct PerRequest {
    var wallMilliseconds: Double
    var cpuMilliseconds: Double
    var contextSwitches: Double

    /// The median of each figure across rounds.
    static func median(_ rounds: [PerRequest]) -> PerRequest {
        func median(_ values: [Double]) -> Double {
            let sorted = values.sorted()
            return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
        }
        return PerRequest(
            wallMilliseconds: median(rounds.map(\.wallMilliseconds)),
            cpuMilliseconds: median(rounds.map(\.cpuMilliseconds)),
            contextSwitches: median(rounds.map(\.contextSwitches))
        )
    }
}
