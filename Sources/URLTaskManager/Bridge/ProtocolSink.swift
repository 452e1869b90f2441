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
// @unchecked Sendable: `client` is only called on `queue` (Sendable in corelibs, not declared so by every Apple SDK of the CI).
final class ProtocolSink: TaskSink, @unchecked Sendable {
    private enum Phase {
        case open(buffer: Data?)
        case closed
    }

    private struct State {
        var phase: Phase
        var urlProtocol: URLProtocol?
        /// Events handed to `queue` and not yet replayed: while there are any, a new event queues
        /// behind them rather than overtaking them.
        var queued = 0
        /// The most body bytes reported sent so far, over every attempt.
        var reportedSent: Int64 = 0
    }

    private let state: LockedState<State>
    private let client: any URLProtocolClient
    private let queue: DispatchQueue
    /// Whether `queue` is the session's work queue (the facts found it), so that code running
    /// serialized with it may call the client directly.
    private let mayCallInline: Bool
    /// The caller's session, whose delegate the sink asks about redirects and challenges.
    private let session: URLSession?
    /// That delegate (``OuterTaskFacts/callerDelegate``), never read again from the task.
    private let callerTaskDelegate: (any URLSessionTaskDelegate)?
    /// The delegate an async API was given, which a plain session streams the body to while it
    /// buffers it for the caller (``OuterTaskFacts/taskDelegate``).
    private let chunkDelegate: (any URLSessionDataDelegate)?
    /// Told of upload progress (``OuterTaskFacts/uploadProgressDelegate``).
    private let uploadProgressDelegate: (any URLSessionTaskDelegate)?
    /// Whether the sink moves the outer task's `progress` (``Platform/bridgeMovesProgress``, a
    /// fact of the platform, read once).
    private let movesProgress = Platform.bridgeMovesProgress

    init(urlProtocol: URLProtocol, client: any URLProtocolClient, facts: OuterTaskFacts) {
        self.state = LockedState(State(phase: .open(buffer: facts.delivery == .buffer ? Data() : nil), urlProtocol: urlProtocol))
        self.client = client
        self.queue = facts.workQueue ?? DispatchQueue(label: "URLTaskManager.ProtocolSink")
        self.mayCallInline = facts.workQueue != nil
        self.session = facts.session
        self.callerTaskDelegate = facts.callerDelegate
        self.chunkDelegate = facts.delivery == .buffer ? facts.taskDelegate as? any URLSessionDataDelegate : nil
        self.uploadProgressDelegate = facts.session == nil ? nil : facts.uploadProgressDelegate
    }

    func receive(response: URLResponse) {
        onWorkQueue {
            self.expectProgress(response.expectedContentLength)
            guard let urlProtocol = self.openProtocol() else { return }
            self.client.urlProtocol(urlProtocol, didReceive: response, cacheStoragePolicy: .notAllowed)
        }
    }

    func receive(data: Data) {
        let buffered: Bool = state.withLock { state in
            guard case .open(var buffer?) = state.phase else { return false }
            state.phase = .open(buffer: nil)  // keep the append unique, not a copy
            buffer.append(data)
            state.phase = .open(buffer: buffer)
            return true
        }
        if buffered {
            let count = data.count
            onWorkQueue { self.advanceProgress(by: count) }
            if let chunkDelegate { streamToTaskDelegate(chunkDelegate, data) }
            return
        }
        onWorkQueue {
            self.advanceProgress(by: data.count)
            guard let urlProtocol = self.openProtocol() else { return }
            self.client.urlProtocol(urlProtocol, didLoad: data)
        }
    }

    func finish() {
        onWorkQueue {
            self.completeProgress()
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

    var answersChallenges: Bool { session != nil }

    /// Streamed: the client hears each chunk on the work queue as it arrives, and a task whose
    /// caller takes the body in one piece (``BodyDelivery/buffer``) is buffered here, not by the
    /// transfer.
    var delivery: TransferDelivery { .streamed }

    /// Hands a chunk to the delegate of an async API, on the session's delegate queue after the
    /// response that corelibs already gave it, as corelibs' own protocol does.
    private func streamToTaskDelegate(_ delegate: any URLSessionDataDelegate, _ data: Data) {
        onWorkQueue {
            guard let session = self.session, let dataTask = self.openProtocol()?.task as? URLSessionDataTask else { return }
            session.delegateQueue.addOperation { delegate.urlSession(session, dataTask: dataTask, didReceive: data) }
        }
    }

    /// Reports upload progress as corelibs' own protocol does: on the session's delegate queue,
    /// to the task's delegate. A resend (a redirect followed, a requeue) reports only what goes
    /// beyond what was already reported, so the caller sees one sequence that only grows and
    /// ends at the body's size (a plain session on Linux keeps adding on a 307, past the size).
    func sentBody(totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        guard let delegate = uploadProgressDelegate else { return }
        let delta: Int64 = state.withLock { state in
            guard case .open = state.phase, totalBytesSent > state.reportedSent else { return 0 }
            defer { state.reportedSent = totalBytesSent }
            return totalBytesSent - state.reportedSent
        }
        guard delta > 0 else { return }
        onWorkQueue {
            guard let session = self.session, let task = self.openProtocol()?.task else { return }
            session.delegateQueue.addOperation {
                delegate.urlSession(
                    session, task: task, didSendBodyData: delta, totalBytesSent: totalBytesSent,
                    totalBytesExpectedToSend: totalBytesExpectedToSend)
            }
        }
    }

    /// Asks the caller's delegate, as a plain session would: the task's own delegate, then the
    /// session's (corelibs' default implementation passes it on), on the session's delegate
    /// queue, with the caller's session and task. Without a delegate the redirect is followed.
    func redirect(_ response: HTTPURLResponse, to request: URLRequest, answer: @escaping @Sendable (URLRequest?) -> Void) {
        guard let (session, task, delegate) = callerDelegate() else { return answer(request) }
        session.delegateQueue.addOperation {
            delegate.urlSession(session, task: task, willPerformHTTPRedirection: response, newRequest: request, completionHandler: answer)
        }
    }

    /// Asks the caller's delegate about `challenge`, as for ``redirect(_:to:answer:)``. Without
    /// a delegate the answer is `.performDefaultHandling`.
    func challenge(
        _ challenge: URLAuthenticationChallenge, answer: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        guard let (session, task, delegate) = callerDelegate() else { return answer(.performDefaultHandling, nil) }
        session.delegateQueue.addOperation {
            delegate.urlSession(session, task: task, didReceive: challenge, completionHandler: answer)
        }
    }

    /// The caller's session, task and delegate, while the task is still open.
    private func callerDelegate() -> (URLSession, URLSessionTask, any URLSessionTaskDelegate)? {
        guard let session, let delegate = callerTaskDelegate, let task = state.withLock({ $0.urlProtocol?.task }) else { return nil }
        return (session, task, delegate)
    }

    // MARK: Progress

    /// The outer task's `progress` follows the body as it arrives, for every task kind (corelibs
    /// moves it only for its own protocol, and completes it when the task completes: 1 of 1 when
    /// the length was never known). It moves on the work queue, like every client call: `Progress`
    /// has no lock, and corelibs moves it there too (`updateProgress()`, when
    /// `countOfBytesClientExpectsToReceive` changes). Its total is never set back to 0 from another
    /// value, which traps in corelibs (#3263); `countOfBytesReceived` and its siblings have
    /// internal setters there and stay 0.
    private func expectProgress(_ length: Int64) {
        guard length > 0, let progress = progressToMove() else { return }
        progress.totalUnitCount = length
    }

    private func advanceProgress(by count: Int) {
        guard count > 0, let progress = progressToMove() else { return }
        let completed = progress.completedUnitCount + Int64(count)
        if progress.totalUnitCount > 0, completed > progress.totalUnitCount {
            // More than announced (a decoded body): the total is unknown after all.
            progress.totalUnitCount = -1
        }
        progress.completedUnitCount = completed
    }

    /// Complete, as corelibs completes its own tasks: the bytes received of as many, or 1 of 1
    /// for an empty body (a total of 0 would trap once it had been set).
    private func completeProgress() {
        guard let progress = progressToMove() else { return }
        let done = max(progress.completedUnitCount, 1)
        if progress.totalUnitCount != done { progress.totalUnitCount = done }
        progress.completedUnitCount = done
    }

    /// The open task's progress, where the bridge moves it (``Platform/bridgeMovesProgress``).
    private func progressToMove() -> Progress? {
        guard movesProgress else { return nil }
        return state.withLock { state in
            guard case .open = state.phase else { return nil }
            return state.urlProtocol?.task?.progress
        }
    }

    /// Runs `event` serialized with the work queue, after every event before it.
    private func onWorkQueue(_ event: @escaping @Sendable () -> Void) {
        let now: Bool = state.withLock { state in
            if mayCallInline, state.queued == 0, Platform.isOnSessionWorkQueue { return true }
            state.queued += 1
            return false
        }
        if now { return event() }
        queue.async {
            event()
            self.state.withLock { $0.queued -= 1 }
        }
    }

    /// Called from `stopLoading`, on the work queue: everything still queued is dropped.
    func close() {
        state.withLock { state in
            state.phase = .closed
            state.urlProtocol = nil
        }
    }

    private func openProtocol() -> URLProtocol? {
        let urlProtocol: URLProtocol? = state.withLock { state in
            guard case .open = state.phase else { return nil }
            return state.urlProtocol
        }
        guard let urlProtocol, !Self.isBeingCancelled(urlProtocol) else { return nil }
        return urlProtocol
    }

    private func takeForCompletion() -> (URLProtocol, Data?)? {
        guard let candidate = state.withLock({ $0.urlProtocol }), !Self.isBeingCancelled(candidate) else { return nil }
        return state.withLock { state in
            guard case .open(let buffer) = state.phase, let urlProtocol = state.urlProtocol else { return nil }
            state.phase = .closed
            state.urlProtocol = nil
            return (urlProtocol, buffer)
        }
    }

    /// corelibs marks a cancelled task `.canceling` in one step and calls `stopLoading` and
    /// reports the cancellation in a later block queued on this same work queue. A completion
    /// reported in between would complete the task a second time (a `fatalError` in the
    /// session's task registry, seen when `invalidateAndCancel()` raced with held tasks
    /// failing): the caller's cancel wins, and the sink stays silent.
    ///
    /// Right whether `cancel()` takes that first step inside the call (`workQueue.sync`, 6.3) or
    /// in a block it queues (`workQueue.async`, corelibs #5417, 6.4): this check runs on the
    /// work queue, so it sees the step either before it (the completion wins, and corelibs'
    /// cancel then finds the task completed) or after it; never between the two steps.
    /// `testCorelibs5417_CancelReturnsBeforeTheTaskIsCanceling` pins which one this toolchain has.
    /// Called on the work queue, without the lock (the task's state has a lock of its own).
    private static func isBeingCancelled(_ urlProtocol: URLProtocol) -> Bool {
        urlProtocol.task?.state == .canceling
    }
}
