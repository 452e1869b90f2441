/// A typed stream of a part's decisions, for any number of readers: what a circuit breaker,
/// a rate limiter, an offline hold or a coalescing interceptor publishes, and what an
/// interceptor or reactor of your own can publish the same way.
///
/// A part decides things the task's own events do not show (a circuit opened, a request was
/// delayed or shared); an app wants them for logs, metrics and tests. The part owns one of
/// these, calls ``emit(_:)`` for each decision, and hands out ``subscribe(bufferingNewest:)``
/// (the built-ins call it `events(bufferingNewest:)`).
///
/// - Each reader gets its own `AsyncStream`, which keeps its newest `limit` events when the
///   reader falls behind: a slow reader loses the oldest events, never holds up a request.
/// - Events are yielded as they are emitted, in the order one caller emitted them; a reader
///   sees only the events emitted after it subscribed.
/// - Emitting while nobody reads costs a lock and an empty check; ``isListening`` lets a part
///   skip building an event nobody would read.
/// - The streams end when ``finish()`` is called or the owner releases this (a part's events
///   end with the part).
public final class DecisionEvents<Event: Sendable>: Sendable {
    private let hub = EventHub<Event>()

    /// No readers yet.
    public init() {}

    /// Whether anyone reads now: a part can skip building an event (a description, a copy of
    /// a URL) when this is `false`.
    public var isListening: Bool { hub.isListening }

    /// Yields `event` to every reader subscribed now; does nothing when nobody reads or after
    /// ``finish()``.
    public func emit(_ event: Event) {
        hub.emit(event)
    }

    /// A new reader's stream of the events emitted from now on, keeping the newest `limit` of
    /// them while the reader falls behind. Ending the stream (dropping it, cancelling its
    /// reading task) unsubscribes.
    public func subscribe(bufferingNewest limit: Int = 1_000) -> AsyncStream<Event> {
        hub.subscribe(bufferingNewest: limit)
    }

    /// Ends the stream of every reader subscribed now, after the events already yielded (the
    /// part is done); events emitted later reach none of them.
    public func finish() {
        hub.finish()
    }
}
