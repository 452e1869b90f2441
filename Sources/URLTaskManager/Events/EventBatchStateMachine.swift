/// When an ``EventHub`` that delivers in batches hands its pending events to its subscribers.
///
/// A subscriber suspended in `for await` is woken for each element yielded while it waits: a
/// thread wake-up and a context switch per event, five per request, so what an events reader
/// cost was its wake-ups, not the events (measured: the Performance article, "An events
/// reader"). Events are therefore gathered for a short window after the first one and yielded
/// together, so the reader wakes once for many of them.
struct EventBatchStateMachine<Event> {
    private enum State {
        /// Nothing pending, no flush scheduled.
        case idle
        /// A flush is scheduled; these events wait for it, in the order they were emitted.
        case gathering([Event])
        /// The hub finished: events emitted now are dropped.
        case finished
    }

    /// What the hub does after an event was emitted.
    enum EmitAction {
        /// The first event of a batch: schedule the flush.
        case scheduleFlush
        /// A flush is already scheduled.
        case none
    }

    /// What the hub does when it is told to finish.
    enum FinishAction {
        /// Yield these events (the ones still pending, in order), then end the streams.
        case yieldThenEnd([Event])
        /// The hub finished before: nothing to do.
        case none
    }

    private var state = State.idle

    mutating func emitted(_ event: Event) -> EmitAction {
        switch state {
        case .idle:
            state = .gathering([event])
            return .scheduleFlush
        case .gathering(var pending):
            state = .idle  // lets `pending` be appended to in place
            pending.append(event)
            state = .gathering(pending)
            return .none
        case .finished:
            return .none
        }
    }

    /// The scheduled flush is due: the events to yield, in order.
    mutating func flushDue() -> [Event] {
        switch state {
        case .gathering(let pending):
            state = .idle
            return pending
        case .idle, .finished:
            // `finish()` took the events before the flush ran.
            return []
        }
    }

    /// The hub finishes: the events still pending, to yield before the streams end; only the
    /// first time (a session invalidated and cancelled finishes its hub at once, and again
    /// when its inner session goes).
    mutating func finished() -> FinishAction {
        switch state {
        case .idle:
            state = .finished
            return .yieldThenEnd([])
        case .gathering(let pending):
            state = .finished
            return .yieldThenEnd(pending)
        case .finished:
            return .none
        }
    }
}
