import Foundation

extension URLTask {
    /// Adds a fact about this task to its events: a ``URLTaskEvent/Kind/annotated(name:value:)``
    /// event, in order with the task's other events. For what the manager cannot know and an
    /// interceptor or reactor does: a trace id (``TraceContextInterceptor``), a `curl` command
    /// (``CURLDescriptionInterceptor``), a cache decision.
    ///
    /// `value` is evaluated only when someone reads the manager's
    /// ``URLTaskManager/events(bufferingNewest:)`` and the task started while they did; otherwise
    /// this costs one dictionary look-up. A task made with ``URLTask/init(request:body:attempt:)``
    /// (a test without a manager) has no events: nothing happens.
    ///
    /// The manager's own events carry no secret; an annotation carries what you put in it, so
    /// never put a token, a password or a body you would not log.
    public func annotate(_ name: String, _ value: @autoclosure () -> String) {
        guard let recorder = TaskEventRecorderDirectory.shared.recorder(of: id) else { return }
        recorder.annotated(name: name, value: value())
    }
}

extension URLTask {
    /// Adds a fact about this attempt to the task's events once, and only if, its request is
    /// really sent: for what describes the request on the wire (a `curl` command, a trace
    /// span). An attempt that never leaves (it fails, is answered locally, waits at a refresh
    /// and is intercepted again, or shares an identical request's transfer) adds nothing, so a
    /// log holds exactly one such line per request sent.
    ///
    /// `value` is evaluated only when the task is observed (see ``annotate(_:_:)``).
    public mutating func annotateWhenSent(_ name: String, _ value: @autoclosure () -> String) {
        guard TaskEventRecorderDirectory.shared.recorder(of: id) != nil else { return }
        annotationsWhenSent.append((name, value()))
    }
}

/// The event recorders of the tasks whose events someone listens to now, by task id, so that
/// ``URLTask/annotate(_:_:)`` reaches a task's events from an interceptor, which holds only the
/// task's value.
///
/// A recorder registers itself when it is made and leaves when it is freed; only recorded tasks
/// (started while someone listened) are here.
final class TaskEventRecorderDirectory: Sendable {
    static let shared = TaskEventRecorderDirectory()

    private struct Entry {
        weak var recorder: TaskEventRecorder?
    }

    private let recorders = LockedState<[URLTask.ID: Entry]>([:])

    func register(_ recorder: TaskEventRecorder, for id: URLTask.ID) {
        recorders.withLock { $0[id] = Entry(recorder: recorder) }
    }

    func remove(_ id: URLTask.ID) {
        _ = recorders.withLock { $0.removeValue(forKey: id) }
    }

    func recorder(of id: URLTask.ID) -> TaskEventRecorder? {
        recorders.withLock { $0[id]?.recorder }
    }

    /// Whether `id` still has an entry: for tests that check nothing is left behind.
    func hasEntry(for id: URLTask.ID) -> Bool {
        recorders.withLock { $0[id] != nil }
    }
}
