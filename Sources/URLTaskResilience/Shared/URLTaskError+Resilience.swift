import URLTaskManager

extension URLTaskError.Code {
    /// The request was not sent because its host's circuit is open: a ``CircuitBreaker`` saw it
    /// fail repeatedly. `URLTaskError.underlying` is the ``CircuitOpenError``, with the host and
    /// when the next probe may go. Nothing reached the network; try again later.
    ///
    /// Declared here, by the module that makes it, as a component of yours declares its own
    /// code; its name is the one 0.3 printed (`circuitOpen`).
    public static let circuitOpen = URLTaskError.Code("circuitOpen", summary: "Refused without sending: the host's circuit is open")

    /// The request was not sent because too many already wait for its host under a
    /// ``RateLimiter``'s rate (its ``RateLimiter/Policy/maximumQueueLength``).
    /// `URLTaskError.underlying` is the ``RateLimitQueueFullError``. Nothing reached the
    /// network; try again later.
    ///
    /// Declared here, by the module that makes it; its name is the one 0.3 printed.
    public static let rateLimitQueueFull = URLTaskError.Code(
        "rateLimitQueueFull", summary: "Refused without sending: too many requests wait for the host")
}
