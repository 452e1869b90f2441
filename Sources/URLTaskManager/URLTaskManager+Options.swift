extension URLTaskManager {
    /// The manager's own settings, separate from the `URLSessionConfiguration` it wraps.
    public struct Options: Sendable {
        /// The longest a task may wait in an interceptor's batch. A task held longer fails with
        /// ``URLTaskError/Code-swift.struct/holdTimedOut``: URLSession's own timeouts do not
        /// run while a task is held, so without this a forgotten batch would hang its callers.
        /// Negative counts as zero (the task fails at once), and anything beyond 100 years as
        /// 100 years.
        public var maximumHoldTime: Duration

        /// The largest `httpBodyStream` body kept so the task can be sent again.
        ///
        /// A stream can be read only once, but a reactor may resend the task (after a token
        /// refresh, a retry). When the manager has reactors, a stream body up to this size is
        /// read into memory before the first send (off URLSession's queues) and replayed byte
        /// for byte on every resend. A larger stream is sent once as it is, streamed; if it must
        /// be resent the task fails with ``URLTaskError/Code-swift.struct/bodyNotReplayable`` rather than
        /// send an empty or partial body. `Data` and file bodies are always replayable. Zero or
        /// less keeps no stream body.
        public var maximumReplayableBodySize: Int

        /// How many requests to one host the manager hands to URLSession at once, when it has
        /// a reactor that holds new tasks (``URLTaskReactorConfiguration/Mode/refresh(loopGuard:)``, as
        /// ``URLTaskReactorConfiguration/authentication`` does). `nil`, the default, uses the
        /// configuration's `httpMaximumConnectionsPerHost`. Zero or less (here or there) keeps no
        /// queue of the manager's: URLSession queues the requests, as without such a reactor.
        ///
        /// URLSession sends that many requests to a host at once and queues the rest inside
        /// itself, their headers already applied. When a 401 starts a token refresh, requests
        /// queued there would still go out with the old token. The manager keeps that queue
        /// itself instead: a request takes a slot after its interceptors ran and is checked
        /// against the reactors once more when it gets one, so no request leaves with a token
        /// a refresh has replaced or is replacing. Raise it for HTTP/2 servers on Apple
        /// platforms, where one connection carries many requests at once.
        public var maximumRequestsInFlightPerHost: Int?

        /// The largest response body the pipeline holds whole before anyone has seen it: the
        /// body of a 401 whose HTTP authentication challenge the caller's side answers, and of an
        /// answer a reactor takes that may then reach the caller (a reactor that delivers, or a
        /// task already sent again after its run). Past it the task fails with
        /// ``URLTaskError/Code-swift.struct/responseTooLarge`` and its transfer is stopped.
        ///
        /// Such a body waits in memory for a decision (the caller's credential, the reactor's
        /// verdict) and is then handed over in one piece, so it can neither be streamed nor cut:
        /// without a bound, a server answering 401 with an endless body would grow the app's
        /// memory until it died. Bodies the caller receives as they arrive are not held and have
        /// no such limit; a reactor's answer that never reaches the caller keeps its first MiB
        /// and stops its transfer there. The default, 16 MiB, is far above any error page; zero
        /// or less holds no body (every such answer with a body fails).
        public var maximumHeldBodySize: Int

        /// ``maximumHeldBodySize``'s default: 16 MiB.
        public static let defaultMaximumHeldBodySize = 16 << 20

        /// The answers every request accepts (``ResponseValidation``): any other final answer
        /// fails its task with ``URLTaskError/Code-swift.struct/responseRejected``. `nil`, the
        /// default, accepts every answer, as URLSession does. One request can set its own with a
        /// ``URLTaskPolicy``.
        public var responseValidation: ResponseValidation?

        /// How long the manager gathers task events (``URLTaskManager/events(bufferingNewest:)``)
        /// before handing them to the streams together, in order. `nil` hands each over at once.
        ///
        /// A reader suspended in `for await` is woken for every element that arrives while it
        /// waits, a thread wake-up per event and five events per request; gathered, the events
        /// of many requests wake it once (what each way costs: <doc:Performance>, "An events
        /// reader"). Events are for logs and metrics; shorten the window where a reader
        /// must see an event sooner. Negative counts as zero and anything beyond 60 seconds as
        /// 60 seconds: a window that never closed would keep every event and hand none over.
        public var eventBatchWindow: Duration?

        /// The most of a ``URLTaskManager/bytes(for:)`` body that waits on disk for its reader:
        /// 256 MiB by default.
        ///
        /// corelibs cannot pause a transfer, so what a reader has not taken yet is kept: up to
        /// 1 MiB in memory, the rest in a temporary file (gone from disk as soon as it is made;
        /// its space is reused as the reader catches up, so the file never holds more than
        /// this). A reader that falls further behind, or holds the body without reading it,
        /// would otherwise fill the disk at the network's pace (RAM where the temporary folder
        /// is a tmpfs), so there the transfer is stopped and the reader gets every byte that
        /// came before, then ``URLTaskError/Code-swift.struct/spillLimitReached`` (never a body
        /// silently cut short).
        ///
        /// 256 MiB lets a reader stop for a few seconds at the speed of a fast link (about 2 s
        /// at 1 Gbit/s) and lets a body of that size arrive whole before a byte is read, while
        /// a reader that never reads costs at most that much disk (or tmpfs RAM), not all of it.
        /// Raise it for bodies read far slower than they arrive (or use
        /// ``URLTaskManager/download(for:)``, which keeps the whole body on disk by design);
        /// `Int.max` removes the bound. Zero or less spills nothing: the body ends once 1 MiB
        /// waits unread.
        public var maximumSpilledBodySize: Int

        /// Creates options; every parameter has a sensible default.
        public init(
            maximumHoldTime: Duration = .seconds(60), maximumReplayableBodySize: Int = 8 << 20, maximumRequestsInFlightPerHost: Int? = nil,
            responseValidation: ResponseValidation? = nil, eventBatchWindow: Duration? = .milliseconds(20),
            maximumSpilledBodySize: Int = 256 << 20, maximumHeldBodySize: Int = Options.defaultMaximumHeldBodySize
        ) {
            self.maximumSpilledBodySize = maximumSpilledBodySize
            self.maximumHeldBodySize = maximumHeldBodySize
            self.eventBatchWindow = eventBatchWindow
            self.responseValidation = responseValidation
            self.maximumHoldTime = maximumHoldTime
            self.maximumReplayableBodySize = maximumReplayableBodySize
            self.maximumRequestsInFlightPerHost = maximumRequestsInFlightPerHost
        }

        /// The defaults: hold at most 60 seconds, replay stream bodies up to 8 MiB, as many
        /// requests per host in flight as the configuration has connections per host, events
        /// handed over every 20 ms, a `bytes(for:)` body's reader at most 256 MiB behind on disk,
        /// response bodies held whole up to 16 MiB.
        public static var `default`: Options { Options() }
    }
}
