import Foundation

/// One reactor of a manager: its configuration, its name for errors, and a way to run its work
/// within its timeout. Its runs, gates and stamps are part of admission
/// (``AdmissionStateMachine``); this type holds no state of its own.
final class ReactorRunner: Sendable {
    enum Outcome {
        case succeeded
        case failed(any Error)
        /// No run can help this task: give its caller the response it received.
        case declined
    }

    let index: Int
    let reactor: any URLTaskReactor
    let configuration: URLTaskReactorConfiguration
    /// Who it is in errors and events: its index, and its type's name (disambiguated).
    let component: URLTaskError.Component
    var name: String { component.name }
    /// Its type, as a ``URLTaskPolicy`` names the reactors a request skips.
    let type: URLTaskPolicy.ComponentType

    /// Whether the reactor keeps a credential version of its own
    /// (``URLTaskReactor/currentCredentialVersion()`` is not `nil`, asked once): a task it covers
    /// that is handed a connection slot reads its versions again before it leaves.
    let reportsCredentialVersions: Bool

    init(reactor: any URLTaskReactor, component: URLTaskError.Component) {
        self.index = component.index ?? 0
        self.reactor = reactor
        self.reportsCredentialVersions = reactor.currentCredentialVersion() != nil
        self.type = URLTaskPolicy.ComponentType(Swift.type(of: reactor))
        self.configuration = reactor.configuration
        self.component = component
    }

    /// Runs the reactor's work once, within its timeout, and makes its failure what the caller
    /// receives (``URLTaskError/delivered(_:from:code:)``): what a single flight run and a
    /// per-task reaction both do.
    func runWork(outcome: URLTaskOutcome, body: Data, task: URLTask) async -> Outcome {
        do {
            try await withDeadline(configuration.timeout) {
                try await self.reactor.react(to: outcome, body: body, of: task)
            }
            return .succeeded
        } catch let error as ReactorDeadlineExceeded {
            return .failed(URLTaskError.reactorTimedOut(component, after: error.limit))
        } catch {
            return .failed(URLTaskError.delivered(error, from: component, code: .reactorFailed))
        }
    }
}
