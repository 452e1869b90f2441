import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Which failures are worth another attempt, how many attempts, and how long to wait between them.
///
/// The defaults follow what is safe without knowing the API:
/// - **Only idempotent methods** (GET, HEAD, OPTIONS, PUT, DELETE, TRACE; RFC 9110 §9.2.2). A POST
///   that timed out may have been carried out; sending it again could pay twice. Add `POST` to
///   ``retryableMethods`` only for endpoints that deduplicate (an idempotency key).
/// - **Only transient statuses**: 408, 429, 500, 502, 503, 504. A 4xx other than 408/429 will
///   not change by asking again.
/// - **Only transport errors that say the request probably did not get through, or may succeed
///   later**: timeouts, lost or refused connections, no network, DNS failures. Not TLS failures,
///   not `cancelled`.
/// - **3 attempts in all** (the first send and two retries), so a dead server costs a bounded
///   delay; when they are used up the caller receives the last response (or error) as is.
/// - **Exponential back-off with jitter**: `base × multiplier^(retry − 1)`, at most ``Backoff/maximum``,
///   then shortened by a random fraction of up to ``Backoff/jitter``. Without jitter, every
///   client that failed together retries together, and the recovering server is hit by the same
///   wave again.
/// - **`Retry-After` wins** when the response has one (in seconds or as an HTTP date), capped
///   at ``maximumRetryAfter`` so a server cannot park a request for an hour.
public struct RetryPolicy: Sendable {
    /// Exponential back-off with jitter.
    public struct Backoff: Sendable {
        /// The wait before the first retry (before jitter). Negative counts as zero.
        public var base: Duration
        /// The factor applied for each further retry. Below 1 (NaN included) counts as 1: a
        /// smaller one would shrink the waits.
        public var multiplier: Double
        /// The longest wait (before jitter). Negative counts as zero, and anything beyond 100
        /// years as 100 years.
        public var maximum: Duration
        /// The largest fraction (0 to 1) by which a wait is randomly shortened. 0 disables jitter.
        /// Values outside 0 to 1 are clamped to it; NaN counts as 0.
        public var jitter: Double

        /// Back-off starting at `base`, growing by `multiplier`, at most `maximum`; each value
        /// clamped as its property says (0.2.0 trapped on a multiplier below 1 or a jitter
        /// outside 0 to 1).
        public init(base: Duration = .milliseconds(500), multiplier: Double = 2, maximum: Duration = .seconds(30), jitter: Double = 0.5) {
            self.base = base
            self.multiplier = multiplier
            self.maximum = maximum
            self.jitter = jitter
        }

        /// The wait before retry number `retry` (1 for the first), given a random number in 0..<1.
        /// Computed in `Double` and clamped once: a multiplier of 1e300 or a 1,000th retry grows
        /// to infinity, never to a trap.
        func delay(forRetry retry: Int, random: Double) -> Duration {
            let multiplier = self.multiplier >= 1 ? self.multiplier : 1
            let jitter = jitter >= 0 ? min(jitter, 1) : 0
            let grown = (base.clampedWait / .seconds(1)) * pow(multiplier, Double(max(0, retry - 1)))
            let capped = min(grown, maximum.clampedWait / .seconds(1))
            return Duration(clampingSeconds: capped * (1 - jitter * random))
        }
    }

    /// Attempts in all, the first send included. 1 disables retries; below 1 counts as 1.
    public var maximumAttempts: Int
    /// Response statuses worth a retry.
    public var retryableStatusCodes: Set<Int>
    /// Methods that may be sent again (upper case).
    public var retryableMethods: Set<String>
    /// Transport errors worth a retry.
    public var retryableURLErrorCodes: Set<URLError.Code>
    /// The wait between attempts when the server does not say.
    public var backoff: Backoff
    /// Honour `Retry-After` on a retried response (429, 503, ...).
    public var honorsRetryAfter: Bool
    /// The longest `Retry-After` obeyed; a longer one is cut to this. Negative counts as zero,
    /// and anything beyond 100 years as 100 years.
    public var maximumRetryAfter: Duration

    /// A policy; every parameter has the default described on the type, and any value is safe
    /// (each is clamped as its property says, before any arithmetic).
    public init(
        maximumAttempts: Int = 3,
        retryableStatusCodes: Set<Int> = [408, 429, 500, 502, 503, 504],
        retryableMethods: Set<String> = ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"],
        retryableURLErrorCodes: Set<URLError.Code> = [
            .timedOut, .networkConnectionLost, .cannotConnectToHost, .notConnectedToInternet,
            .dnsLookupFailed, .cannotFindHost, .resourceUnavailable,
        ],
        backoff: Backoff = Backoff(),
        honorsRetryAfter: Bool = true,
        maximumRetryAfter: Duration = .seconds(60)
    ) {
        self.maximumAttempts = maximumAttempts
        self.retryableStatusCodes = retryableStatusCodes
        self.retryableMethods = Set(retryableMethods.map { $0.uppercased() })
        self.retryableURLErrorCodes = retryableURLErrorCodes
        self.backoff = backoff
        self.honorsRetryAfter = honorsRetryAfter
        self.maximumRetryAfter = maximumRetryAfter
    }

    /// The defaults described on the type.
    public static var `default`: RetryPolicy { RetryPolicy() }

    /// Whether `request`, sent for the `attempt`th time (1 for the first), should be sent again
    /// after `outcome`.
    public func shouldRetry(_ request: URLRequest, attempt: Int, after outcome: URLTaskOutcome) -> Bool {
        guard attempt < max(1, maximumAttempts) else { return false }
        guard retryableMethods.contains((request.httpMethod ?? "GET").uppercased()) else { return false }
        switch outcome {
        case .response(let response):
            return retryableStatusCodes.contains(response.statusCode)
        case .failure:
            return outcome.urlErrorCode.map(retryableURLErrorCodes.contains) ?? false
        }
    }

    /// How long to wait before sending again after the `attempt`th send ended in `outcome`:
    /// the response's `Retry-After` if it has one (capped), else the back-off.
    public func delay(afterAttempt attempt: Int, outcome: URLTaskOutcome, now: Date = Date()) -> Duration {
        var generator = SystemRandomNumberGenerator()
        return delay(afterAttempt: attempt, outcome: outcome, now: now, random: Double.random(in: 0..<1, using: &generator))
    }

    func delay(afterAttempt attempt: Int, outcome: URLTaskOutcome, now: Date, random: Double) -> Duration {
        if honorsRetryAfter, case .response(let response) = outcome, let retryAfter = RetryAfter(response: response, now: now) {
            return min(retryAfter.delay, maximumRetryAfter.clampedWait)
        }
        return backoff.delay(forRetry: attempt, random: random)
    }

    /// Parses a `Retry-After` value (RFC 9110 §10.2.3): the wait ``RetryAfter`` reads, the one
    /// parser every part uses (delay-seconds up to 100 years, or a validated HTTP-date; a date in
    /// the past means no wait). `nil` if the value is neither.
    public static func retryAfter(_ value: String, now: Date = Date()) -> Duration? {
        RetryAfter(headerValue: value, now: now)?.delay
    }
}
