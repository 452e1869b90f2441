#if canImport(FoundationNetworking)
import Dispatch
import Foundation
import FoundationNetworking

/// The session a manager hands out on swift-corelibs-foundation: an ordinary `URLSession` that
/// owns its manager's pipeline.
///
/// Invalidating it, whether through the manager or directly, ends the pipeline as it ends the
/// session: `invalidateAndCancel()` cancels held tasks and the inner transfers,
/// `finishTasksAndInvalidate()` lets every task it accepted finish, then releases the inner
/// session. Released without invalidation, it releases the pipeline too (no task of it can be
/// running then: a running task keeps its session).
// @unchecked Sendable: restated from URLSession (its state is confined to its work queue); adds immutable `let`s, a locked record store, and fields written in init (or by a test before the first task).
final class ManagedURLSession: URLSession, @unchecked Sendable {
    let pipeline: Pipeline
    /// The number of this session's protocol class (``BridgeClasses``), retired with the session.
    let number: Int
    /// corelibs' work queue of this session, found once: `Platform.facts` reads it for every task.
    /// (Named apart from corelibs' own `workQueue`, which the reflection below looks for.)
    private(set) var foundWorkQueue: DispatchQueue?
    /// The reader of corelibs' task registry of this session, found once; its contents are read
    /// only on the work queue. `nil` (not found): every task's body is buffered and the async
    /// APIs' per-task delegates are not called (see `Platform.facts`). Tests replace it before
    /// the session's first task to force the fallbacks (`CorelibsReadFallbackTests`).
    var registryReader: TaskRegistryReader?

    init(
        configuration: URLSessionConfiguration, delegate: (any URLSessionDelegate)?, delegateQueue: OperationQueue?, pipeline: Pipeline,
        number: Int
    ) {
        self.pipeline = pipeline
        self.number = number
        super.init(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue)
        foundWorkQueue = CorelibsPlatform.workQueue(of: self)
        registryReader = TaskRegistryReader(session: self)
    }

    /// How each task made by this session's open factories reports, and the upload body it was
    /// given: read in `startLoading` instead of corelibs' internals.
    let factoryRecords = TaskFactoryRecords()
    /// corelibs' name of the field where a task keeps its upload body (`knownBody`), read only
    /// for the uploads of the async APIs. Tests rename it before the first task to force the
    /// fallback: such an upload then fails with ``URLTaskError/uploadBodyUnavailable``.
    var uploadBodyField = "knownBody"

    deinit {
        BridgeRegistry.shared.unregister(number)
        pipeline.outerSessionReleased()
    }

    // The open task factories (URLSession.swift:422-507): each records what it was asked for.
    // The async APIs make their tasks through an internal factory that none of these sees.

    override func dataTask(with request: URLRequest) -> URLSessionDataTask {
        factoryRecords.record(super.dataTask(with: request), .stream)
    }

    override func dataTask(with url: URL) -> URLSessionDataTask {
        factoryRecords.record(super.dataTask(with: url), .stream)
    }

    override func dataTask(
        with request: URLRequest, completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    ) -> URLSessionDataTask {
        factoryRecords.record(super.dataTask(with: request, completionHandler: completionHandler), .buffer)
    }

    override func dataTask(
        with url: URL, completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    ) -> URLSessionDataTask {
        factoryRecords.record(super.dataTask(with: url, completionHandler: completionHandler), .buffer)
    }

    override func uploadTask(with request: URLRequest, fromFile fileURL: URL) -> URLSessionUploadTask {
        factoryRecords.record(super.uploadTask(with: request, fromFile: fileURL), .stream, uploadBody: .file(fileURL))
    }

    override func uploadTask(with request: URLRequest, from bodyData: Data) -> URLSessionUploadTask {
        factoryRecords.record(super.uploadTask(with: request, from: bodyData), .stream, uploadBody: .data(bodyData))
    }

    override func uploadTask(withStreamedRequest request: URLRequest) -> URLSessionUploadTask {
        factoryRecords.record(super.uploadTask(withStreamedRequest: request), .stream, bodyFromDelegate: true)
    }

    override func uploadTask(
        with request: URLRequest, fromFile fileURL: URL,
        completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    ) -> URLSessionUploadTask {
        factoryRecords.record(
            super.uploadTask(with: request, fromFile: fileURL, completionHandler: completionHandler), .buffer, uploadBody: .file(fileURL))
    }

    override func uploadTask(
        with request: URLRequest, from bodyData: Data?, completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    ) -> URLSessionUploadTask {
        factoryRecords.record(
            super.uploadTask(with: request, from: bodyData, completionHandler: completionHandler), .buffer,
            uploadBody: bodyData.map { .data($0) })
    }

    override func downloadTask(with request: URLRequest) -> URLSessionDownloadTask {
        factoryRecords.record(super.downloadTask(with: request), .stream)
    }

    override func downloadTask(with url: URL) -> URLSessionDownloadTask {
        factoryRecords.record(super.downloadTask(with: url), .stream)
    }

    override func downloadTask(
        with request: URLRequest, completionHandler: @escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void
    ) -> URLSessionDownloadTask {
        factoryRecords.record(super.downloadTask(with: request, completionHandler: completionHandler), .buffer)
    }

    override func downloadTask(
        with url: URL, completionHandler: @escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void
    ) -> URLSessionDownloadTask {
        factoryRecords.record(super.downloadTask(with: url, completionHandler: completionHandler), .buffer)
    }

    override func finishTasksAndInvalidate() {
        super.finishTasksAndInvalidate()
        pipeline.outerSessionFinishing(self)
    }

    override func invalidateAndCancel() {
        // The pipeline's lifecycle first: nothing more is sent, and the transfers of the tasks
        // the session then cancels (each reaches `stopLoading`) are abandoned rather than
        // cancelled one by one. Held tasks fail only after corelibs' call returns: it reads its
        // task registry on this thread (URLSession.swift:331-337) while the work queue removes
        // the tasks that complete, so the pipeline completes none of its own meanwhile (a task
        // ending on its own then is as exposed as with a plain session).
        let cancel = pipeline.cancelRequested()
        super.invalidateAndCancel()
        pipeline.cancelHeldTasks(cancel)
    }
}
#endif
