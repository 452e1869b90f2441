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

    // MARK: Readings (the reactor's code: called without the lock, just before the event they inform)

    /// What the reactor reports of `task` (``ReactorRunStateMachine/ReportedVersion``), if it
    /// keeps a credential version of its own.
    func reportedVersion(of task: URLTask) -> ReactorRunStateMachine.ReportedVersion? {
        guard let current = reactor.currentCredentialVersion(), let sent = reactor.credentialVersion(of: task) else { return nil }
        return .init(sent: sent, current: current)
    }

    /// The credential version `task`'s headers were decided under, for its `sent` event: the
    /// reactor's own (``URLTaskReactor/credentialVersion(of:)``) or, for a reactor that holds new
    /// tasks (a credential's), its run the task was stamped with (`stamped`, per reactor index).
    /// A reactor with neither (a retry) has none.
    func credentialVersion(of task: URLTask, stamped: [Int: Int]) -> Int? {
        if let own = reactor.credentialVersion(of: task) { return own }
        return configuration.mode.holdsNewTasks ? stamped[index] : nil
    }

    // MARK: Work

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
