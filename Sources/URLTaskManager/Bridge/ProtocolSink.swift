import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The only object that talks to a `URLProtocolClient`.
///
/// The pipeline reports a task's outcome here from any thread. The sink replays it to the
/// client on the outer session's work queue (see ``OuterTaskFacts/workQueue``), in order: at
/// once when the event comes from a transport callback, which already runs serialized with that
/// queue (``Platform/isOnSessionWorkQueue``) and nothing is queued before it, and otherwise
/// through the queue,
/// and makes sure the client hears at most one terminal event and nothing at all after
/// `stopLoading` (corelibs completes a cancelled task itself and crashes if it later hears
/// about a task it has forgotten). Bodies are streamed chunk by chunk to delegate-driven
/// tasks and handed over in one piece to tasks with a completion handler.
final class ProtocolSink: @unchecked Sendable {  // `state` is guarded by `lock`; the client is only called on `queue`.
    private enum State {
        case open(buffer: Data?)
        case closed
    }

    private let lock = NSLock()
    private var state: State
    private var urlProtocol: URLProtocol?
    /// Events handed to `queue` and not yet replayed: while there are any, a new event queues
    /// behind them rather than overtaking them.
    private var queued = 0
    private let client: any URLProtocolClient
    private let queue: DispatchQueue
    /// Whether `queue` is the session's work queue (the facts found it), so that code running
    /// serialized with it may call the client directly.
    private let mayCallInline: Bool

    init(urlProtocol: URLProtocol, client: any URLProtocolClient, facts: OuterTaskFacts) {
        self.urlProtocol = urlProtocol
        self.client = client
        self.queue = facts.workQueue ?? DispatchQueue(label: "URLTaskManager.ProtocolSink")
        self.mayCallInline = facts.workQueue != nil
        self.state = .open(buffer: facts.delivery == .buffer ? Data() : nil)
    }

    func receive(response: URLResponse) {
        onWorkQueue {
            guard let urlProtocol = self.openProtocol() else { return }
            self.client.urlProtocol(urlProtocol, didReceive: response, cacheStoragePolicy: .notAllowed)
        }
    }

    func receive(data: Data) {
        let buffered: Bool = lock.withLock {
            guard case .open(var buffer?) = state else { return false }
            state = .open(buffer: nil)  // keep the append unique, not a copy
            buffer.append(data)
            state = .open(buffer: buffer)
            return true
        }
        if buffered { return }
        onWorkQueue {
            guard let urlProtocol = self.openProtocol() else { return }
            self.client.urlProtocol(urlProtocol, didLoad: data)
        }
    }

    func finish() {
        onWorkQueue {
            guard let (urlProtocol, buffer) = self.takeForCompletion() else { return }
            if let buffer, !buffer.isEmpty {
                self.client.urlProtocol(urlProtocol, didLoad: buffer)
            }
            self.client.urlProtocolDidFinishLoading(urlProtocol)
        }
    }

    func fail(_ error: any Error) {
        onWorkQueue {
            guard let (urlProtocol, _) = self.takeForCompletion() else { return }
            self.client.urlProtocol(urlProtocol, didFailWithError: error)
        }
    }

    /// Runs `event` serialized with the work queue, after every event before it.
    private func onWorkQueue(_ event: @escaping @Sendable () -> Void) {
        let now: Bool = lock.withLock {
            if mayCallInline, queued == 0, Platform.isOnSessionWorkQueue { return true }
            queued += 1
            return false
        }
        if now { return event() }
        queue.async {
            event()
            self.lock.withLock { self.queued -= 1 }
        }
    }

    /// Called from `stopLoading`, on the work queue: everything still queued is dropped.
    func close() {
        lock.withLock {
            state = .closed
            urlProtocol = nil
        }
    }

    private func openProtocol() -> URLProtocol? {
        let urlProtocol: URLProtocol? = lock.withLock {
            guard case .open = state else { return nil }
            return self.urlProtocol
        }
        guard let urlProtocol, !Self.isBeingCancelled(urlProtocol) else { return nil }
        return urlProtocol
    }

    private func takeForCompletion() -> (URLProtocol, Data?)? {
        guard let candidate = lock.withLock({ urlProtocol }), !Self.isBeingCancelled(candidate) else { return nil }
        return lock.withLock {
            guard case .open(let buffer) = state, let urlProtocol else { return nil }
            state = .closed
            self.urlProtocol = nil
            return (urlProtocol, buffer)
        }
    }

    /// corelibs marks a cancelled task `.canceling` at once, inside `cancel()`, but calls
    /// `stopLoading` and reports the cancellation later, from a block queued on this same work
    /// queue. A completion reported in between would complete the task a second time (a
    /// `fatalError` in the session's task registry, seen when `invalidateAndCancel()` raced
    /// with held tasks failing): the caller's cancel wins, and the sink stays silent.
    /// Called on the work queue, without the lock (the task's state has a lock of its own).
    private static func isBeingCancelled(_ urlProtocol: URLProtocol) -> Bool {
        urlProtocol.task?.state == .canceling
    }
}
