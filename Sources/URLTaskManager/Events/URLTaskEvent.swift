import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One thing that happened to a task on its way through a manager, for logs and metrics.
///
/// Subscribe with ``URLTaskManager/events(bufferingNewest:)``. The events of one task arrive in
/// order, from `created` to `completed`, exactly once each where they apply; they tell what
/// corelibs' `URLSessionTaskMetrics` never delivers on Linux (time to first byte, time spent in
/// each phase). Events carry no secret: no header value, no body, and URLs without their
/// query or user info. The one exception is what your own code adds with
/// ``URLTask/annotate(_:_:)`` (``Kind/annotated(name:value:)``).
public struct URLTaskEvent: Sendable, CustomStringConvertible {
    /// The task it happened to (stable across attempts: ``URLTask/id``).
    public let task: URLTask.ID
    /// When it happened.
    public let date: Date
    /// What happened.
    public let kind: Kind

    /// What happened.
    public enum Kind: Sendable {
        /// The caller's task reached the manager.
        case created(method: String, url: URL?)
        /// An interceptor answered (the name of its type; the command: `execute`, `hold`,
        /// `release`, `fail`, `respond`, or `threw`).
        case intercepted(interceptor: String, command: String)
        /// The task waits in an interceptor's batch.
        case held(interceptor: String)
        /// The batch it waited in was released.
        case released(interceptor: String)
        /// The task waits before it can be sent.
        case waiting(for: Wait)
        /// The request went to the network: the attempt, and per reactor that keeps one, the
        /// credential version its headers were decided under (a number, never a token).
        case sent(attempt: Int, credentialVersions: [String: Int])
        /// The request was not sent: an identical one, sent by task `of`, was already on its way,
        /// and this task's answer is that transfer's (`CoalescingInterceptor`). Its response
        /// head, bytes and completion follow as for a request it sent itself.
        case sharedTransfer(of: URLTask.ID, attempt: Int)
        /// The response head arrived, this long after the request was sent.
        case responseHead(status: Int, timeToFirstByte: Duration)
        /// A reactor took the outcome; `run` is its shared run the task waits on (`nil` when
        /// the task was requeued or answered at once, or the reactor runs per task).
        case reacted(reactor: String, run: Int?)
        /// The task goes through the pipeline again, as attempt `attempt`.
        case requeued(attempt: Int)
        /// A redirect is being followed, through the pipeline.
        case redirected(status: Int, to: URL?)
        /// The caller got its answer.
        case completed(Completion)
        /// A download task made with the session's own download APIs, which on Linux cannot pass
        /// through the pipeline: every interceptor left its request as it was, and corelibs sends it
        /// itself (`true`; the pipeline sees nothing more of it, so no `completed` follows), or one
        /// would have changed it and the task fails with ``URLTaskError/Code-swift.struct/downloadNeedsPipeline``
        /// (`false`, then `completed`).
        case nativeDownload(sentUnchanged: Bool)
        /// An interceptor or reactor added a fact about the task with ``URLTask/annotate(_:_:)``:
        /// a trace id, a `curl` command. Its value is what that code put there.
        case annotated(name: String, value: String)
    }

    /// What a task waits for before it is sent.
    public enum Wait: Sendable {
        /// A reactor's run (a token refresh) that holds new tasks.
        case reactorGate(reactor: String)
        /// A connection slot for its host (``URLTaskManager/Options/maximumRequestsInFlightPerHost``).
        case connectionSlot(host: String)
    }

    /// How a task ended.
    public struct Completion: Sendable {
        /// The status the caller got, or `nil` if it got an error.
        public let status: Int?
        /// The error the caller got, if any.
        public let error: (any Error)?
        /// How many times the request was sent.
        public let attempts: Int
        /// Request body bytes sent, over every attempt (`nil` when a body's length was unknown:
        /// a stream).
        public let bytesSent: Int64?
        /// Response body bytes received, over every attempt, a followed redirect's body included.
        /// (Where corelibs reads a redirect's body and hands none of it over, a GET through
        /// ``URLTaskManager/data(for:)``, it counts as the redirect's `Content-Length`.)
        public let bytesReceived: Int64
        /// Where the time went.
        public let phases: Phases
    }

    /// Where a task's time went, from `created` to `completed`.
    public struct Phases: Sendable {
        /// Before the first send: interceptors, batches, gates, connection slots.
        public let beforeFirstSend: Duration
        /// On the network, every attempt.
        public let transfer: Duration
        /// Waiting for reactors' work (a refresh, a retry's backoff).
        public let reacting: Duration
        /// The whole task.
        public let total: Duration
    }

    /// One log line, without secrets.
    public var description: String {
        "task \(task) " + kind.description
    }
}

extension URLTaskEvent.Kind: CustomStringConvertible {
    public var description: String {
        switch self {
        case .created(let method, let url): return "created \(method) \(url?.absoluteString ?? "-")"
        case .intercepted(let interceptor, let command): return "\(interceptor): \(command)"
        case .held(let interceptor): return "held by \(interceptor)"
        case .released(let interceptor): return "released by \(interceptor)"
        case .waiting(.reactorGate(let reactor)): return "waiting for \(reactor)"
        case .waiting(.connectionSlot(let host)): return "waiting for a connection to \(host)"
        case .sent(let attempt, let versions):
            let stamped = versions.sorted { $0.key < $1.key }.map { " \($0.key) v\($0.value)" }.joined()
            return "sent attempt \(attempt)" + stamped
        case .sharedTransfer(let leader, let attempt): return "attempt \(attempt) shares the transfer of task \(leader)"
        case .responseHead(let status, let ttfb):
            return "response \(status) after \(ttfb.formatted(.units(allowed: [.milliseconds], fractionalPart: .show(length: 1))))"
        case .reacted(let reactor, let run): return "\(reactor) reacts" + (run.map { " (run \($0))" } ?? "")
        case .requeued(let attempt): return "requeued as attempt \(attempt)"
        case .redirected(let status, let url): return "\(status) redirect to \(url?.absoluteString ?? "-")"
        case .annotated(let name, let value): return "\(name): \(value)"
        case .nativeDownload(let sentUnchanged):
            return sentUnchanged ? "download sent by URLSession itself, unchanged" : "download refused: use manager.download(for:)"
        case .completed(let completion):
            let outcome = completion.status.map { "\($0)" } ?? "error \(completion.error.map(Self.describe) ?? "-")"
            let ms: (Duration) -> String = { $0.formatted(.units(allowed: [.milliseconds], fractionalPart: .show(length: 1))) }
            return
                "completed \(outcome) in \(ms(completion.phases.total)) (\(completion.attempts) attempt(s), \(completion.bytesSent.map(String.init) ?? "?") B sent, \(completion.bytesReceived) B received; before sending \(ms(completion.phases.beforeFirstSend)), transfer \(ms(completion.phases.transfer)), reacting \(ms(completion.phases.reacting)))"
        }
    }
}

extension URLTaskEvent.Kind {
    /// An error as the `completed` line shows it: a `URLError` by code and meaning, a
    /// ``URLTaskError`` by code and component, anything else by its type (an app's own error
    /// may hold anything, and events never carry a secret).
    static func describe(_ error: any Error) -> String {
        if let error = error as? URLTaskError {
            return "URLTaskError \(error.code)" + (error.component.map { " (\($0.name))" } ?? "")
        }
        if let error = error as? URLError {
            let url = URLTaskEvent.redacted(error.failingURL).map { " at \($0.absoluteString)" } ?? ""
            return "URLError \(error.code.rawValue) (\(error.code.meaning))\(url)"
        }
        return String(describing: type(of: error))
    }
}

extension URLTaskEvent {
    /// `url` without its query, fragment or user info (where a token could hide), and with its
    /// secret path parameters (`;jsessionid=`) redacted: ``Redaction/standard``'s location.
    static func redacted(_ url: URL?) -> URL? {
        Redaction.standard.location(of: url)
    }
}
