import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The lifecycle of one task through the pipeline, without I/O.
///
/// ```
///  created ─start─> [gated] ─> intercepting(0) ─execute─> ... intercepting(n-1) ─> awaitingConnection
///                                   │ hold                                           │ slot
///                                   v                                              sending
///                                   │                                                │ head
///                                   v                                   ┌────────────┴─────────────┐
///                                held(k) ─release─> intercepting(k+1)   v                          v
///                                                                   receiving ─end─> completed   collecting(reactor r)
///                                                                                                  │ end
///                                                                                                  v
///                        intercepting(0) or awaitingConnection  <─requeue─  reacting(r) ─fail─> completed
/// ```
/// In `awaitingConnection` the task waits for admission (``AdmissionStateMachine``): a slot, and
/// the check that its headers are still current. A task whose headers were decided before a
/// holding reactor's run that has ended since goes back to the gates (``headersStale()``)
/// instead of out with a stale token; one that meets a run going waits at its gate
/// (``admissionGated(reactor:)``).
/// A redirect met while sending is the pipeline's to follow: after the caller's delegate
/// answers (``redirectAnswered(_:)``) the rest of that transfer is dropped (`redirecting`) and
/// the task starts again from the gates with the new request (``Action/restart(from:)``). A 401
/// with an authentication challenge is collected (`challenged`), then the caller's side is
/// asked (`consultingChallenge`): a credential restarts the task the same way.
/// Any state but `completed` can be cancelled (the caller cancelled: the session reports it)
/// or failed before sending (hold timeout, invalidation, a failed reactor run it was gated
/// on); a task that waits inside the pipeline longer than its request's timeout fails with
/// `URLError.timedOut` (``waitTimedOut(_:)``). Each event returns the one action the storage
/// performs once its lock is released.
/// Events that arrive in a state that does not expect them return `.none`, which is what
/// makes "completes exactly once" hold whatever the interleaving.
struct TaskStateMachine {
    /// What a reactor decided about a task whose outcome it took.
    enum ReactionResult {
        /// The work succeeded (or had already been done): send the task again.
        case requeue(reintercept: Bool)
        /// Give the caller what arrived, whole: the response and its body, or the transport's
        /// own error. For a reactor that does not requeue, and for a task that already went
        /// out again with headers decided after the reactor's latest run and met the same
        /// reaction (a resource that refuses every token: sending it again cannot help).
        case deliver
        /// The work failed: fail the task with this error.
        case fail(any Error)
    }

    enum Action {
        case none
        /// Wait at the gates of the reactors that hold new tasks; resumes with `gateOpened`.
        case checkGates
        /// Run interceptor `index` on the task.
        case runInterceptor(index: Int)
        /// Put the task in interceptor `index`'s batch.
        case hold(index: Int, maximumWait: Duration?)
        /// Release interceptor `index`'s batch; this task then continues at `index + 1`.
        case releaseBatch(index: Int)
        /// Take a connection slot for the task's host; resumes with `connectionGranted`.
        case acquireConnection
        /// Send the task's current request (attempt `attempt`).
        case send(attempt: Int)
        case forwardResponse(URLResponse)
        case forwardData(Data)
        /// Complete successfully.
        case finish
        /// Answer with a complete response: response, body, then finish.
        case respond(URLResponse, Data)
        /// Complete with `error`.
        case fail(any Error)
        /// Hand the task to reactor `reactor` with what it received.
        case react(reactor: Int, outcome: URLTaskOutcome, body: Data)
        /// The caller cancelled: stop the transport (the session reports the cancellation).
        case cancelTransport
        /// The caller cancelled while waiting for a connection slot.
        case leaveConnectionQueue
        /// The caller cancelled while held: take it out of batch `index`.
        case leaveBatch(index: Int)
        /// The caller cancelled while waiting on reactor `reactor` (its run or its gate).
        case leaveReactor(reactor: Int)
        /// The caller cancelled before anything was sent: stop the running interceptor, if any.
        case abandon
        /// The manager ends the task while it is on the network (``abort(_:)``): stop the
        /// transfer, and complete with `error`.
        case abortTransfer(any Error)
        /// Ask the caller's delegate about the redirect the transfer met (the transfer waits).
        case consultRedirect
        /// Ask the caller's delegate (or credential storage) about the HTTP authentication
        /// challenge of this 401.
        case consultChallenge(HTTPURLResponse)
        /// Start again from `request` (a followed redirect, a challenge answered with a
        /// credential): the interceptors run on it as on a resend.
        case restart(from: URLRequest)
    }

    /// What the caller's side answered to an HTTP authentication challenge.
    enum ChallengeAnswer {
        /// Send this request (the credential applied) through the pipeline again.
        case resend(URLRequest)
        /// Give the caller this response (the 401) and the body that came with it.
        case deliver(URLResponse)
        /// Complete with this error (the delegate cancelled the challenge).
        case fail(any Error)
    }

    private enum State {
        case created
        case gated(gate: Int?)
        case intercepting(index: Int)
        case held(index: Int)
        case awaitingConnection
        case sending
        case receiving
        /// `whole`: the body may be delivered to the caller, so none of it is dropped.
        case collecting(reactor: Int, response: HTTPURLResponse, body: Data, whole: Bool)
        case reacting(reactor: Int, outcome: URLTaskOutcome, body: Data)
        /// The transfer met a redirect the pipeline follows itself (`to`), or one too many
        /// (`to == nil`, failing with `failure`); the rest of the transfer is dropped.
        case redirecting(to: URLRequest?, failure: (any Error)?)
        /// A 401 with an authentication challenge: its body is collected, then the caller's
        /// side is asked.
        case challenged(response: HTTPURLResponse, body: Data)
        case consultingChallenge(response: HTTPURLResponse, body: Data)
        /// The final answer is not one the caller accepts (``ResponseValidation``): the start of
        /// its body is kept for the error, which the caller gets when the transfer ends.
        case rejecting(response: HTTPURLResponse, reason: String, body: Data)
        case completed
    }

    /// What the task state machine needs to know of one reactor.
    struct ReactorTraits {
        /// Who it is, for errors.
        var component: URLTaskError.Component
        /// How often one task may trigger it.
        var maximumReactions: Int
        /// Whether it gives the caller the response it reacted to (it does not requeue).
        var delivers: Bool

        init(component: URLTaskError.Component, maximumReactions: Int, delivers: Bool = false) {
            self.component = component
            self.maximumReactions = maximumReactions
            self.delivers = delivers
        }
    }

    /// Bodies collected for reactors that will not deliver them are kept up to this size (the
    /// reactor sees the first MiB; the caller never sees them).
    static let reactionBodyLimit = 1 << 20

    private var state: State = .created
    private let interceptorCount: Int
    /// The answers the caller accepts; `nil` accepts every one.
    private let validation: ResponseValidation?
    /// Interceptors this task skips.
    private let skippedInterceptors: Set<Int>
    private let reactors: [ReactorTraits]
    private var reactions: [Int]
    /// Per reactor: whether this task was already sent again after one of its runs succeeded.
    private var requeuedBy: [Bool]
    private(set) var attempt = 1
    /// Redirects met so far; past ``maximumRedirects`` the task fails, as URLSession's do.
    private var redirects = 0
    /// URLSession's own limit (20, as on Darwin).
    static let maximumRedirects = 20
    /// Whether the current attempt's headers were not decided by the interceptors (a requeue
    /// without them): admission stamps them when the task is about to leave.
    private(set) var needsRestamp = false

    /// - Parameters:
    ///   - interceptorCount: The length of the interceptor chain.
    ///   - reactors: What the machine needs to know of each reactor.
    ///   - validation: The answers the caller accepts (``ResponseValidation``); `nil`, any.
    ///   - skipping: Interceptors this task skips (its ``URLTaskPolicy``).
    init(interceptorCount: Int, skipping: Set<Int> = [], reactors: [ReactorTraits] = [], validation: ResponseValidation? = nil) {
        self.interceptorCount = interceptorCount
        self.skippedInterceptors = skipping
        self.validation = validation
        self.reactors = reactors
        self.reactions = Array(repeating: 0, count: reactors.count)
        self.requeuedBy = Array(repeating: false, count: reactors.count)
    }

    /// Whether reactor `reactor` already sent this task again after a successful run: if its
    /// new headers meet the same reaction, the caller gets that answer (see ``ReactionResult/deliver``).
    func wasRequeued(by reactor: Int) -> Bool {
        requeuedBy[reactor]
    }

    /// Whether a transport error now would be the task's outcome (no head has arrived).
    var isAwaitingResponseHead: Bool {
        if case .sending = state { return true }
        return false
    }

    var isCompleted: Bool {
        if case .completed = state { return true }
        return false
    }

    mutating func start() -> Action {
        guard case .created = state else { return .none }
        state = .gated(gate: nil)
        return .checkGates
    }

    /// The gates were checked and the task waits at reactor `reactor`'s gate.
    mutating func waitingAtGate(reactor: Int) -> Action {
        guard case .gated = state else { return .none }
        state = .gated(gate: reactor)
        return .none
    }

    /// No gate holds the task (any more).
    mutating func gateOpened() -> Action {
        guard case .gated = state else { return .none }
        return advance(to: 0)
    }

    mutating func interceptorReturned(index: Int, command: InterceptCommand, interceptor: URLTaskError.Component) -> Action {
        guard case .intercepting(let current) = state, current == index else { return .none }
        switch command {
        case .execute:
            return advance(to: index + 1)
        case .hold(let maximumWait):
            state = .held(index: index)
            return .hold(index: index, maximumWait: maximumWait)
        case .release:
            // The batch and this task continue together, at `index + 1`.
            state = .held(index: index)
            return .releaseBatch(index: index)
        case .fail(let error):
            state = .completed
            return .fail(Self.interceptorFailure(error, by: interceptor))
        case .respond(let response, let body):
            state = .completed
            return .respond(response, body)
        }
    }

    mutating func interceptorThrew(index: Int, error: any Error, interceptor: URLTaskError.Component) -> Action {
        guard case .intercepting(let current) = state, current == index else { return .none }
        state = .completed
        if let error = error as? URLTaskError { return .fail(error) }
        return .fail(Self.interceptorFailure(error, by: interceptor))
    }

    /// What the caller gets when `interceptor` fails its task with `error`: a `URLError` as
    /// itself (an offline check's `.notConnectedToInternet` must reach `catch let error as
    /// URLError` as a plain session's would), naming the interceptor in its user info
    /// (``URLTaskError/componentUserInfoKey``); anything else wrapped in a ``URLTaskError``.
    static func interceptorFailure(_ error: any Error, by interceptor: URLTaskError.Component) -> any Error {
        guard let urlError = error as? URLError else { return URLTaskError.interceptorFailed(interceptor, underlying: error) }
        var info = urlError.userInfo
        info[URLTaskError.componentUserInfoKey] = interceptor.name
        return URLError(urlError.code, userInfo: info)
    }

    /// The batch of interceptor `index` was released.
    mutating func released(index: Int) -> Action {
        guard case .held(let current) = state, current == index else { return .none }
        return advance(to: index + 1)
    }

    /// Admission lets the task go (it holds a connection slot if it needs one): send it.
    /// Returns `.none` if it no longer needs one (cancelled meanwhile).
    mutating func connectionGranted() -> Action {
        guard case .awaitingConnection = state else { return .none }
        state = .sending
        needsRestamp = false
        return .send(attempt: attempt)
    }

    /// Admission found its headers decided before a holding reactor's run that has ended since
    /// (it waited in a batch or for a connection meanwhile): run the interceptors again instead
    /// of sending a request known to be stale.
    mutating func headersStale() -> Action {
        guard case .awaitingConnection = state else { return .none }
        state = .gated(gate: nil)
        return .checkGates
    }

    /// Admission found a holding reactor's run going: the task waits at its gate, then runs the
    /// interceptors again.
    mutating func admissionGated(reactor: Int) -> Action {
        guard case .awaitingConnection = state else { return .none }
        state = .gated(gate: reactor)
        return .none
    }

    /// The request could not be sent (an invalid header, a body that cannot be replayed, the
    /// session invalidated).
    mutating func failSending(_ error: any Error) -> Action {
        guard case .sending = state else { return .none }
        state = .completed
        return .fail(error)
    }

    /// The response head arrived. `reactor` is the first reactor that wants it, if any;
    /// `challenge` says it is a 401 whose authentication challenge the caller's side answers.
    /// An interim (1xx) head leaves the task `sending`: only the final head counts.
    mutating func transportReceived(response: URLResponse, reactor: Int?, challenge: Bool = false) -> Action {
        guard case .sending = state else { return .none }
        if Self.isInterim(response) { return .none }
        if let reactor, let http = response as? HTTPURLResponse {
            // Kept whole when it may reach the caller: never a truncated body without an error.
            let whole = reactors[reactor].delivers || requeuedBy[reactor]
            state = .collecting(reactor: reactor, response: http, body: Data(), whole: whole)
            return .none
        }
        if challenge, let http = response as? HTTPURLResponse {
            state = .challenged(response: http, body: Data())
            return .none
        }
        if let http = response as? HTTPURLResponse, let reason = validation?.rejection(of: http) {
            state = .rejecting(response: http, reason: reason, body: Data())
            return .none
        }
        state = .receiving
        return .forwardResponse(response)
    }

    mutating func transportReceived(data: Data) -> Action {
        switch state {
        case .receiving:
            return .forwardData(data)
        case .collecting(let reactor, let response, var body, let whole):
            state = .completed  // keep `body` uniquely referenced while appending
            if whole {
                body.append(data)
            } else if body.count < Self.reactionBodyLimit {
                body.append(data.prefix(Self.reactionBodyLimit - body.count))
            }
            state = .collecting(reactor: reactor, response: response, body: body, whole: whole)
            return .none
        case .challenged(let response, var body):
            state = .completed  // keep `body` uniquely referenced while appending
            body.append(data)
            state = .challenged(response: response, body: body)
            return .none
        case .rejecting(let response, let reason, var body):
            guard body.count < ResponseValidation.bodyPrefixLimit else { return .none }
            state = .completed  // keep `body` uniquely referenced while appending
            body.append(data.prefix(ResponseValidation.bodyPrefixLimit - body.count))
            state = .rejecting(response: response, reason: reason, body: body)
            return .none
        default:
            return .none
        }
    }

    /// The transfer met a redirect. Past the limit the task will fail (`tooMany`) when the
    /// transfer ends; otherwise the caller's delegate is asked (``redirectAnswered(_:refused:)``).
    mutating func redirectReceived(tooMany: @autoclosure () -> any Error) -> Action {
        guard case .sending = state else { return .none }
        redirects += 1
        if redirects > Self.maximumRedirects {
            state = .redirecting(to: nil, failure: tooMany())
            return .none
        }
        return .consultRedirect
    }

    /// The caller's side answered a redirect: follow it with `request` (through the pipeline,
    /// once the transfer has ended) or, with `nil`, deliver the redirect response itself.
    /// `refused` is the error for a request the pipeline will not send (a scheme other than http
    /// or https): the task fails with it when the transfer ends.
    mutating func redirectAnswered(_ request: URLRequest?, refused: (any Error)? = nil) -> Action {
        guard case .sending = state, let request else { return .none }
        state = refused.map { .redirecting(to: nil, failure: $0) } ?? .redirecting(to: request, failure: nil)
        return .none
    }

    /// The caller's side answered an authentication challenge.
    mutating func challengeAnswered(_ answer: ChallengeAnswer) -> Action {
        guard case .consultingChallenge(_, let body) = state else { return .none }
        switch answer {
        case .resend(let request):
            attempt += 1
            state = .gated(gate: nil)
            return .restart(from: request)
        case .deliver(let response):
            state = .completed
            return judged(response, body)
        case .fail(let error):
            state = .completed
            return .fail(error)
        }
    }

    /// The transport finished. `reactor` is the first reactor that wants a transport error.
    mutating func transportCompleted(error: (any Error)?, reactor: Int?) -> Action {
        switch state {
        case .sending:
            if let error, let reactor {
                return beginReaction(reactor: reactor, outcome: .failure(error), body: Data())
            }
            state = .completed
            if let error { return .fail(error) }
            return .finish
        case .receiving:
            state = .completed
            if let error { return .fail(error) }
            return .finish
        case .collecting(let reactor, let response, let body, _):
            if let error {
                // The body of the response to react to was cut: react to the failure.
                return beginReaction(reactor: reactor, outcome: .failure(error), body: Data())
            }
            return beginReaction(reactor: reactor, outcome: .response(response), body: body)
        case .redirecting(let request?, _):
            // Whatever became of the rest of the redirect response, the redirect is followed.
            attempt += 1
            state = .gated(gate: nil)
            return .restart(from: request)
        case .redirecting(nil, let failure):
            state = .completed
            return .fail(failure ?? URLError(.httpTooManyRedirects))
        case .challenged(let response, let body):
            if let error {
                state = .completed
                return .fail(error)
            }
            state = .consultingChallenge(response: response, body: body)
            return .consultChallenge(response)
        case .rejecting(let response, let reason, let body):
            // Whatever became of the rest of the body, the answer was not acceptable.
            state = .completed
            return .fail(URLTaskError.responseRejected(response, body: body, reason: reason))
        case .created, .gated, .intercepting, .held, .awaitingConnection, .reacting, .consultingChallenge, .completed:
            return .none
        }
    }

    mutating func reactionFinished(reactor: Int, result: ReactionResult) -> Action {
        guard case .reacting(let current, let outcome, let body) = state, current == reactor else { return .none }
        switch result {
        case .requeue(let reintercept):
            attempt += 1
            requeuedBy[reactor] = true
            if reintercept {
                state = .gated(gate: nil)
                return .checkGates
            }
            needsRestamp = true
            state = .awaitingConnection
            return .acquireConnection
        case .deliver:
            state = .completed
            switch outcome {
            case .response(let response): return judged(response, body)
            case .failure(let error): return .fail(error)
            }
        case .fail(let error):
            state = .completed
            return .fail(error)
        }
    }

    /// The caller cancelled (`stopLoading`). The session reports the error itself.
    mutating func cancel() -> Action {
        let previous = state
        switch previous {
        case .completed:
            return .none
        case .created, .intercepting, .gated(gate: nil):
            state = .completed
            return .abandon
        case .gated(let gate?):
            state = .completed
            return .leaveReactor(reactor: gate)
        case .held(let index):
            state = .completed
            return .leaveBatch(index: index)
        case .awaitingConnection:
            state = .completed
            return .leaveConnectionQueue
        case .sending, .receiving, .collecting, .redirecting, .challenged, .rejecting:
            state = .completed
            return .cancelTransport
        case .consultingChallenge:
            state = .completed
            return .abandon
        case .reacting(let reactor, _, _):
            state = .completed
            return .leaveReactor(reactor: reactor)
        }
    }

    /// The manager fails the task before it was sent (hold timeout, invalidation, a failed
    /// run it was gated on); a task already on the network finishes on its own.
    mutating func fail(_ error: any Error) -> Action {
        switch state {
        case .created, .gated, .intercepting, .held, .awaitingConnection:
            state = .completed
            return .fail(error)
        case .sending, .receiving, .collecting, .reacting, .redirecting, .challenged, .consultingChallenge, .rejecting, .completed:
            return .none
        }
    }

    /// A whole answer about to reach the caller (a reactor or the caller's side delivers it),
    /// as the caller accepts it (``ResponseValidation``): given, or failed.
    private func judged(_ response: URLResponse, _ body: Data) -> Action {
        if let http = response as? HTTPURLResponse, let reason = validation?.rejection(of: http) {
            return .fail(URLTaskError.responseRejected(http, body: body, reason: reason))
        }
        return .respond(response, body)
    }

    /// The manager ends the task whatever it is doing (``URLTaskManager/failTasks(with:where:)``,
    /// a sign-out): one not sent yet fails as with ``fail(_:)``, one on the network has its
    /// transfer stopped, one waiting for a reactor or the caller's side fails at once.
    mutating func abort(_ error: any Error) -> Action {
        switch state {
        case .completed:
            return .none
        case .created, .gated, .intercepting, .held, .awaitingConnection, .reacting, .consultingChallenge:
            state = .completed
            return .fail(error)
        case .sending, .receiving, .collecting, .redirecting, .challenged, .rejecting:
            state = .completed
            return .abortTransfer(error)
        }
    }

    /// Whether `response` is an interim head (`100 Continue`, `103 Early Hints`): the inner
    /// session reports each one, a plain session's caller sees only the final response. `101`
    /// is final (the connection changes protocol).
    static func isInterim(_ response: URLResponse) -> Bool {
        guard let status = (response as? HTTPURLResponse)?.statusCode else { return false }
        return (100..<200).contains(status) && status != 101
    }

    /// The task waited inside the pipeline (at a gate, in an interceptor, a batch, the slot
    /// queue, or for a reactor's work) for as long as its request's `timeoutInterval` allows
    /// without being sent: it fails with `error` (`URLError.timedOut`), as a plain session's
    /// request that went that long without progress does. A task on the network, or one whose
    /// challenge the caller's side is deciding, is not waiting on the pipeline.
    mutating func waitTimedOut(_ error: any Error) -> Action {
        switch state {
        case .created, .gated, .intercepting, .held, .awaitingConnection, .reacting:
            state = .completed
            return .fail(error)
        case .sending, .receiving, .collecting, .redirecting, .challenged, .consultingChallenge, .rejecting, .completed:
            return .none
        }
    }

    private mutating func beginReaction(reactor: Int, outcome: URLTaskOutcome, body: Data) -> Action {
        reactions[reactor] += 1
        if reactions[reactor] > reactors[reactor].maximumReactions {
            state = .completed
            return .fail(URLTaskError.tooManyAttempts(reactors[reactor].component, attempts: attempt))
        }
        state = .reacting(reactor: reactor, outcome: outcome, body: body)
        return .react(reactor: reactor, outcome: outcome, body: body)
    }

    private mutating func advance(to index: Int) -> Action {
        var index = index
        while skippedInterceptors.contains(index) { index += 1 }
        if index < interceptorCount {
            state = .intercepting(index: index)
            return .runInterceptor(index: index)
        }
        state = .awaitingConnection
        return .acquireConnection
    }
}
