import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Records one task's timings and emits its events; exists only for a task started while
/// someone listens (``EventHub/isListening``), so an unobserved task pays one `nil` check per
/// event site.
///
/// A task's events come from several threads (the interceptors', the transport's, a reactor
/// run's). They are queued in the order their transitions happened and emitted by one thread
/// at a time, never under the lock. Between a reaction's start and the `reacted` event (which
/// names the run the task joined, known only once admission has decided) the task's other
/// events wait, so a run that ends at once cannot report `requeued` before `reacted`.
final class TaskEventRecorder: Sendable {
    /// The timings, the counts and the queue of events to emit.
    private struct State {
        var firstSent: ContinuousClock.Instant?
        var sentAt: ContinuousClock.Instant?
        var transfer: Duration = .zero
        var reactingSince: ContinuousClock.Instant?
        var reacting: Duration = .zero
        var attempts = 0
        var bytesSent: Int64? = 0
        var bytesReceived: Int64 = 0
        var status: Int?
        var completed = false
        /// Events to emit, in order, and whether a thread is emitting them now.
        var queue: [URLTaskEvent] = []
        var emitting = false
        /// Events held back until the reaction that began is reported.
        var heldBack: [URLTaskEvent]?
    }

    private let id: URLTask.ID
    private let hub: EventHub<URLTaskEvent>
    private let created = ContinuousClock.now
    private let state = LockedState(State())

    init(id: URLTask.ID, request: URLRequest, hub: EventHub<URLTaskEvent>) {
        self.id = id
        self.hub = hub
        TaskEventRecorderDirectory.shared.register(self, for: id)
        emit(.created(method: request.httpMethod ?? "GET", url: URLTaskEvent.redacted(request.url)))
    }

    deinit {
        TaskEventRecorderDirectory.shared.remove(id)
    }

    /// An interceptor or reactor annotated the task (``URLTask/annotate(_:_:)``).
    func annotated(name: String, value: String) {
        emit(.annotated(name: name, value: value))
    }

    func intercepted(_ interceptor: URLTaskError.Component, _ outcome: Result<InterceptCommand, any Error>) {
        let command: String
        switch outcome {
        case .success(.execute): command = "execute"
        case .success(.hold): command = "hold"
        case .success(.release): command = "release"
        case .success(.fail): command = "fail"
        case .success(.respond): command = "respond"
        case .failure: command = "threw"
        }
        emit(.intercepted(interceptor: interceptor.name, command: command))
    }

    func held(by interceptor: URLTaskError.Component) {
        emit(.held(interceptor: interceptor.name))
    }

    func released(by interceptor: URLTaskError.Component) {
        emit(.released(interceptor: interceptor.name))
    }

    func waiting(for wait: URLTaskEvent.Wait) {
        emit(.waiting(for: wait))
    }

    func sent(attempt: Int, credentialVersions: [String: Int], body: URLTaskBody) {
        let length: Int64?
        switch body {
        case .none: length = 0
        case .data(let data): length = Int64(data.count)
        case .file(let url): length = (try? url.resourceValues(forKeys: [.fileSizeKey]).fileSize).map(Int64.init)
        case .stream: length = nil
        }
        attemptBegan(sending: length)
        emit(.sent(attempt: attempt, credentialVersions: credentialVersions))
    }

    /// The task's request was not sent: it listens to the identical request `leader` sent
    /// (`CoalescingInterceptor`), and its answer is that transfer's.
    func joinedSharedTransfer(of leader: URLTask.ID, attempt: Int) {
        attemptBegan(sending: 0)
        emit(.sharedTransfer(of: leader, attempt: attempt))
    }

    /// An attempt went to the network (or listens to a transfer on it) now, with `length` body
    /// bytes of its own (`nil`: unknown): its timings and counts start here.
    private func attemptBegan(sending length: Int64?) {
        let now = ContinuousClock.now
        state.withLock { state in
            if state.firstSent == nil { state.firstSent = now }
            state.sentAt = now
            state.attempts += 1
            state.bytesSent = state.bytesSent.flatMap { sent in length.map { sent + $0 } }
        }
    }

    func responseHead(_ response: URLResponse) {
        let code = (response as? HTTPURLResponse)?.statusCode ?? 0
        let waited: Duration = state.withLock { state in
            state.status = code
            return state.sentAt.map { $0.duration(to: .now) } ?? .zero
        }
        emit(.responseHead(status: code, timeToFirstByte: waited))
    }

    func received(_ count: Int) {
        state.withLock { $0.bytesReceived += Int64(count) }
    }

    func transferEnded() {
        state.withLock { state in
            if let sentAt = state.sentAt { state.transfer += sentAt.duration(to: .now) }
            state.sentAt = nil
        }
    }

    /// A reactor takes the task's outcome: its events wait for ``reacted(by:run:)``.
    func reactionStarting() {
        state.withLock { state in
            state.reactingSince = .now
            state.heldBack = []
        }
    }

    func reacted(by reactor: String, run: Int?) {
        let event = URLTaskEvent(task: id, date: Date(), kind: .reacted(reactor: reactor, run: run))
        state.withLock { state in
            state.queue.append(event)
            state.queue += state.heldBack ?? []
            state.heldBack = nil
        }
        drain()
    }

    func reactionEnded() {
        state.withLock { state in
            if let reactingSince = state.reactingSince { state.reacting += reactingSince.duration(to: .now) }
            state.reactingSince = nil
        }
    }

    func requeued(attempt: Int) {
        emit(.requeued(attempt: attempt))
    }

    func redirected(_ response: HTTPURLResponse, to url: URL?) {
        emit(.redirected(status: response.statusCode, to: URLTaskEvent.redacted(url)))
    }

    /// A download task made with the session's download APIs was let go unchanged, or refused.
    func nativeDownload(sentUnchanged: Bool) {
        emit(.nativeDownload(sentUnchanged: sentUnchanged))
    }

    /// The caller's answer: `response` (a local answer or a delivered one) or `error`; the
    /// status of the last response head otherwise.
    func completed(response: URLResponse? = nil, error: (any Error)? = nil) {
        let now = ContinuousClock.now
        let completion: URLTaskEvent.Completion? = state.withLock { state in
            guard !state.completed else { return nil }
            state.completed = true
            if let sentAt = state.sentAt { state.transfer += sentAt.duration(to: now) }
            if let reactingSince = state.reactingSince { state.reacting += reactingSince.duration(to: now) }
            let code = error == nil ? ((response as? HTTPURLResponse)?.statusCode ?? state.status) : nil
            return URLTaskEvent.Completion(
                status: code,
                error: error,
                attempts: state.attempts,
                bytesSent: state.bytesSent,
                bytesReceived: state.bytesReceived,
                phases: URLTaskEvent.Phases(
                    beforeFirstSend: created.duration(to: state.firstSent ?? now),
                    transfer: state.transfer,
                    reacting: state.reacting,
                    total: created.duration(to: now)
                )
            )
        }
        if let completion { emit(.completed(completion)) }
    }

    private func emit(_ kind: URLTaskEvent.Kind) {
        let event = URLTaskEvent(task: id, date: Date(), kind: kind)
        state.withLock { state in
            if state.heldBack != nil {
                state.heldBack?.append(event)
            } else {
                state.queue.append(event)
            }
        }
        drain()
    }

    /// Emits the queued events in order, from one thread at a time, without the lock.
    private func drain() {
        let claimed: Bool = state.withLock { state in
            if state.emitting { return false }
            state.emitting = true
            return true
        }
        guard claimed else { return }
        while true {
            let next: URLTaskEvent? = state.withLock { state in
                if state.queue.isEmpty {
                    state.emitting = false
                    return nil
                }
                return state.queue.removeFirst()
            }
            guard let next else { return }
            hub.emit(next)
        }
    }
}
