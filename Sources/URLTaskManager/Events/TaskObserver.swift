import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Records one task's timings and emits its events; exists only for a task started while
/// someone listens (``EventHub/isListening``), so an unobserved task pays one `nil` check per
/// event site.
final class TaskObserver: @unchecked Sendable {  // the timings are guarded by `lock`; `hub` and `id` are immutable.
    private let id: URLTask.ID
    private let hub: EventHub
    private let created = ContinuousClock.now
    private let lock = NSLock()
    private var firstSent: ContinuousClock.Instant?
    private var sentAt: ContinuousClock.Instant?
    private var transfer: Duration = .zero
    private var reactingSince: ContinuousClock.Instant?
    private var reacting: Duration = .zero
    private var attempts = 0
    private var bytesSent: Int64? = 0
    private var bytesReceived: Int64 = 0
    private var status: Int?
    private var completed = false

    init(id: URLTask.ID, request: URLRequest, hub: EventHub) {
        self.id = id
        self.hub = hub
        emit(.created(method: request.httpMethod ?? "GET", url: URLTaskEvent.redacted(request.url)))
    }

    func intercepted(_ interceptor: any URLTaskInterceptor, _ outcome: Result<InterceptCommand, any Error>) {
        let command: String
        switch outcome {
        case .success(.execute): command = "execute"
        case .success(.hold): command = "hold"
        case .success(.release): command = "release"
        case .success(.fail): command = "fail"
        case .success(.respond): command = "respond"
        case .failure: command = "threw"
        }
        emit(.intercepted(interceptor: Self.name(interceptor), command: command))
    }

    func held(by interceptor: any URLTaskInterceptor) {
        emit(.held(interceptor: Self.name(interceptor)))
    }

    func released(by interceptor: any URLTaskInterceptor) {
        emit(.released(interceptor: Self.name(interceptor)))
    }

    func waiting(for wait: URLTaskEvent.Wait) {
        emit(.waiting(for: wait))
    }

    func sent(attempt: Int, credentialVersions: [String: Int], body: URLTaskBody) {
        let now = ContinuousClock.now
        let length: Int64?
        switch body {
        case .none: length = 0
        case .data(let data): length = Int64(data.count)
        case .file(let url): length = (try? url.resourceValues(forKeys: [.fileSizeKey]).fileSize).map(Int64.init)
        case .stream: length = nil
        }
        lock.withLock {
            if firstSent == nil { firstSent = now }
            sentAt = now
            attempts += 1
            bytesSent = bytesSent.flatMap { sent in length.map { sent + $0 } }
        }
        emit(.sent(attempt: attempt, credentialVersions: credentialVersions))
    }

    func responseHead(_ response: URLResponse) {
        let code = (response as? HTTPURLResponse)?.statusCode ?? 0
        let waited: Duration = lock.withLock {
            status = code
            return sentAt.map { $0.duration(to: .now) } ?? .zero
        }
        emit(.responseHead(status: code, timeToFirstByte: waited))
    }

    func received(_ count: Int) {
        lock.withLock { bytesReceived += Int64(count) }
    }

    func transferEnded() {
        lock.withLock {
            if let sentAt { transfer += sentAt.duration(to: .now) }
            sentAt = nil
        }
    }

    func reacted(by reactor: String, run: Int?) {
        lock.withLock { reactingSince = .now }
        emit(.reacted(reactor: reactor, run: run))
    }

    func reactionEnded() {
        lock.withLock {
            if let reactingSince { reacting += reactingSince.duration(to: .now) }
            reactingSince = nil
        }
    }

    func requeued(attempt: Int) {
        emit(.requeued(attempt: attempt))
    }

    func redirected(_ response: HTTPURLResponse, to url: URL?) {
        emit(.redirected(status: response.statusCode, to: URLTaskEvent.redacted(url)))
    }

    /// The caller's answer: `response` (a local answer or a delivered one) or `error`; the
    /// status of the last response head otherwise.
    func completed(response: URLResponse? = nil, error: (any Error)? = nil) {
        let now = ContinuousClock.now
        let completion: URLTaskEvent.Completion? = lock.withLock {
            guard !completed else { return nil }
            completed = true
            if let sentAt { transfer += sentAt.duration(to: now) }
            if let reactingSince { reacting += reactingSince.duration(to: now) }
            let code = error == nil ? ((response as? HTTPURLResponse)?.statusCode ?? status) : nil
            return URLTaskEvent.Completion(
                status: code,
                error: error,
                attempts: attempts,
                bytesSent: bytesSent,
                bytesReceived: bytesReceived,
                phases: URLTaskEvent.Phases(
                    beforeFirstSend: created.duration(to: firstSent ?? now),
                    transfer: transfer,
                    reacting: reacting,
                    total: created.duration(to: now)
                )
            )
        }
        if let completion { emit(.completed(completion)) }
    }

    private func emit(_ kind: URLTaskEvent.Kind) {
        hub.emit(URLTaskEvent(task: id, date: Date(), kind: kind))
    }

    private static func name(_ value: Any) -> String {
        String(describing: type(of: value))
    }
}
