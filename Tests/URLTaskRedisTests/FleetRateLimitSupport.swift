import Foundation
import TestSupport
import XCTest
@testable import URLTaskRedis
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension RedisServerProcess {
    /// A client configuration for this server with short timeouts and reconnect delays, so a
    /// stopped server is noticed in half a second and a restarted one found at once.
    var fleetConfiguration: RedisClient.Configuration {
        .init(
            endpoint: .tcp(host: "127.0.0.1", port: port), connectTimeout: .milliseconds(500), replyTimeout: .milliseconds(500),
            reconnectDelay: .milliseconds(20), maximumReconnectDelay: .milliseconds(100))
    }
}

/// Collects a stream's events and lets a test wait for a count of those that match (no sleeps):
/// the resilience tests' collector.
typealias FleetEvents = ResilienceTestKit.Events

/// How late a request a limiter released may reach the server on the 2 busy cores these tests
/// run on (a request released a few ms early arriving late enough to share a second with later
/// ones): the one allowance every test of a rate at the server adds to the limiter's own bound.
/// Seen: 60 in a second for a limit of 60 on a quiet machine, 61 to 65 under load (65 in a full
/// `swift test` beside other jobs), 64 under the thread sanitizer: 100 ms of jitter at 50 a second.
let fleetArrivalJitter: Duration = .milliseconds(100)

/// Arrivals beyond a limiter's bound in one second that ``fleetArrivalJitter`` explains at
/// `rate` requests a second: 5 at 50 a second, 2 at 20. A fleet whose limit is not shared sends
/// about its process count times the rate, far past it.
func fleetArrivalAllowance(rate: Double) -> Int {
    let (seconds, attoseconds) = fleetArrivalJitter.components
    return Int((rate * (Double(seconds) + Double(attoseconds) / 1e18)).rounded(.up))
}

/// The most arrivals in any window of `window` (each window starting at an arrival).
func fleetBusiestWindow(_ arrivals: [ContinuousClock.Instant], window: Duration = .seconds(1)) -> Int {
    let sorted = arrivals.sorted()
    var best = 0
    var end = 0
    for start in sorted.indices {
        while end < sorted.count, sorted[end] < sorted[start] + window { end += 1 }
        best = max(best, end - start)
    }
    return best
}
