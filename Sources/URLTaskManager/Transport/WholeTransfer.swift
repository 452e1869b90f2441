import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A transfer of the inner session that delivers its answer in one piece, for the manager's own
/// methods: the inner session's async `data(for:delegate:)`, which on corelibs hands the body to
/// its caller right where the transfer ends (no delegate queue between), where a delegate-driven
/// task crosses the delegate queue three times (the head, the body, the end: about 39,000
/// instructions a request, measured with callgrind).
///
/// It is the transfer's task delegate: a redirect is the pipeline's to follow, as for every
/// transfer (``Transport``). Where the platform asks the session's delegate instead (corelibs),
/// the transport hands the redirect on, and tells of a 401 challenge it refused
/// (``challengeRefused(_:)``).
final class WholeTransfer: NSObject, TransferHandle, URLSessionTaskDelegate, Sendable {
    private let events: any TransportEvents
    private let work = LockedState<Task<Void, Never>?>(nil)
    /// The 401 whose challenge the transport refused, so that the pipeline answers it.
    private let refused = LockedState<HTTPURLResponse?>(nil)

    init(events: any TransportEvents) {
        self.events = events
    }

    /// Sends `request` (prepared by ``Transport/prepared(_:body:)``) through `session`.
    func start(_ request: URLRequest, body: URLTaskBody, session: URLSession) {
        let task = Task { [events] in
            do {
                let (data, response): (Data, URLResponse)
                if case .file(let file) = body {
                    (data, response) = try await session.upload(for: request, fromFile: file, delegate: self)
                } else {
                    (data, response) = try await session.data(for: request, delegate: self)
                }
                events.transportDidReceive(response: response)
                if !data.isEmpty { events.transportDidReceive(data: data) }
                events.transportDidComplete(error: nil)
            } catch let error as URLError where error.code == .cancelled && !Task.isCancelled {
                // The refusal of a 401's challenge ends the async API `cancelled`, and the 401's
                // body, delivered before the challenge, is gone with it: the pipeline gets the
                // 401's head alone, as the end of the transfer.
                guard let refused = refused.withLock({ $0 }) else { return events.transportDidComplete(error: error) }
                events.transportDidReceive(response: refused)
                events.transportDidComplete(error: nil)
            } catch {
                events.transportDidComplete(error: error)
            }
        }
        work.withLock { $0 = task }
    }

    /// The transport refused the inner task's 401 challenge (``PlatformSupport/handsChallengeToCaller(_:)``):
    /// the pipeline answers it, as the caller's session answers it for every other transfer.
    func challengeRefused(_ challenge: URLAuthenticationChallenge) {
        guard let response = challenge.failureResponse as? HTTPURLResponse else { return }
        refused.withLock { $0 = response }
    }

    /// Stops the transfer; its end is reported as `cancelled`. Off the calling thread: cancelling
    /// an inner task syncs onto the session's work queue, which may be this one.
    func cancel() {
        guard let task = work.withLock({ $0 }) else { return }
        DispatchQueue.global().async { task.cancel() }
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        events.transportWillRedirect(response, to: request) { completionHandler($0) }
    }
}
