import Foundation
import URLTaskManager
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Sends identical requests that are in flight at the same time once: the others listen to that
/// one transfer, and each caller gets the answer as if its own request had been sent.
///
/// Put it anywhere in the manager's interceptors: it only marks the requests that pass it as
/// shareable (`ShareableTransfer`), and the manager shares at the very end, as a
/// request is about to leave, after every interceptor and every gate (`TransferSharing`
/// says what identical means, what is shared and what never is):
///
/// ```swift
/// let manager = URLTaskManager(interceptors: [BearerInterceptor(authenticator: auth), CoalescingInterceptor()],
///                              reactors: [OAuth2RefreshReactor(authenticator: auth)])
/// ```
///
/// It is built on the core's public API alone: a `TransferSharingInterceptor`
/// that marks every attempt passing it. A part of your own can share by other rules (only some
/// paths, only while a flag is set) the same way.
///
/// Each caller's events say whether it sent its request (`URLTaskEvent.Kind.sent`) or shared
/// another task's transfer (`URLTaskEvent.Kind.sharedTransfer`); this interceptor's own
/// ``events(bufferingNewest:)`` tell each transfer's story.
public final class CoalescingInterceptor: TransferSharingInterceptor, SynchronousInterceptor {
    /// Which requests are shared (`TransferSharing.Configuration`).
    public typealias Configuration = TransferSharing.Configuration
    /// What happened to shared transfers (`TransferSharing.Event`).
    public typealias Event = TransferSharing.Event

    /// The rules and events of the transfers this interceptor shares.
    public let transferSharing: TransferSharing

    /// Which requests are shared.
    public var configuration: Configuration { transferSharing.configuration }

    /// Shares requests as `configuration` says, in the manager it is given to.
    public init(configuration: Configuration = Configuration()) {
        self.transferSharing = TransferSharing(configuration: configuration)
    }

    /// Not needed any more: the manager finds its coalescing interceptor itself.
    @available(*, deprecated, message: "the manager wires its CoalescingInterceptor itself; remove this call")
    public func attach(to manager: URLTaskManager) {}

    /// A stream of what happened to shared transfers; it ends when the interceptor is released.
    public func events(bufferingNewest limit: Int = 1_000) -> AsyncStream<Event> {
        transferSharing.events(bufferingNewest: limit)
    }

    /// How many shareable transfers are on their way in the managers this interceptor belongs
    /// to (for tests and metrics): 0 once every one has ended.
    public var sharedRequestsInFlight: Int { transferSharing.sharedRequestsInFlight }

    /// Marks the request shareable and lets it go on.
    public func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand {
        task.attemptValues[ShareableTransfer.self] = true
        return .execute
    }

    /// Marks the request shareable without a Swift task: it never needs to wait.
    public func interceptWithoutSuspending(_ task: inout URLTask, context: InterceptContext) throws -> InterceptCommand? {
        task.attemptValues[ShareableTransfer.self] = true
        return .execute
    }
}
