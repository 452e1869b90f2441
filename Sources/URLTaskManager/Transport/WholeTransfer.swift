import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A GET or HEAD of the inner session that delivers its answer in one piece, for the manager's
/// own methods (on corelibs: ``PlatformSupport/sendsWholeTransfers``): the inner session's async `data(for:)`, which on corelibs hands the body to its
/// caller right where the transfer ends (no delegate queue between), where a delegate-driven
/// task crosses the delegate queue three times (the head, the body, the end), a thread hand-off
/// each (what that costs: the Performance article, "The manager's own methods").
///
/// corelibs asks the session's delegate, the ``Transport``, about such a task's redirect: it
/// finds the transfer's ``RedirectRelay`` (``PlatformSupport/asyncAPIDelegate(of:in:)``), which
/// hands the redirect to the pipeline, as every transfer's. An HTTP authentication challenge the
/// transport refuses (the caller's side answers it) ends the async call `cancelled` and drops the
/// 401's body: then the request, a safe one, is sent again as a streamed transfer, which delivers
/// the 401 with its body and hands its challenge over as every streamed transfer does. The
/// server sees a challenged GET twice.
///
/// **Stopping one.** Cancelling the Swift task of corelibs' `data(for:)` runs its cancellation
/// handler while the runtime holds that task's status lock, and the handler calls
/// `URLSessionTask.cancel()`, a `sync` onto the inner session's work queue (6.3.1). When the
/// work queue is at that moment ending the same transfer, resuming the call's continuation needs
/// the status lock: both wait forever, and every later transfer of the inner session with them
/// (a fault mix of 5,000 requests, issue 49; `WholeTransferCancelRaceTests`). So a whole
/// transfer is never stopped through its Swift task while the async call runs: its inner task is
/// found (``PlatformSupport/asyncAPITask(withDelegate:in:_:)``) and cancelled directly, with no
/// lock held (``WholeTransferStateMachine``).
final class WholeTransfer: TransferHandle {
    private let work: Task<Void, Never>
    private let machine: LockedState<WholeTransferStateMachine>
    private let session: URLSession
    private let relay: RedirectRelay

    /// Whether `request` with `body` may be sent as a whole transfer: a GET or HEAD without a
    /// body, which may be sent twice.
    static func accepts(_ request: URLRequest, body: URLTaskBody) -> Bool {
        guard Platform.sendsWholeTransfers, body.isNone else { return false }
        let method = request.httpMethod ?? "GET"
        return method == "GET" || method == "HEAD"
    }

    /// Sends `request` (prepared by ``Transport/prepared(_:body:)``) through `transport`.
    /// - Parameter again: Sends the request again as a streamed transfer whose events go to
    ///   `events`.
    init(
        _ request: URLRequest, session: URLSession, events: any TransportEvents,
        again: @escaping @Sendable (any TransportEvents) -> URLSessionTask
    ) {
        let relay = RedirectRelay(events: events)
        let machine = LockedState(WholeTransferStateMachine())
        self.session = session
        self.relay = relay
        self.machine = machine
        work = Task {
            guard machine.withLock({ $0.willCall() }) == .call else {
                return events.transportDidComplete(error: URLError.cancelled(url: request.url))
            }
            do {
                let (data, response) = try await session.data(for: request, delegate: relay)
                _ = machine.withLock { $0.callEnded(refusedChallenge: false) }
                events.transportDidReceive(response: response)
                if !data.isEmpty {
                    events.transportDidReceive(data: data)
                } else if let http = response as? HTTPURLResponse, (300...399).contains(http.statusCode), http.expectedContentLength > 0 {
                    // corelibs read a redirect's body and hands over none of it (the one it would
                    // have followed, or could not): what it read is its Content-Length.
                    events.transportDidDropBody(byteCount: Int(http.expectedContentLength))
                }
                events.transportDidComplete(error: nil)
            } catch let error as URLError where error.code == .cancelled {
                // Nobody cancelled this transfer: the transport refused its challenge.
                guard machine.withLock({ $0.callEnded(refusedChallenge: true) }) == .sendAgain else {
                    return events.transportDidComplete(error: error)
                }
                await Self.sendAgain(events, again)
                machine.withLock { $0.resentEnded() }
            } catch {
                _ = machine.withLock { $0.callEnded(refusedChallenge: false) }
                events.transportDidComplete(error: error)
            }
        }
    }

    /// Sends the request again and stays until that transfer ends, so that a cancel reaches it.
    private static func sendAgain(
        _ events: any TransportEvents, _ again: @escaping @Sendable (any TransportEvents) -> URLSessionTask
    ) async {
        let resent = ResendEvents(events)
        let task = again(resent)
        await withTaskCancellationHandler {
            await resent.ended()
        } onCancel: {
            Platform.cancel(innerTask: task)
        }
    }

    /// Stops the transfer; its end is reported as `cancelled`. Off the calling thread: cancelling
    /// an inner task syncs onto the session's work queue, which may be this one.
    func cancel() {
        perform(machine.withLock { $0.cancel() })
    }

    private func perform(_ action: WholeTransferStateMachine.CancelAction) {
        switch action {
        case .none:
            break
        case .cancelInnerTask:
            Platform.asyncAPITask(withDelegate: relay, in: session) { [self] lookup in
                switch lookup {
                case .found(let task):
                    Platform.cancel(innerTask: task)
                case .none:
                    // Not made yet (the call is starting), or ended: look again while it runs.
                    DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(1)) { [self] in
                        perform(machine.withLock { $0.innerTaskNotFound() })
                    }
                case .unreadable:
                    // The toolchain hides the session's tasks: the call's own cancellation.
                    let work = work
                    DispatchQueue.global().async { work.cancel() }
                }
            }
        case .cancelWork:
            // The request sent again: its cancellation handler only queues the inner cancel.
            let work = work
            DispatchQueue.global().async { work.cancel() }
        }
    }
}

/// One whole transfer's lifecycle, without I/O: the async call, the request sent again after a
/// refused challenge, and a cancel that may come at any point of it.
///
/// ```
///  preparing ──willCall──> calling ──callEnded──> ended
///      │                      │  └─refused challenge──> resending ──resentEnded──> ended
///      └─cancel: ended        └─cancel: cancel the inner task (found by its delegate)
/// ```
struct WholeTransferStateMachine {
    private enum State {
        /// The Swift task has not called the inner session yet.
        case preparing
        /// In the inner session's `data(for:)`.
        case calling
        /// Sending the request again as a streamed transfer.
        case resending
        case ended
    }

    private var state = State.preparing
    private var cancelled = false

    enum CallAction: Equatable {
        /// Call the inner session.
        case call
        /// Cancelled before the call: end it cancelled, sending nothing.
        case endCancelled
    }

    /// The Swift task is about to call the inner session.
    mutating func willCall() -> CallAction {
        guard case .preparing = state, !cancelled else {
            state = .ended
            return .endCancelled
        }
        state = .calling
        return .call
    }

    enum EndAction: Equatable {
        /// Report the end as it is.
        case report
        /// The transport refused a challenge (nobody cancelled): send the request again.
        case sendAgain
    }

    /// The async call ended; `refusedChallenge`: it ended `cancelled`, which is a refused
    /// challenge unless this transfer was cancelled.
    mutating func callEnded(refusedChallenge: Bool) -> EndAction {
        guard case .calling = state else { return .report }
        if refusedChallenge, !cancelled {
            state = .resending
            return .sendAgain
        }
        state = .ended
        return .report
    }

    /// The request sent again ended.
    mutating func resentEnded() {
        state = .ended
    }

    enum CancelAction: Equatable {
        case none
        /// Find the async call's inner task and cancel it (never its Swift task: see
        /// ``WholeTransfer``).
        case cancelInnerTask
        /// Cancel the Swift task, which waits for the request sent again.
        case cancelWork
    }

    /// The pipeline stops the transfer.
    mutating func cancel() -> CancelAction {
        guard !cancelled else { return .none }
        cancelled = true
        switch state {
        case .preparing, .ended: return .none
        case .calling: return .cancelInnerTask
        case .resending: return .cancelWork
        }
    }

    /// The inner task was not found: look again while the call runs, or cancel the request sent
    /// again if it came to that meanwhile.
    mutating func innerTaskNotFound() -> CancelAction {
        switch state {
        case .calling: return .cancelInnerTask
        case .resending: return .cancelWork
        case .preparing, .ended: return .none
        }
    }
}

/// The delegate a ``WholeTransfer`` gives the async API: the transport hands it the task's
/// redirect, which goes to the pipeline as every transfer's.
final class RedirectRelay: NSObject, URLSessionTaskDelegate, Sendable {
    private let events: any TransportEvents

    init(events: any TransportEvents) {
        self.events = events
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest,
        completionHandler: @escaping (URLRequest?) -> Void
    ) {
        // Called once; corelibs' handler hops to the task's own queue itself.
        nonisolated(unsafe) let completion = completionHandler
        events.transportWillRedirect(response, to: request) { completion($0) }
    }
}

/// The events of a request a ``WholeTransfer`` sent again: passed on to the task's own, and
/// its end waited for (so the whole transfer's Swift task stays, and a cancel reaches it).
private final class ResendEvents: TransportEvents {
    private enum Phase {
        case running
        case waiting(CheckedContinuation<Void, Never>)
        case ended
    }

    private let events: any TransportEvents
    private let phase = LockedState(Phase.running)

    init(_ events: any TransportEvents) {
        self.events = events
    }

    /// Returns once the transfer ended.
    func ended() async {
        await withCheckedContinuation { continuation in
            let now: Bool = phase.withLock { phase in
                guard case .running = phase else { return true }
                phase = .waiting(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    func transportDidReceive(response: URLResponse) { events.transportDidReceive(response: response) }
    func transportDidReceive(data: Data) { events.transportDidReceive(data: data) }
    func transportDidSendBody(totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        events.transportDidSendBody(totalBytesSent: totalBytesSent, totalBytesExpectedToSend: totalBytesExpectedToSend)
    }
    func transportWillRedirect(_ response: HTTPURLResponse, to request: URLRequest, decide: @escaping @Sendable (URLRequest?) -> Void) {
        events.transportWillRedirect(response, to: request, decide: decide)
    }
    func transportDidDropBody(byteCount: Int) { events.transportDidDropBody(byteCount: byteCount) }

    func transportDidComplete(error: (any Error)?) {
        events.transportDidComplete(error: error)
        let waiting: CheckedContinuation<Void, Never>? = phase.withLock { phase in
            defer { phase = .ended }
            if case .waiting(let continuation) = phase { return continuation }
            return nil
        }
        waiting?.resume()
    }
}
