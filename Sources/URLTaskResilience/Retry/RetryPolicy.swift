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
        /// The wait before the first retry (before jitter).
        public var base: Duration
        /// The factor applied for each further retry.
        public var multiplier: Double
        /// The longest wait (before jitter).
        public var maximum: Duration
        /// The largest fraction (0 to 1) by which a wait is randomly shortened. 0 disables jitter.
        public var jitter: Double

        /// Back-off starting at `base`, growing by `multiplier`, at most `maximum`.
        public init(base: Duration = .milliseconds(500), multiplier: Double = 2, maximum: Duration = .seconds(30), jitter: Double = 0.5) {
            precondition(multiplier >= 1, "A back-off multiplier below 1 would shrink the waits")
            precondition((0...1).contains(jitter), "Jitter is a fraction between 0 and 1")
            self.base = base
            self.multiplier = multiplier
            self.maximum = maximum
            self.jitter = jitter
        }

        /// The wait before retry number `retry` (1 for the first), given a random number in 0..<1.
        func delay(forRetry retry: Int, random: Double) -> Duration {
            let grown = (base / .seconds(1)) * pow(multiplier, Double(max(0, retry - 1)))
            let capped = min(grown, maximum / .seconds(1))
            return .seconds(capped * (1 - jitter * random))
        }
    }

    /// Attempts in all, the first send included. 1 disables retries.
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
    /// The longest `Retry-After` obeyed; a longer one is cut to this.
    public var maximumRetryAfter: Duration

    /// A policy; every parameter has the default described on the type.
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
        precondition(maximumAttempts >= 1, "At least one attempt")
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
        guard attempt < maximumAttempts else { return false }
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
        if honorsRetryAfter, case .response(let response) = outcome,
            let header = response.value(forHTTPHeaderField: "Retry-After"),
            let wait = Self.retryAfter(header, now: now)
        {
            return min(wait, maximumRetryAfter)
        }
        return backoff.delay(forRetry: attempt, random: random)
    }

    /// Parses a `Retry-After` value (RFC 9110 §10.2.3): a number of seconds, or an HTTP date
    /// (IMF-fixdate, or the obsolete RFC 850 and asctime forms recipients must accept). A date
    /// in the past means no wait. `nil` if the value is neither.
    public static func retryAfter(_ value: String, now: Date = Date()) -> Duration? {
        let value = value.trimmingCharacters(in: .whitespaces)
        if !value.isEmpty, value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
            return .seconds(Int(value) ?? Int.max)
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            formatter.dateFormat = format
            if let date = formatter.date(from: value) {
                return .seconds(max(0, date.timeIntervalSince(now)))
            }
        }
        return nil
    }
}
