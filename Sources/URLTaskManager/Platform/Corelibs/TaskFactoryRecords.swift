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
final class TaskFactoryRecords: @unchecked Sendable {  // `entries` and `pruneAt` are guarded by `lock`.
    private struct Entry {
        weak var task: URLSessionTask?
        var record: TaskFactoryRecord
    }

    private let lock = NSLock()
    private var entries: [Int: Entry] = [:]
    /// The count at which entries of released tasks are dropped next (doubles with the live ones).
    private var pruneAt = 64

    /// Records `task`'s `delivery` and body; returns `task`.
    func record<Made: URLSessionTask>(
        _ task: Made, _ delivery: BodyDelivery, uploadBody: URLTaskBody? = nil, bodyFromDelegate: Bool = false
    ) -> Made {
        let record = TaskFactoryRecord(delivery: delivery, uploadBody: uploadBody, bodyFromDelegate: bodyFromDelegate)
        lock.withLock {
            entries[task.taskIdentifier] = Entry(task: task, record: record)
            if entries.count >= pruneAt {
                entries = entries.filter { $0.value.task != nil }
                pruneAt = max(64, entries.count * 2)
            }
        }
        return task
    }

    /// The record of `task`; `nil` if no factory of this session made it (an async API's task).
    func record(for task: URLSessionTask) -> TaskFactoryRecord? {
        lock.withLock {
            guard let entry = entries[task.taskIdentifier], entry.task === task else { return nil }
            return entry.record
        }
    }
}
#endif
