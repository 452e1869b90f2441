extension LoopbackServer {
    /// Knobs for a server, fixed at creation so every connection thread sees the same values.
    public struct Configuration: Sendable {
        /// How many body bytes each `RecordedRequest.body` keeps (the length and SHA-256 always cover
        /// the whole body). Default 16 MiB.
        public var bodyRecordLimit: Int
        /// The largest request head (request line plus headers) accepted before answering 400. Default 64 KiB.
        public var maxHeadBytes: Int
        /// The `listen` backlog, large so bursts of hundreds of connections are not refused. Default 1024.
        public var listenBacklog: Int
        /// The port to listen on; 0, the default, lets the OS choose a free one. A fixed port lets a
        /// test stop a server and start another where the first was (a host that comes back).
        public var port: Int

        /// The defaults described on each property.
        public init(bodyRecordLimit: Int = 16 << 20, maxHeadBytes: Int = 64 << 10, listenBacklog: Int = 1024, port: Int = 0) {
            self.bodyRecordLimit = bodyRecordLimit
            self.maxHeadBytes = maxHeadBytes
            self.listenBacklog = listenBacklog
            self.port = port
        }
    }
}
