#if canImport(FoundationNetworking)
import Foundation
import FoundationNetworking

/// What one of ``ManagedURLSession``'s open task factories was asked for.
struct TaskFactoryRecord {
    /// A delegate-driven task streams; one with a completion handler buffers.
    var delivery: BodyDelivery
    /// The body given to an upload factory; `nil` for other tasks (a data task's body is on its
    /// request, which the protocol sees).
    var uploadBody: URLTaskBody?
    /// `uploadTask(withStreamedRequest:)`: the delegate gives the body.
    var bodyFromDelegate = false
}

/// The records of the tasks a ``ManagedURLSession``'s factories made, kept while the task lives
/// (a task may start loading more than once), found by identity.
final class TaskFactoryRecords: Sendable {
    private struct Entry {
        weak var task: URLSessionTask?
        var record: TaskFactoryRecord
    }

    private struct State {
        var entries: [Int: Entry] = [:]
        /// The count at which entries of released tasks are dropped next (doubles with the live ones).
        var pruneAt = 64
    }

    private let state = LockedState(State())

    /// Records `task`'s `delivery` and body; returns `task`.
    func record<Made: URLSessionTask>(
        _ task: Made, _ delivery: BodyDelivery, uploadBody: URLTaskBody? = nil, bodyFromDelegate: Bool = false
    ) -> Made {
        let record = TaskFactoryRecord(delivery: delivery, uploadBody: uploadBody, bodyFromDelegate: bodyFromDelegate)
        state.withLock { state in
            state.entries[task.taskIdentifier] = Entry(task: task, record: record)
            if state.entries.count >= state.pruneAt {
                state.entries = state.entries.filter { $0.value.task != nil }
                state.pruneAt = max(64, state.entries.count * 2)
            }
        }
        return task
    }

    /// The record of `task`; `nil` if no factory of this session made it (an async API's task).
    func record(for task: URLSessionTask) -> TaskFactoryRecord? {
        state.withLock { state in
            guard let entry = state.entries[task.taskIdentifier], entry.task === task else { return nil }
            return entry.record
        }
    }
}
#endif
