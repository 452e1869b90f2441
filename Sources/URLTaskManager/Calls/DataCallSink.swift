import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Collects a task's response and body for ``URLTaskManager/data(for:)`` and the uploads, and
/// ends their ``Call`` with both, as URLSession's async methods return them.
final class DataCallSink: CallSink, Sendable {
    private struct Collected {
        var response: URLResponse?
        var body = Data()
    }

    private let collected = LockedState(Collected())
    private let call: Call<(Data, URLResponse)>

    init(_ call: Call<(Data, URLResponse)>) {
        self.call = call
    }

    func receive(response: URLResponse) {
        collected.withLock { $0.response = response }
    }

    func receive(data: Data) {
        collected.withLock { $0.body.append(data) }
    }

    func finish() {
        let (response, body) = collected.withLock { collected in
            defer { collected.body = Data() }
            return (collected.response, collected.body)
        }
        guard let response else { return call.end(.failure(URLError(.badServerResponse))) }
        call.end(.success((body, response)))
    }

    func fail(_ error: any Error) {
        call.end(.failure(error))
    }

    func cancelCall() {
        call.cancel()
    }

    /// Answered as a session without a delegate answers: the credential storage's default
    /// credential for the protection space, if any, else the caller gets the 401.
    func challenge(
        _ challenge: URLAuthenticationChallenge, answer: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        answer(.performDefaultHandling, nil)
    }

    var answersChallenges: Bool { true }

    var delivery: TransferDelivery { .whole }
}
