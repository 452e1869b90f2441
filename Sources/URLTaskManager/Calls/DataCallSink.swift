import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Collects a task's response and body for ``URLTaskManager/data(for:)`` and the uploads, and
/// ends their ``Call`` with both, as URLSession's async methods return them.
final class DataCallSink: CallSink, AnswersChallengesFromStorage, Sendable {
    private let call: Call<(Data, URLResponse)>

    init(_ call: Call<(Data, URLResponse)>) {
        self.call = call
    }

    func receive(response: URLResponse) {
        call.collect(response: response)
    }

    func receive(data: Data) {
        call.collect(data: data)
    }

    func finish() {
        let (response, body) = call.takeCollected()
        guard let response else { return call.end(.failure(URLError(.badServerResponse))) }
        call.end(.success((body, response)))
    }

    func cancelCall() {
        call.cancel()
    }

    func fail(_ error: any Error) {
        call.end(.failure(error))
    }

    var delivery: TransferDelivery { .whole }
}
