@testable import URLTaskManager

/// An interceptor that reports when it is deallocated, with the pipeline that owns it: the
/// event a lifetime test awaits.
final class ReleaseSentinel: URLTaskInterceptor {
    let onRelease: @Sendable () -> Void

    init(onRelease: @escaping @Sendable () -> Void) {
        self.onRelease = onRelease
    }

    deinit { onRelease() }

    func intercept(_ task: inout URLTask, context: InterceptContext) async throws -> InterceptCommand { .execute }
}
