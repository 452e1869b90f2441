import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Hands out a `URLSession` whose every task passes through your interceptors.
///
/// Replace `URLSession(configuration: configuration)` with
/// `URLTaskManager(configuration: configuration).session` and keep using every URLSession API
/// you already use: async `data(for:)`, completion handlers, delegates, uploads, downloads.
/// Each task made from ``session`` runs through the interceptor chain before it is sent and is
/// then sent by an inner session built from the same configuration; the caller receives one
/// ordinary response or error, exactly once.
///
/// ```swift
/// let session = URLTaskManager(interceptors: [HeaderInterceptor(["User-Agent": "MyApp/1.0"])]).session
/// let (data, response) = try await session.data(from: url)
/// ```
///
/// The session owns everything the manager set up, as a `URLSession` owns its delegate: it
/// works for as long as you keep it and have not invalidated it, whether or not you keep the
/// manager. Keep the manager only to reach its own methods: ``flush()``, and the requests it
/// sends without the outer task a session needs (``data(for:)``, ``bytes(for:)``, the uploads,
/// ``download(for:)``: the same parts at about the cost of a plain `URLSession`). Invalidating
/// the session, directly or through the manager, releases everything; so does releasing it.
/// Several managers can live side by side: a task only ever runs through the interceptors and
/// reactors of the session that created it. (On Apple platforms a session cannot report its own
/// invalidation: invalidate through the manager.)
public final class URLTaskManager: Sendable {
    /// The session to use in place of your own. Its delegate (if you passed one) receives the
    /// usual callbacks. It keeps the manager's interceptors and reactors alive until it is
    /// invalidated or released.
    public let session: URLSession
    /// The manager's own settings.
    public let options: Options

    let pipeline: Pipeline

    /// Creates a manager and its session.
    ///
    /// The manager checks how the parts are assembled, and stops the program here, with a message
    /// naming the parts and the way to fix it, when the order breaks a part's placement
    /// (``URLTaskPlacement``: a `RateLimiter` interceptor before a `CircuitBreaker`, a
    /// `RetryReactor` before an `OfflineHold`), or when an object of yours that is both an
    /// interceptor and a reactor is given to one list only. Either mistake would otherwise
    /// silently turn a part off; both are in the code, not in the data, so the first run finds
    /// them. (`CircuitBreaker` and `RateLimiter` are interceptors and outcome observers, not
    /// reactors: give them to `interceptors:` alone, wrapped in ``PerRequestInterceptor`` or not;
    /// the manager finds the observer in them.)
    ///
    /// - Parameters:
    ///   - interceptors: Run in order on every task before it is sent, and again before
    ///     every resend.
    ///   - reactors: Asked in order about every response and transport error; the first that
    ///     wants it may run shared work (a token refresh) and send the task again.
    ///   - observers: Told of every outcome, besides the interceptors and reactors that are
    ///     observers themselves (``URLTaskOutcomeObserver``): a metrics recorder.
    ///   - configuration: The configuration you would have given `URLSession`. It is copied,
    ///     never mutated; the real HTTP honours its timeouts, cookies, cache and headers.
    ///   - delegate: The delegate you would have given `URLSession`.
    ///   - delegateQueue: The queue for `delegate`'s callbacks, as for `URLSession`.
    ///   - options: The manager's own settings.
    public init(
        interceptors: [any URLTaskInterceptor] = [],
        reactors: [any URLTaskReactor] = [],
        observers: [any URLTaskOutcomeObserver] = [],
        configuration: URLSessionConfiguration = .default,
        delegate: (any URLSessionDelegate)? = nil,
        delegateQueue: OperationQueue? = nil,
        options: Options = .default
    ) {
        // `fatalError`, not `preconditionFailure`: an optimized build drops the latter's message.
        if let problem = Self.assemblyProblem(interceptors: interceptors, reactors: reactors) { fatalError(problem) }
        self.options = options
        let inner = configuration.copy() as! URLSessionConfiguration
        URLTaskPolicy.remove(from: inner)  // see `outer`
        let pipeline = Pipeline(
            interceptors: interceptors, reactors: reactors, observers: observers, configuration: inner, options: options)
        self.pipeline = pipeline

        let outer = configuration.copy() as! URLSessionConfiguration
        // A policy in the additional headers is no request's own: neither session sends it (on
        // Linux, corelibs' own protocol adds the outer ones to a download it sends unchecked).
        URLTaskPolicy.remove(from: outer)
        // The inner session caches and sets cookies; doing it twice would duplicate them.
        outer.urlCache = nil
        outer.httpShouldSetCookies = false
        outer.httpCookieStorage = nil
        self.session = Platform.makeSession(configuration: outer, delegate: delegate, delegateQueue: delegateQueue, pipeline: pipeline)
    }

    /// The events of every task this manager's session starts from now on, for logs and
    /// metrics (see ``URLTaskEvent``).
    ///
    /// Each call returns a new stream, subscribed when this method returns; it ends when the
    /// session is invalidated or released, or when the loop reading it stops
    /// (`invalidateAndCancel()` ends it before it cancels anything, so the cancellations it
    /// causes are not reported). A task started while no stream is open emits nothing and
    /// records nothing: events cost nothing unless someone listens. So call it before starting
    /// the work you want to see, and read the stream in a task; calling it inside that task
    /// subscribes only when the task first runs, which may be after your next request started.
    /// A reader that falls behind never slows a task down: its stream keeps the newest `limit`
    /// events and drops the oldest. Events arrive in order, in batches, at most
    /// ``Options/eventBatchWindow`` (20 ms) after they happened.
    ///
    /// ```swift
    /// let events = manager.events()  // subscribed from here on
    /// Task {
    ///     for await event in events { logger.info("\(event)") }
    /// }
    /// ```
    public func events(bufferingNewest limit: Int = 1_000) -> AsyncStream<URLTaskEvent> {
        pipeline.events.subscribe(bufferingNewest: limit)
    }

    /// Ends every task of this session that `matches` says must not go on, with `error`: one
    /// not sent yet never is, one on the network has its transfer stopped, one waiting for a
    /// reactor stops waiting. Each caller gets `error`, exactly once, as given (a
    /// ``URLTaskError`` with its ``URLTaskError/request`` filled in): the one failure the
    /// ``URLTaskError`` rule leaves to the app, which chose the error.
    ///
    /// `matches` sees each task as it stood when the call began (its request with the headers its
    /// interceptors applied, its values), read in one section for every task and called with no
    /// lock held, on the calling thread; a task that moved on since is still ended. The OAuth2
    /// kit's `signOut(of:)` uses it to stop every request that carries a credential being revoked.
    public func failTasks(with error: any Error, where matches: @escaping (URLTask) -> Bool) {
        pipeline.failTasks(with: error, where: matches)
    }

    /// Releases every task held by every interceptor's batch now.
    public func flush() {
        pipeline.flush()
    }

    /// Releases the tasks held by the interceptor at `index` in the `interceptors` array.
    public func flush(interceptorAt index: Int) {
        precondition(pipeline.interceptors.indices.contains(index), "No interceptor at index \(index)")
        pipeline.flush(interceptorAt: index)
    }

    /// The number of tasks the interceptor at `index` holds right now.
    public func heldTaskCount(interceptorAt index: Int) -> Int {
        precondition(pipeline.interceptors.indices.contains(index), "No interceptor at index \(index)")
        return pipeline.batches[index].count
    }

    /// Cancels every task and releases both sessions: the same as
    /// `session.invalidateAndCancel()`.
    ///
    /// Every caller completes with `URLError.cancelled` at once, held tasks included, and nothing
    /// more is sent. Transfers already on the wire are abandoned rather than cancelled one by one
    /// (on Linux, cancelling dozens at once can crash corelibs); the inner session is released
    /// when the last one ends, at the latest after its request timeout.
    public func invalidateAndCancel() {
        session.invalidateAndCancel()
        if !Platform.sessionReportsInvalidation { pipeline.invalidateAndCancel() }
    }

    /// Lets running tasks finish, then releases both sessions. New tasks are refused by the
    /// session, as with `URLSession.finishTasksAndInvalidate()`: the same as
    /// `session.finishTasksAndInvalidate()`.
    public func finishTasksAndInvalidate() {
        session.finishTasksAndInvalidate()
        if !Platform.sessionReportsInvalidation { pipeline.outerSessionFinishing(session) }
    }
}
