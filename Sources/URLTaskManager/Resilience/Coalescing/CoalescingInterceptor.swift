import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Sends identical requests that are in flight at the same time once, and gives every caller
/// its own complete copy of the answer.
///
/// Identical means the same method (GET and HEAD by default), URL, and values of the headers that
/// change the answer (`Authorization`, `Cookie` and every `Accept*` header by default). The first
/// such request starts one **shared request** through the manager's own pipeline (so it passes
/// every interceptor and reactor, a token refresh included); it and every identical request that
/// arrives while the shared one runs wait here, and each is answered locally
/// (``InterceptCommand/respond(_:body:)``) with its own copy of the status, headers and body:
/// async `data(for:)`, completion handlers and delegates all see an ordinary response.
///
/// ```swift
/// let coalescing = CoalescingInterceptor()
/// let manager = URLTaskManager(interceptors: [BearerInterceptor(authenticator: auth), coalescing],
///                              reactors: [OAuth2RefreshReactor(authenticator: auth)])
/// coalescing.attach(to: manager)
/// ```
///
/// - Put it **after** interceptors that set an answer-changing header (``BearerInterceptor``), so
///   requests under different tokens never share an answer, and **before** a ``RateLimiter`` (a
///   waiting request takes no token). When the shared request meets a 401 and the refresh reactor
///   requeues it, it passes the interceptors again with the new token; the callers waiting for it
///   keep waiting and are answered with what the server said to the new token, and callers that
///   arrive with the new token join it. No waiter is ever sent, so none goes out with a stale token.
/// - A caller that cancels, or whose `timeoutInterval` passes, leaves at once; the shared request
///   goes on while anyone still waits, and is cancelled when the last waiter leaves.
/// - An answer larger than ``Configuration/maximumSharedBodySize`` is not shared: every waiter then
///   sends its own request (the shared one was spent; so set the limit above your usual answers).
/// - When the shared request fails, every waiter fails with that same error: a `URLError` as
///   itself (as a plain session reports it), anything else carried by a ``URLTaskError`` with
///   code ``URLTaskError/Code-swift.struct/interceptorFailed``.
/// - Until ``attach(to:)`` is called, or once that manager is released, requests pass untouched:
///   keep the manager for as long as you use its session.
///
/// The shared request is sent with the manager's ``URLTaskManager/download(for:)``, which runs the
/// whole pipeline without an outer session task (so it is not in `getAllTasks`, reaches no
/// session delegate, and fails cleanly with ``URLTaskError/Code-swift.struct/managerInvalidated``
/// once the session is invalidated, where creating a session task would trap on Linux); its
/// answer is read from the file into memory. It carries a private marker header that this
/// interceptor removes before it is sent. Use one coalescing interceptor per manager.
public final class CoalescingInterceptor: URLTaskInterceptor {
    /// Which requests are shared, and how large an answer may be.
    public struct Configuration: Sendable {
        /// The methods whose requests are shared (upper case). Only requests without a body are
        /// shared whatever the method.
        public var methods: Set<String>
        /// The headers whose values make two requests different, lower case; a name ending in `*`
        /// matches every header starting with what precedes it.
        public var answerChangingHeaders: Set<String>
        /// The largest answer body shared; larger answers make every waiter send its own request.
        public var maximumSharedBodySize: Int

        /// Shares GET and HEAD, told apart by `Authorization`, `Cookie` and `Accept*`, answers up
        /// to 4 MiB.
        public init(
            methods: Set<String> = ["GET", "HEAD"], answerChangingHeaders: Set<String> = ["authorization", "cookie", "accept*"],
            maximumSharedBodySize: Int = 4 << 20
        ) {
            self.methods = methods
            self.answerChangingHeaders = answerChangingHeaders
            self.maximumSharedBodySize = maximumSharedBodySize
        }
    }

    /// What the interceptor decided, for logs and tests (``events(bufferingNewest:)``). URLs
    /// carry no query; no header value is ever included.
    public enum Event: Sendable {
        /// `task` started a shared request and waits for it.
        case started(task: URLTask.ID, method: String, url: URL?)
        /// `task` joined a shared request already in flight.
        case joined(task: URLTask.ID, method: String, url: URL?)
        /// The shared request answered; each of `tasks` got its own copy.
        case answered(tasks: [URLTask.ID], status: Int, bodyBytes: Int)
        /// The answer was larger than the limit; each of `tasks` sends its own request.
        case tooLargeToShare(tasks: [URLTask.ID], bodyBytes: Int)
        /// The shared request failed; each of `tasks` fails with `error`.
        case failed(tasks: [URLTask.ID], error: any Error)
        /// `task` stopped waiting (cancelled or timed out); the shared request goes on if anyone
        /// still waits, and is cancelled if `sharedCancelled`.
        case left(task: URLTask.ID, sharedCancelled: Bool)
    }

    /// The header that marks this interceptor's own shared requests.
    static let markerHeader = "X-URLTaskManager-Coalesced"

    /// Which requests are shared.
    public let configuration: Configuration
    private let storage = CoalescingStorage()
    private let hub = EventHub<Event>()

    /// Shares requests as `configuration` says, once ``attach(to:)`` gave it the manager.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    /// Sends shared requests through `manager` (the one this interceptor belongs to), which it
    /// does not keep alive. Call it once, right after creating the manager.
    public func attach(to manager: URLTaskManager) {
        storage.attach(manager)
    }

    /// A stream of this interceptor's decisions; it ends when the interceptor is released.
    public func events(bufferingNewest limit: Int = 1_000) -> AsyncStream<Event> {
        hub.subscribe(bufferingNewest: limit)
    }

    /// How many shared requests are in flight (for tests and metrics).
    public var sharedRequestsInFlight: Int { storage.inFlightCount }

    /// Lets its own shared requests go; makes every other shareable request wait for the shared
    /// request of its key (starting one if none is in flight) and answers it with a copy.
    public func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        if let marker = task.request.value(forHTTPHeaderField: Self.markerHeader) {
            // One of our shared requests: it goes out, without the marker.
            task.request.setValue(nil, forHTTPHeaderField: Self.markerHeader)
            if let generation = storage.generation(ofMarker: marker), let key = key(for: task.request) {
                storage.sharedReintercepted(generation: generation, newKey: key)
            }
            return .execute
        }
        guard case .none = task.body, let key = key(for: task.request), storage.isAttached else { return .execute }

        let waiter = storage.makeWaiter()
        let id = task.id
        let method = task.request.httpMethod ?? "GET"
        let url = URLTaskEvent.redacted(task.request.url)
        var shared = task.originalRequest
        let annotated = task
        let hub = hub
        let storage = storage
        let limit = configuration.maximumSharedBodySize
        let resolution: CoalescingStorage.Resolution = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                switch storage.arrive(waiter, task: id, key: key, continuation: continuation) {
                case .startShared(let generation):
                    hub.emit(.started(task: id, method: method, url: url))
                    annotated.annotate("coalescing", "started a shared request")
                    shared.setValue(storage.marker(generation: generation), forHTTPHeaderField: Self.markerHeader)
                    storage.startShared(shared, generation: generation, maximumBodySize: limit, hub: hub)
                case .join:
                    hub.emit(.joined(task: id, method: method, url: url))
                    annotated.annotate("coalescing", "waits for a shared request in flight")
                case .none:
                    break  // cancelled before it could wait
                }
            }
        } onCancel: {
            if let cancelled = storage.leave(waiter) { hub.emit(.left(task: id, sharedCancelled: cancelled)) }
        }
        switch resolution {
        case .respond(let response, let body):
            // Each caller gets its own response object.
            let copy = HTTPURLResponse(
                url: response.url ?? task.request.url ?? URL(fileURLWithPath: "/"), statusCode: response.statusCode,
                httpVersion: "HTTP/1.1",
                headerFields: Self.headerFields(of: response))
            guard let copy else { return .execute }
            task.annotate("coalescing", "answered with the shared response (\(response.statusCode), \(body.count) bytes)")
            return .respond(copy, body: body)
        case .goAlone:
            task.annotate("coalescing", "not shared: sent on its own")
            return .execute
        case .fail(let error):
            task.annotate("coalescing", "the shared request failed")
            return .fail(error)
        case .cancelled:
            throw CancellationError()
        }
    }

    /// The key identical requests share, or `nil` when the request is not shared.
    func key(for request: URLRequest) -> String? {
        let method = (request.httpMethod ?? "GET").uppercased()
        guard configuration.methods.contains(method), let url = request.url else { return nil }
        var parts: [String] = []
        for (name, value) in request.allHTTPHeaderFields ?? [:] {
            let lower = name.lowercased()
            guard lower != Self.markerHeader.lowercased(), isAnswerChanging(lower) else { continue }
            parts.append("\(lower):\(value)")
        }
        return ([method, url.absoluteString] + parts.sorted()).joined(separator: "\n")
    }

    private func isAnswerChanging(_ lowercasedName: String) -> Bool {
        for pattern in configuration.answerChangingHeaders {
            if pattern.hasSuffix("*") {
                if lowercasedName.hasPrefix(pattern.dropLast()) { return true }
            } else if pattern == lowercasedName {
                return true
            }
        }
        return false
    }

    private static func headerFields(of response: HTTPURLResponse) -> [String: String] {
        var fields: [String: String] = [:]
        for (name, value) in response.allHeaderFields {
            if let name = name as? String, let value = value as? String { fields[name] = value }
        }
        return fields
    }
}

/// The coalescing interceptor's state: its ``CoalescingStateMachine``, the waiting callers'
/// continuations and the shared requests' tasks. Nothing is resumed, started or cancelled while
/// the lock is held.
final class CoalescingStorage: @unchecked Sendable {  // all mutable state is guarded by `lock`.
    enum Resolution: Sendable {
        case respond(HTTPURLResponse, Data)
        case goAlone
        case fail(any Error)
        case cancelled
    }

    enum Arrival {
        case startShared(generation: Int)
        case join
        case none
    }

    private struct Waiting {
        let task: URLTask.ID
        let continuation: CheckedContinuation<Resolution, Never>
    }

    private let lock = NSLock()
    private var machine = CoalescingStateMachine()
    private var waiting: [CoalescingStateMachine.Waiter: Waiting] = [:]
    /// Waiters whose cancellation came before they could wait.
    private var cancelledEarly: Set<CoalescingStateMachine.Waiter> = []
    private var transfers: [Int: Task<Void, Never>] = [:]
    /// Generations every waiter left before their task was created.
    private var abandoned: Set<Int> = []
    private weak var manager: URLTaskManager?
    private var attached = false
    private var lastWaiter: UInt64 = 0
    /// Tells this interceptor's markers from anyone else's.
    private let instance = UUID().uuidString

    func attach(_ manager: URLTaskManager) {
        lock.withLock {
            self.manager = manager
            attached = true
        }
    }

    var isAttached: Bool { lock.withLock { attached && manager != nil } }
    var inFlightCount: Int { lock.withLock { machine.inFlightCount } }

    func makeWaiter() -> CoalescingStateMachine.Waiter {
        lock.withLock {
            lastWaiter += 1
            return CoalescingStateMachine.Waiter(rawValue: lastWaiter)
        }
    }

    func marker(generation: Int) -> String { "\(instance) \(generation)" }

    func generation(ofMarker marker: String) -> Int? {
        let parts = marker.split(separator: " ")
        guard parts.count == 2, parts[0] == instance[...] else { return nil }
        return Int(parts[1])
    }

    func arrive(
        _ waiter: CoalescingStateMachine.Waiter, task: URLTask.ID, key: String, continuation: CheckedContinuation<Resolution, Never>
    ) -> Arrival {
        let arrival: Arrival? = lock.withLock {
            if cancelledEarly.remove(waiter) != nil { return nil }
            waiting[waiter] = Waiting(task: task, continuation: continuation)
            switch machine.waiterArrived(waiter, key: key) {
            case .startShared(let generation): return .startShared(generation: generation)
            case .join: return .join
            }
        }
        guard let arrival else {
            continuation.resume(returning: .cancelled)
            return .none
        }
        return arrival
    }

    /// The waiter's caller cancelled: `nil` if it was no longer waiting, else whether the shared
    /// request was cancelled because nobody else waits.
    func leave(_ waiter: CoalescingStateMachine.Waiter) -> Bool? {
        let (continuation, action, transfer):
            (CheckedContinuation<Resolution, Never>?, CoalescingStateMachine.LeaveAction, Task<Void, Never>?) =
                lock.withLock {
                    guard let entry = waiting.removeValue(forKey: waiter) else {
                        cancelledEarly.insert(waiter)
                        return (nil, .none, nil)
                    }
                    let action = machine.waiterLeft(waiter)
                    var transfer: Task<Void, Never>?
                    if case .cancelShared(let generation) = action {
                        transfer = transfers.removeValue(forKey: generation)
                        if transfer == nil { abandoned.insert(generation) }
                    }
                    return (entry.continuation, action, transfer)
                }
        guard let continuation else { return nil }
        continuation.resume(returning: .cancelled)
        transfer?.cancel()
        if case .cancelShared = action { return true }
        return false
    }

    func sharedReintercepted(generation: Int, newKey: String) {
        lock.withLock { machine.sharedReintercepted(generation: generation, newKey: newKey) }
    }

    func startShared(_ request: URLRequest, generation: Int, maximumBodySize: Int, hub: EventHub<CoalescingInterceptor.Event>) {
        guard let manager = lock.withLock({ self.manager }) else {
            return finish(generation: generation, outcome: .failure(SharedFailure(error: nil)), maximumBodySize: maximumBodySize, hub: hub)
        }
        let transfer = Task { [self] in
            let outcome: Result<(URL, URLResponse), SharedFailure>
            do {
                outcome = .success(try await manager.download(for: request))
            } catch {
                outcome = .failure(SharedFailure(error: error))
            }
            finish(generation: generation, outcome: outcome, maximumBodySize: maximumBodySize, hub: hub)
        }
        let abandonedAlready = lock.withLock {
            if abandoned.remove(generation) != nil { return true }
            transfers[generation] = transfer
            return false
        }
        if abandonedAlready { transfer.cancel() }
    }

    /// Why a shared request has no answer: its error, or `nil` when there was no manager to send it.
    struct SharedFailure: Error {
        let error: (any Error)?
    }

    private func finish(
        generation: Int, outcome: Result<(URL, URLResponse), SharedFailure>, maximumBodySize: Int,
        hub: EventHub<CoalescingInterceptor.Event>
    ) {
        // The downloaded file is read (or not) here and removed, whoever waits.
        defer { if case .success(let (file, _)) = outcome { try? FileManager.default.removeItem(at: file) } }
        let answered: [Waiting] = lock.withLock {
            transfers[generation] = nil
            abandoned.remove(generation)
            return machine.sharedFinished(generation: generation).compactMap { waiting.removeValue(forKey: $0) }
        }
        guard !answered.isEmpty else { return }
        let tasks = answered.map(\.task)
        let resolution: Resolution
        switch outcome {
        case .failure(let failure):
            if let error = failure.error {
                resolution = .fail(error)
                hub.emit(.failed(tasks: tasks, error: error))
            } else {
                resolution = .goAlone  // no manager any more: each sends its own
            }
        case .success(let (file, response)):
            let size = ((try? FileManager.default.attributesOfItem(atPath: file.path))?[.size] as? NSNumber)?.intValue ?? 0
            if let response = response as? HTTPURLResponse, size <= maximumBodySize, let body = try? Data(contentsOf: file) {
                resolution = .respond(response, body)
                hub.emit(.answered(tasks: tasks, status: response.statusCode, bodyBytes: body.count))
            } else {
                resolution = .goAlone
                hub.emit(.tooLargeToShare(tasks: tasks, bodyBytes: size))
            }
        }
        for waiter in answered { waiter.continuation.resume(returning: resolution) }
    }
}
