/// Every duration that comes from a caller, a server or a file passes through these before any
/// arithmetic: the standard library traps where a `Double` or a `Duration` leaves `Int64`
/// (`Int64(seconds * 1_000)`, `Task.sleep(for: .seconds(Int64.max))`, `.seconds(Double.nan)`),
/// and so does corelibs for a `timeoutInterval` beyond about 9.2e15 s.
///
/// `package`: URLTaskResilience, URLTaskOAuth2 and URLTaskRedis clamp with these same lines (an
/// app does not see them).
extension Duration {
    /// The longest wait a timer of the library takes: 100 years (3,155,760,000 s). Longer is
    /// "never" for any process, and every clock and `timeoutInterval` the library hands it to
    /// can add it to "now" without overflowing.
    package static let longestWait = Duration.seconds(3_155_760_000)

    /// `seconds` as a wait: zero for a negative number or NaN, ``longestWait`` for anything
    /// longer (infinity included). Never traps.
    package init(clampingSeconds seconds: Double) {
        if !(seconds > 0) {
            self = .zero
        } else if seconds >= 3_155_760_000 {
            self = .longestWait
        } else {
            self = .seconds(seconds)
        }
    }

    /// This duration as a wait: zero if negative, at most ``longestWait``.
    package var clampedWait: Duration { min(max(self, .zero), .longestWait) }
}
