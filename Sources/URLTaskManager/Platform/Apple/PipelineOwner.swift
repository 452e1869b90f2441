#if !canImport(FoundationNetworking)
import Foundation
import ObjectiveC

/// Apple platforms: keeps a manager's pipeline alive for as long as its session, as an
/// associated object of the session, and retires the session's protocol class number with it.
final class PipelineOwner: NSObject {
    nonisolated(unsafe) private static var key: UInt8 = 0
    let pipeline: Pipeline
    let number: Int

    init(pipeline: Pipeline, number: Int) {
        self.pipeline = pipeline
        self.number = number
    }

    static func attach(_ owner: PipelineOwner, to session: URLSession) {
        objc_setAssociatedObject(session, &key, owner, .OBJC_ASSOCIATION_RETAIN_NONATOMIC)
    }

    deinit {
        BridgeRegistry.shared.unregister(number)
        pipeline.outerSessionReleased()
    }
}
#endif
