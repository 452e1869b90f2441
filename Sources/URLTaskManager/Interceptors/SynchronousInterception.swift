/// An interceptor that can often decide without suspending.
///
/// The pipeline then runs it on the thread that reached it instead of starting a Swift task for
/// it: one hop less per interceptor per task. Internal for now: ``HeaderInterceptor`` with fixed
/// values is the case the benchmarks measure.
protocol SynchronousInterception: URLTaskInterceptor {
    /// The command, or `nil` (leaving `task` untouched) when this task needs
    /// ``URLTaskInterceptor/intercept(_:context:)`` after all.
    func interceptWithoutSuspending(_ task: inout URLTask, context: InterceptContext) throws -> InterceptCommand?
}
