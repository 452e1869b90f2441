import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager

/// A session delegate that records every callback, per task, so a delegate-driven scenario can
/// be compared between a plain session and a manager's session.
// @unchecked Sendable: `records`, `latches` and the counters are guarded by `lock`.
package final class RecordingDelegate: NSObject, URLSessionDataDelegate, URLSessionDownloadDelegate, @unchecked Sendable {
    /// What to do with body bytes as they arrive.
    package struct BodyHandling: Sendable {
        /// Keep the bytes (for small bodies).
        package var keep = true
        /// Hash them incrementally (SHA-256).
        package var hash = true
        /// Spot-check each chunk (first, middle and last byte) against `GeneratedBody`'s
        /// pattern: catches shifted, dropped or duplicated ranges at almost no cost, so the
        /// delegate keeps up with the transfer (a slow delegate lets chunks pile up in the
        /// delegate queue, which would blur a memory measurement).
        package var spotCheckGenerated = false
        /// Simulates a consumer slower than the network: blocks the delegate queue for 1 ms
        /// after every this many chunks (the work a real app does with its data).
        package var pauseEveryChunks: Int?

        package static let keepAll = BodyHandling()
        /// For 100 MB bodies: hash, never hold.
        package static let hashOnly = BodyHandling(keep: false, hash: true)
        /// For memory measurements: spot-check against the pattern, never hold, never hash.
        package static let spotCheckOnly = BodyHandling(keep: false, hash: false, spotCheckGenerated: true)
        /// For flow-control measurements: spot-check, and 1 ms of work every 100 chunks.
        package static let slowConsumer = BodyHandling(keep: false, hash: false, spotCheckGenerated: true, pauseEveryChunks: 100)
        /// Far slower than loopback: 1 ms of work every other chunk.
        package static let verySlowConsumer = BodyHandling(keep: false, hash: false, spotCheckGenerated: true, pauseEveryChunks: 2)
    }

    package struct Record {
        package var response: URLResponse?
        package var responseCount = 0
        package var chunkCount = 0
        package var byteCount = 0
        package var body = Data()
        package var hasher = FastSHA256()
        package var firstMismatch: Int?
        package var completionCount = 0
        package var error: (any Error)?
        package var redirectCount = 0
        package var bodyStreamRequests = 0
        /// "<method> <realm> <previousFailureCount>" per challenge.
        package var challenges: [String] = []
        package var downloadedFile: Data?
        /// `totalBytesSent` of each `didSendBodyData`, in order.
        package var totalsSent: [Int64] = []
        /// The sum of each call's `bytesSent`.
        package var bytesSentSum: Int64 = 0
        /// `totalBytesExpectedToSend` of the last `didSendBodyData`.
        package var expectedToSend: Int64?
        /// Event names in order: "sent" (once per run of upload progress calls), "response",
        /// "data" (once per run of chunks), "redirect", "challenge", "needNewBodyStream",
        /// "download", "complete".
        package var events: [String] = []
    }

    package let handling: BodyHandling
    /// Called once, on the delegate queue, after the first body chunk of a task.
    package let onFirstData: (@Sendable (URLSessionDataTask) -> Void)?
    /// The answer to `didReceive response`.
    package let disposition: URLSession.ResponseDisposition
    /// Answers `needNewBodyStream` (for `uploadTask(withStreamedRequest:)`).
    package let bodyStream: (@Sendable () -> InputStream?)?
    /// Answers authentication challenges; nil means `.performDefaultHandling`.
    package let challenge: (@Sendable (URLAuthenticationChallenge) -> (URLSession.AuthChallengeDisposition, URLCredential?))?
    /// Answers redirects (the request to follow, or nil); nil follows the proposed request.
    package let redirect: (@Sendable (URLRequest) -> URLRequest?)?
    /// Fulfilled by `didBecomeInvalidWithError`.
    package let invalidated = Latch<Int>("didBecomeInvalidWithError")

    private let lock = NSLock()
    private var records: [Int: Record] = [:]
    private var latches: [Int: Latch<Void>] = [:]
    private var invalidationCount = 0
    private var order: [String] = []

    package init(
        handling: BodyHandling = .keepAll,
        disposition: URLSession.ResponseDisposition = .allow,
        bodyStream: (@Sendable () -> InputStream?)? = nil,
        challenge: (@Sendable (URLAuthenticationChallenge) -> (URLSession.AuthChallengeDisposition, URLCredential?))? = nil,
        redirect: (@Sendable (URLRequest) -> URLRequest?)? = nil,
        onFirstData: (@Sendable (URLSessionDataTask) -> Void)? = nil
    ) {
        self.challenge = challenge
        self.redirect = redirect
        self.handling = handling
        self.disposition = disposition
        self.bodyStream = bodyStream
        self.onFirstData = onFirstData
    }

    // MARK: Reading

    package func record(for task: URLSessionTask) -> Record {
        record(forIdentifier: task.taskIdentifier)
    }

    package func record(forIdentifier identifier: Int) -> Record {
        lock.withLock { records[identifier] ?? Record() }
    }

    /// Waits for `didCompleteWithError` of `task`.
    package func completion(of task: URLSessionTask, timeout: Duration = .seconds(30)) async throws {
        try await completion(ofIdentifier: task.taskIdentifier, timeout: timeout)
    }

    /// Waits for `didCompleteWithError` of the task with `identifier` (for tests that must not
    /// keep the task object).
    package func completion(ofIdentifier identifier: Int, timeout: Duration = .seconds(30)) async throws {
        try await latch(for: identifier).wait(timeout: timeout)
    }

    package var invalidations: Int { lock.withLock { invalidationCount } }

    /// Every task's record, in task-identifier order (for a per-task delegate, whose task the
    /// test never sees).
    package var allRecords: [Record] { lock.withLock { records.sorted { $0.key < $1.key }.map(\.value) } }

    /// Session-level events in order ("complete#<id>", "invalid").
    package var sessionEvents: [String] { lock.withLock { order } }

    /// The task's outcome, with the streamed body's length and hash.
    package func outcome(for task: URLSessionTask, side: Side) -> Outcome {
        outcome(forIdentifier: task.taskIdentifier, side: side)
    }

    package func outcome(forIdentifier identifier: Int, side: Side) -> Outcome {
        let record = record(forIdentifier: identifier)
        if let file = record.downloadedFile {
            return Outcome(side: side, data: file, response: record.response, error: record.error)
        }
        if handling.keep {
            return Outcome(side: side, data: record.body, response: record.response, error: record.error)
        }
        return Outcome(
            side: side, response: record.response, bodyLength: record.byteCount,
            bodySHA256: handling.hash ? record.hasher.hexDigest() : nil, error: record.error
        )
    }

    private func latch(for identifier: Int) -> Latch<Void> {
        lock.withLock {
            if let latch = latches[identifier] { return latch }
            let latch = Latch<Void>("didCompleteWithError of task \(identifier)")
            latches[identifier] = latch
            return latch
        }
    }

    private func update(_ task: URLSessionTask, _ change: (inout Record) -> Void) {
        lock.withLock { change(&records[task.taskIdentifier, default: Record()]) }
    }

    // MARK: URLSessionDataDelegate

    package func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
    ) {
        update(dataTask) {
            $0.response = response
            $0.responseCount += 1
            $0.events.append("response")
        }
        completionHandler(disposition)
    }

    package func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let first: Bool = lock.withLock {
            var record = records[dataTask.taskIdentifier, default: Record()]
            records[dataTask.taskIdentifier] = nil  // keep `body` uniquely referenced while appending
            let offset = record.byteCount
            record.chunkCount += 1
            record.byteCount += data.count
            if record.events.last != "data" { record.events.append("data") }
            if handling.keep { record.body.append(data) }
            if handling.hash { record.hasher.update(data) }
            if handling.spotCheckGenerated, record.firstMismatch == nil {
                record.firstMismatch = Self.firstMismatch(data, offset: offset)
            }
            records[dataTask.taskIdentifier] = record
            return record.chunkCount == 1
        }
        if let every = handling.pauseEveryChunks, record(for: dataTask).chunkCount % every == 0 {
            // The consumer's own work, not a wait for an event.
            Thread.sleep(forTimeInterval: 0.001)
        }
        if first { onFirstData?(dataTask) }
    }

    // MARK: URLSessionTaskDelegate

    package func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest,
        completionHandler: @escaping (URLRequest?) -> Void
    ) {
        update(task) {
            $0.redirectCount += 1
            $0.events.append("redirect")
        }
        completionHandler(redirect.map { $0(request) } ?? request)
    }

    package func urlSession(
        _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        let space = challenge.protectionSpace
        update(task) {
            $0.challenges.append("\(space.authenticationMethod) \(space.realm ?? "-") \(challenge.previousFailureCount)")
            $0.events.append("challenge")
        }
        let (disposition, credential) = self.challenge?(challenge) ?? (.performDefaultHandling, nil)
        completionHandler(disposition, credential)
    }

    package func urlSession(
        _ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64,
        totalBytesExpectedToSend: Int64
    ) {
        update(task) {
            $0.totalsSent.append(totalBytesSent)
            $0.bytesSentSum += bytesSent
            $0.expectedToSend = totalBytesExpectedToSend
            if $0.events.last != "sent" { $0.events.append("sent") }
        }
    }

    package func urlSession(
        _ session: URLSession, task: URLSessionTask, needNewBodyStream completionHandler: @escaping (InputStream?) -> Void
    ) {
        update(task) {
            $0.bodyStreamRequests += 1
            $0.events.append("needNewBodyStream")
        }
        completionHandler(bodyStream?())
    }

    package func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        update(task) {
            $0.completionCount += 1
            $0.error = error
            $0.events.append("complete")
            if $0.response == nil { $0.response = task.response }
        }
        lock.withLock { order.append("complete") }
        latch(for: task.taskIdentifier).fulfill(())
    }

    // MARK: URLSessionDownloadDelegate

    package func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        let contents = try? Data(contentsOf: location)
        update(downloadTask) {
            $0.downloadedFile = contents
            $0.events.append("download")
            $0.response = downloadTask.response
        }
    }

    // MARK: URLSessionDelegate

    package func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {
        let count: Int = lock.withLock {
            invalidationCount += 1
            order.append("invalid")
            return invalidationCount
        }
        invalidated.fulfill(count)
    }

    /// The stream position of the first of three sampled bytes of `data` (at stream position
    /// `offset`: its first, middle and last byte) that differs from `GeneratedBody`, or nil.
    package static func firstMismatch(_ data: Data, offset: Int) -> Int? {
        guard !data.isEmpty else { return nil }
        for index in [0, data.count / 2, data.count - 1] {
            let position = offset + index
            let expected = UInt8(truncatingIfNeeded: position % 251 + position >> 16)
            if data[data.startIndex + index] != expected { return position }
        }
        return nil
    }
}
