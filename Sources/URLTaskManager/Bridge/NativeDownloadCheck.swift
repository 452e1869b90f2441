import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Asks a pipeline's interceptors whether a download task made with the session's own
/// download APIs may go out without them.
///
/// On Linux such a task cannot pass through the pipeline (corelibs completes it only from its
/// own protocol), so it goes out as the caller made it. That is fine when the interceptors
/// would not have touched it, and the worst kind of failure when they would have: a request
/// without its API key or token that quietly gets an answer. So every interceptor is run on a
/// copy of the task, in order, and the request is let go only if each one answers `execute`
/// and leaves the request and its body as they were. Anything else (a header added, a hold, a
/// failure, a local answer) fails the task with ``URLTaskError/Code-swift.struct/downloadNeedsPipeline``,
/// before anything is sent. Nothing an interceptor does to the copy is sent.
enum NativeDownloadCheck {
    /// `nil` when the request may go out as it is; otherwise the error to fail the task with.
    static func run(_ request: URLRequest, pipeline: Pipeline, recorder: TaskEventRecorder?) async -> URLTaskError? {
        if request.value(forHTTPHeaderField: URLTaskPolicy.headerName) != nil {
            // Sent as it is, the policy would reach the wire, and nothing would apply it.
            return URLTaskError(code: .downloadNeedsPipeline, reason: "it carries a URLTaskPolicy")
        }
        let original = URLTask(request: request)
        var task = original
        for (index, interceptor) in pipeline.interceptors.enumerated() {
            let gate = pipeline.serialGates[index]
            await gate?.acquire()
            let outcome: Result<InterceptCommand, any Error>
            do {
                let context = InterceptContext(currentBatchCount: pipeline.batches[index].snapshot.count)
                outcome = .success(try await interceptor.intercept(&task, context: context))
            } catch {
                outcome = .failure(error)
            }
            gate?.release()
            recorder?.intercepted(pipeline.interceptorComponents[index], outcome)
            let reason: String
            switch outcome {
            case .success(.execute):
                if same(task.request, original.request) && same(task.body, original.body) { continue }
                if task.request.url != original.request.url {
                    reason = "it changes the URL"
                } else if !same(task.body, original.body) {
                    reason = "it changes the body"
                } else {
                    reason = "it changes the headers"
                }
            case .success(.hold): reason = "it holds the request in a batch"
            case .success(.release): reason = "it releases a batch with the request"
            case .success(.fail), .failure: reason = "it fails the request"
            case .success(.respond): reason = "it answers the request locally"
            }
            return .downloadNeedsPipeline(pipeline.interceptorComponents[index], reason: reason)
        }
        return nil
    }

    /// Whether an interceptor left the request as it was: everything that goes on the wire (on
    /// Linux `URLRequest`'s `==` ignores the headers).
    private static func same(_ left: URLRequest, _ right: URLRequest) -> Bool {
        left == right && left.url == right.url && left.httpMethod == right.httpMethod
            && left.allHTTPHeaderFields ?? [:] == right.allHTTPHeaderFields ?? [:]
            && left.httpShouldHandleCookies == right.httpShouldHandleCookies && left.timeoutInterval == right.timeoutInterval
            && left.cachePolicy == right.cachePolicy
    }

    /// Whether an interceptor left the body as it was (a stream: the same object).
    private static func same(_ left: URLTaskBody, _ right: URLTaskBody) -> Bool {
        switch (left, right) {
        case (.none, .none): true
        case (.data(let a), .data(let b)): a == b
        case (.file(let a), .file(let b)): a == b
        case (.stream(let a), .stream(let b)): a === b
        default: false
        }
    }
}
