import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Where a task's outcome goes: the outer `URLProtocolClient` for tasks made through the
/// manager's session (``ProtocolSink``), or a file for ``URLTaskManager/download(for:)``.
///
/// The pipeline calls it in order: at most one response, data chunks, then exactly one of
/// `finish` or `fail`. Implementations must return quickly and never call back into the
/// pipeline.
protocol TaskSink: Sendable {
    func receive(response: URLResponse)
    func receive(data: Data)
    func finish()
    func fail(_ error: any Error)

    /// The current attempt has sent `totalBytesSent` of its body, of `totalBytesExpectedToSend`
    /// (0 or -1 when unknown). Each attempt counts from 0.
    func sentBody(totalBytesSent: Int64, totalBytesExpectedToSend: Int64)

    /// Asks the caller's side whether to follow a redirect: `answer` gets the request to
    /// follow (possibly changed) or `nil` to deliver the redirect response itself. Called once
    /// per redirect, from any thread; `answer` may be called from any thread.
    func redirect(_ response: HTTPURLResponse, to request: URLRequest, answer: @escaping @Sendable (URLRequest?) -> Void)

    /// Asks the caller's side how to answer the HTTP authentication challenge of a 401.
    func challenge(
        _ challenge: URLAuthenticationChallenge, answer: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void)

    /// Whether a 401 challenge must be answered before the caller sees the response (the
    /// caller's session would otherwise answer it itself, and resend outside the pipeline). A
    /// constant of the sink: read once, as its task starts.
    var answersChallenges: Bool { get }

    /// How the caller takes the body, which decides how its transfer delivers it. Every sink
    /// states its own, a constant: read once, as its task starts.
    var delivery: TransferDelivery { get }
}

/// How a transfer delivers its answer to a task's sink.
enum TransferDelivery: Sendable {
    /// Chunk by chunk as it arrives, with the transport's callbacks where the outer task's
    /// client is called (``Platform/runCallbacksOnWorkQueue(of:delegateQueue:)``): the session's.
    case streamed
    /// In one piece at the end (``WholeTransfer``): ``URLTaskManager/data(for:)`` and the uploads.
    case whole
    /// Chunk by chunk, with the callbacks on a thread of their own as a plain session's, whose
    /// memory does not grow with the body (the streaming transport of
    /// ``URLTaskManager/bytes(for:)``: see ``Pipeline``).
    case streamedApart
}

extension TaskSink {
    /// Nobody to tell.
    func sentBody(totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {}

    /// Follows every redirect, as a session without a delegate does.
    func redirect(_ response: HTTPURLResponse, to request: URLRequest, answer: @escaping @Sendable (URLRequest?) -> Void) {
        answer(request)
    }

    /// Leaves the challenge unanswered: the caller gets the 401.
    func challenge(
        _ challenge: URLAuthenticationChallenge, answer: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        answer(.rejectProtectionSpace, nil)
    }

    var answersChallenges: Bool { false }
}
