/// The lifecycle of one task through the pipeline, without I/O.
///
/// ```
///  created ──start──> intercepting(0) ──execute──> intercepting(1) ... ──> sending ──head──> receiving ──end──> completed
///                         │  hold                                           │ error             │ error
///                         v                                                 v                   v
///                       held(k) ──release──> intercepting(k+1)           completed           completed
/// ```
/// Any state but `completed` can be cancelled (the caller cancelled: the session reports it)
/// or failed (hold timeout, invalidation). Each event returns the one action the storage
/// performs once its lock is released. Events that arrive after completion return `.none`,
/// which is what makes "completes exactly once" hold whatever the interleaving.
struct TaskStateMachine {
    enum Action {
        case none
        /// Run interceptor `index` on the task.
        case runInterceptor(index: Int)
        /// Put the task in interceptor `index`'s batch.
        case hold(index: Int, maximumWait: Duration?)
        /// Release interceptor `index`'s batch; this task then continues at `index + 1`.
        case releaseBatch(index: Int)
        /// Send the task's current request.
        case send
        case forwardResponse(URLResponse)
        case forwardData(Data)
        /// Complete successfully.
        case finish
        /// Answer locally: response, body, then finish.
        case respond(HTTPURLResponse, Data)
        /// Complete with `error`.
        case fail(any Error)
        /// The caller cancelled: stop the transport (the session reports the cancellation).
        case cancelTransport
        /// The caller cancelled while held: take it out of batch `index`.
        case leaveBatch(index: Int)
    }

    private enum State {
        case created
        case intercepting(index: Int)
        case held(index: Int)
        case sending
        case receiving
        case completed
    }

    private var state: State = .created
    private let interceptorCount: Int

    init(interceptorCount: Int) {
        self.interceptorCount = interceptorCount
    }

    var isCompleted: Bool {
        if case .completed = state { return true }
        return false
    }

    mutating func start() -> Action {
        guard case .created = state else { return .none }
        return advance(to: 0)
    }

    mutating func interceptorReturned(index: Int, command: InterceptCommand, interceptorName: String) -> Action {
        guard case .intercepting(let current) = state, current == index else { return .none }
        switch command {
        case .execute:
            return advance(to: index + 1)
        case .hold(let maximumWait):
            state = .held(index: index)
            return .hold(index: index, maximumWait: maximumWait)
        case .release:
            // The batch continues first, then this task; both at `index + 1`.
            state = .held(index: index)
            return .releaseBatch(index: index)
        case .fail(let error):
            state = .completed
            return .fail(URLTaskError.interceptorFailed(interceptor: interceptorName, underlying: error))
        case .respond(let response, let body):
            state = .completed
            return .respond(response, body)
        }
    }

    mutating func interceptorThrew(index: Int, error: any Error, interceptorName: String) -> Action {
        guard case .intercepting(let current) = state, current == index else { return .none }
        state = .completed
        if let error = error as? URLTaskError { return .fail(error) }
        return .fail(URLTaskError.interceptorFailed(interceptor: interceptorName, underlying: error))
    }

    /// The batch of interceptor `index` was released.
    mutating func released(index: Int) -> Action {
        guard case .held(let current) = state, current == index else { return .none }
        return advance(to: index + 1)
    }

    mutating func transportReceived(response: URLResponse) -> Action {
        guard case .sending = state else { return .none }
        state = .receiving
        return .forwardResponse(response)
    }

    mutating func transportReceived(data: Data) -> Action {
        guard case .receiving = state else { return .none }
        return .forwardData(data)
    }

    mutating func transportCompleted(error: (any Error)?) -> Action {
        switch state {
        case .sending, .receiving:
            state = .completed
            if let error { return .fail(error) }
            return .finish
        case .created, .intercepting, .held, .completed:
            return .none
        }
    }

    /// The request could not be sent (an invalid header): fail before anything goes out.
    mutating func failSending(_ error: any Error) -> Action {
        guard case .sending = state else { return .none }
        state = .completed
        return .fail(error)
    }

    /// The caller cancelled (`stopLoading`). The session reports the error itself.
    mutating func cancel() -> Action {
        let previous = state
        switch previous {
        case .completed:
            return .none
        case .created, .intercepting:
            state = .completed
            return .none
        case .held(let index):
            state = .completed
            return .leaveBatch(index: index)
        case .sending, .receiving:
            state = .completed
            return .cancelTransport
        }
    }

    /// The manager fails the task (hold timeout, invalidation) before it was sent; a task
    /// already on the network finishes on its own.
    mutating func fail(_ error: any Error) -> Action {
        switch state {
        case .created, .intercepting, .held:
            state = .completed
            return .fail(error)
        case .sending, .receiving, .completed:
            return .none
        }
    }

    private mutating func advance(to index: Int) -> Action {
        if index < interceptorCount {
            state = .intercepting(index: index)
            return .runInterceptor(index: index)
        }
        state = .sending
        return .send
    }
}
