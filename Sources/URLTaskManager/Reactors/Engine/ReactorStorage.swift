import Foundation

/// One reactor of a manager: its configuration, its name for errors, and a way to run its work
/// within its timeout. Its runs, gates and stamps are part of admission
/// (``AdmissionStateMachine``); this type holds no state of its own.
final class ReactorStorage: Sendable {
    enum Outcome {
        case succeeded
        case failed(any Error)
        /// No run can help this task: give its caller the response it received.
        case declined
    }

    let index: Int
    let reactor: any URLTaskReactor
    let configuration: URLTaskReactorConfiguration
    let name: String

    init(index: Int, reactor: any URLTaskReactor) {
        self.index = index
        self.reactor = reactor
        self.configuration = reactor.configuration
        self.name = String(describing: type(of: reactor))
    }

    /// Runs the reactor's work once, within its timeout, and names the failure: what a single
    /// flight run and a per-task reaction both do.
    func runWork(outcome: URLTaskOutcome, body: Data, task: URLTask) async -> Outcome {
        do {
            try await withDeadline(configuration.timeout) {
                try await self.reactor.react(to: outcome, body: body, of: task)
            }
            return .succeeded
        } catch let error as ReactorDeadlineExceeded {
            return .failed(URLTaskError.reactorTimedOut(reactor: name, after: error.limit))
        } catch {
            return .failed(URLTaskError.reactorFailed(reactor: name, underlying: error))
        }
    }
}
