import Foundation
import URLTaskManager

/// A manager's task events as they come (the events tests' collector), waited on with a deadline.
package final class EventCollector: @unchecked Sendable {  // `events` is guarded by `lock`.
    private let lock = NSLock()
    private var events: [URLTaskEvent] = []
    private var reader: Task<Void, Never>?

    package init(_ stream: AsyncStream<URLTaskEvent>) {
        reader = Task { [weak self] in
            for await event in stream { self?.lock.withLock { self?.events.append(event) } }
        }
    }

    deinit { reader?.cancel() }

    package var all: [URLTaskEvent] { lock.withLock { events } }

    package func waitForCompletions(_ count: Int) async throws {
        try await waitUntil("\(count) completed events") { all.filter(\.isCompletion).count >= count }
    }

    /// Returns once `condition` holds of the events so far; throws after 10 s.
    package func waitFor(_ what: String, _ condition: @escaping @Sendable ([URLTaskEvent]) -> Bool) async throws {
        try await TestSupport.waitUntil(what, timeout: .seconds(10)) { condition(self.all) }
    }
}

extension URLTaskEvent {
    package var isCompletion: Bool { if case .completed = kind { true } else { false } }
}
