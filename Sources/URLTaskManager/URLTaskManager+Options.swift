extension URLTaskManager {
    /// The manager's own settings, separate from the `URLSessionConfiguration` it wraps.
    public struct Options: Sendable {
        /// The longest a task may wait in an interceptor's batch. A task held longer fails with
        /// ``URLTaskError/holdTimedOut(interceptor:after:)``: URLSession's own timeouts do not
        /// run while a task is held, so without this a forgotten batch would hang its callers.
        public var maximumHoldTime: Duration

        /// Creates options; every parameter has a sensible default.
        public init(maximumHoldTime: Duration = .seconds(60)) {
            self.maximumHoldTime = maximumHoldTime
        }

        /// The defaults: hold at most 60 seconds.
        public static var `default`: Options { Options() }
    }
}
