/// What the bridge keeps of a started task: a way to cancel it.
protocol PipelineTaskHandle: Sendable {
    /// The caller cancelled. Returns immediately; the work happens off the calling queue.
    func cancel()
}
