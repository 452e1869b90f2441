import Foundation

/// The engine's sharing of identical transfers: identical requests in flight at the same time
/// are sent once, the others listen to that one transfer, and each caller gets the answer as if
/// its own request had been sent.
///
/// Sharing happens at the very end, as a request is about to leave, after every interceptor
/// (so a token, a tenant header or a per-request policy already decided what the request is)
/// and every gate (a refresh in progress, a connection slot). It is the engine's because only
/// the engine sees that moment. A part turns it on by conforming to
/// ``TransferSharingInterceptor`` (the manager finds it among its interceptors) and marking the
/// attempts that may share with ``ShareableTransfer``; `CoalescingInterceptor`, in the
/// `URLTaskResilience` module, is such a part and the one most apps want.
///
/// **What identical means.** Two requests share a transfer only when nothing a server could
/// tell apart differs: the method (one of ``Configuration/methods``; never a request with a
/// body), the URL (its user and password included), every header as it goes on the wire except
/// those of ``Configuration/headersThatNeverIdentifyACaller`` (trace context and request ids by
/// default), the request's own ``URLTaskPolicy``, and its cache policy and cookie handling. Not
/// its `timeoutInterval`, which says how long its caller waits, not what is sent (see "Only the
/// bytes are shared"). As it goes on the wire means with what the inner session adds: the cookies its
/// configuration's `httpCookieStorage` holds for the URL at the moment of the send (so two users
/// of one session whose stored cookies differ never share), the configuration's
/// `httpAdditionalHeaders`, and header names compared without case. So a different API key,
/// tenant, session cookie, `Range` or `If-None-Match` is a different request.
///
/// **Never shared.** A request whose wire headers cannot be known before it is sent goes out on
/// its own: one that names a header twice in different case (`X-Tenant` and `x-tenant`: the wire
/// carries one of the two), and, on Apple platforms, one that sets a `Cookie` of its own while the
/// storage holds cookies for its URL (how the loader combines them is not documented). A
/// credential the session's `urlCredentialStorage` answers a challenge with is no concern: a
/// challenge reaches each caller's task, and the request sent with the credential is that task's
/// own, with its own `Authorization`.
///
/// **Only the bytes are shared.** A request joins a transfer until it ends, as long as what came
/// so far is within ``Configuration/lateJoinLimit`` (a late one is handed that first); after
/// that, an identical request sends its own. Each caller's task stays an ordinary task to every
/// other part: its own policy, reactors (a 401 is refreshed for each and each is sent again with
/// the new token), response validation, events, cancellation and `timeoutInterval`: the transfer
/// is sent without a timeout of its own, and each caller, the sender included, is timed as the
/// inner session would time its own request; one whose time passes without progress leaves with
/// the same `URLError.timedOut` and the transfer goes on for the others. A part that counts what
/// is sent hears that a request joined instead
/// (``URLTaskOutcomeObserver/observeJoinedTransfer(of:)``: a rate limiter gives its token back).
/// The answer
/// streams to every listener as it arrives, whatever its size. A caller that cancels never stops
/// the transfer while another listens; the last one to leave stops it.
///
/// **Answers that must not be shared.** If the answer's `Vary` names a header whose value differs
/// between the request sent and a listener's (for example one of the ignored headers), or
/// `Vary: *`, or their credentials differ at all (`Authorization`, `Proxy-Authorization`,
/// `Cookie`, and any header ``Redaction/standard`` calls secret, such as `X-API-Key`; their keys
/// tell them apart, so this catches a cookie storage that changed between a request's key and
/// its send), that listener's own request is sent at once instead
/// (``Event/notShared(tasks:reason:)``).
///
/// **Its own transfer.** A part that must see the answer to its own request (a circuit breaker's
/// half-open probe) sets ``ExclusiveTransfer`` on the task: that request neither joins nor is
/// joined. A transfer is never shared across managers: their sessions, cookies and credentials
/// differ.
public final class TransferSharing: Sendable {
    /// Which requests are shared.
    public struct Configuration: Sendable {
        /// The methods whose requests are shared (upper case). A request with a body is never shared.
        public var methods: Set<String>
        /// Headers that never identify a caller, lower case: their values may differ between
        /// requests that share a transfer (the one sent carries its own). A name ending in `*`
        /// matches every header starting with what precedes it. Credentials (`Authorization`,
        /// `Cookie`, `Proxy-Authorization`, and every header ``Redaction/standard`` calls secret,
        /// such as `X-API-Key` or `X-Auth-Token`), `Range` and the `If-*` headers always tell
        /// requests apart, even if listed here or matched by a pattern such as `x-*`.
        public var headersThatNeverIdentifyACaller: Set<String>
        /// The most of an answer kept for identical requests that arrive after it began: such a
        /// request is handed what came so far, then the rest as it arrives. Once an answer is
        /// longer (or its `Content-Length` says it will be), later requests send their own; the
        /// ones already listening still get all of it. 0 shares only until the answer begins.
        public var lateJoinLimit: Int

        /// The headers ignored by default: W3C trace context and the usual request-id headers.
        public static let defaultHeadersThatNeverIdentifyACaller: Set<String> = [
            "traceparent", "tracestate", "baggage", "x-request-id", "request-id", "x-correlation-id",
        ]

        /// Shares GET and HEAD requests, told apart by every header but trace context and request
        /// ids, joinable until their answer passes 4 MiB.
        public init(
            methods: Set<String> = ["GET", "HEAD"],
            headersThatNeverIdentifyACaller: Set<String> = Configuration.defaultHeadersThatNeverIdentifyACaller,
            lateJoinLimit: Int = 4 << 20
        ) {
            self.methods = methods
            self.headersThatNeverIdentifyACaller = headersThatNeverIdentifyACaller
            self.lateJoinLimit = max(0, lateJoinLimit)
        }
    }

    /// What happened to shared transfers, for logs and tests (``events(bufferingNewest:)``).
    /// URLs carry no query; no header value is ever included.
    public enum Event: Sendable {
        /// `task` sent a shareable request; identical requests may join it until its answer begins.
        case started(task: URLTask.ID, method: String, url: URL?)
        /// `task` did not send its request: it listens to the transfer of an identical one.
        case joined(task: URLTask.ID, method: String, url: URL?)
        /// The transfer ended with an answer; each of `tasks` received it (`bodyBytes` each).
        case answered(tasks: [URLTask.ID], status: Int, bodyBytes: Int)
        /// The answer may not be shared with `tasks` (`reason`): each sent its own request.
        case notShared(tasks: [URLTask.ID], reason: String)
        /// The transfer failed; each of `tasks` received `error` (and its reactors judged it).
        case failed(tasks: [URLTask.ID], error: any Error)
        /// `task` stopped listening (cancelled, or its own `timeoutInterval` passed without
        /// progress); the transfer goes on if anyone still listens, and was stopped if
        /// `sharedCancelled`.
        case left(task: URLTask.ID, sharedCancelled: Bool)
    }

    /// Which requests are shared.
    public let configuration: Configuration
    private let decisions = DecisionEvents<Event>()
    private let managers = SharedTransfersDirectory()

    /// Shares requests as `configuration` says, in each manager whose interceptors include a
    /// ``TransferSharingInterceptor`` that returns this.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    /// A stream of what happened to shared transfers; it ends when this is released.
    public func events(bufferingNewest limit: Int = 1_000) -> AsyncStream<Event> {
        decisions.subscribe(bufferingNewest: limit)
    }

    /// How many shareable transfers are on their way in the managers this belongs to (for tests
    /// and metrics): 0 once every one has ended.
    public var sharedRequestsInFlight: Int { managers.transferCount }

    /// The sharing of one manager's transfers, made as the manager is; `cookies` is its inner
    /// session's cookie handling.
    func makeSharedTransfers(cookies: CookieJar, sessionTimeout: TimeInterval, runtime: any PipelineRuntime) -> SharedTransfers {
        let transfers = SharedTransfers(
            configuration: configuration, cookies: cookies, sessionTimeout: sessionTimeout, runtime: runtime, decisions: decisions)
        managers.add(transfers)
        return transfers
    }
}

/// An interceptor that turns on the engine's ``TransferSharing`` in the manager it is given to.
///
/// The manager asks each of its interceptors, once as it is made, whether it conforms; the first
/// that does decides the rules. Sharing then applies to the attempts marked with
/// ``ShareableTransfer`` (by this interceptor or any other part) that no part marked with
/// ``ExclusiveTransfer``.
public protocol TransferSharingInterceptor: URLTaskInterceptor {
    /// The rules and the event stream of this manager's shared transfers.
    var transferSharing: TransferSharing { get }
}

/// A key for ``URLTask/attemptValues``: `true` lets this attempt share its transfer with identical
/// requests in flight (``TransferSharing``), when the manager has a ``TransferSharingInterceptor``.
///
/// Set per attempt, so an interceptor decides afresh each time a task is sent again.
public enum ShareableTransfer: URLTaskValueKey {
    /// `true`: this attempt may share.
    public typealias Value = Bool
}

/// A key for ``URLTask/attemptValues``: `true` makes this attempt's request go out on its own,
/// never sharing a transfer with an identical request (``TransferSharing``), neither joining one
/// nor being joined; it wins over ``ShareableTransfer``.
///
/// For a part that must see the server's answer to its own request: a circuit breaker's
/// half-open probe, a health check, a request whose answer must not be anyone else's.
public enum ExclusiveTransfer: URLTaskValueKey {
    /// `true`: this attempt sends its own request.
    public typealias Value = Bool
}

/// The shared transfers of every manager a ``TransferSharing`` belongs to, held weakly.
private final class SharedTransfersDirectory: Sendable {
    private struct Entry {
        weak var transfers: SharedTransfers?
    }

    private let entries = LockedState<[Entry]>([])

    func add(_ transfers: SharedTransfers) {
        entries.withLock { entries in
            entries.removeAll { $0.transfers == nil }
            entries.append(Entry(transfers: transfers))
        }
    }

    var transferCount: Int {
        let live = entries.withLock { $0.compactMap(\.transfers) }
        return live.reduce(0) { $0 + $1.transferCount }
    }
}
