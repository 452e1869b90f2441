import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import XCTest
@testable import URLTaskManager
import TestSupport

/// `manager.bytes(for:)` over loopback: the body streams intact, a reader slower than the
/// network costs disk rather than memory, a reader that leaves stops the transfer, and errors
/// reach the reader where the body breaks off.
final class ByteStreamTests: XCTestCase {
    private static let megabyte = 1 << 20
    private var server: LoopbackServer!

    override func setUpWithError() throws {
        server = try LoopbackServer()
        server.route("/8mb") { _ in ServerResponse(body: .generated(length: 8 * Self.megabyte, chunkSize: 64 * 1024)) }
        server.route("/64mb") { _ in ServerResponse(body: .generated(length: 64 * Self.megabyte, chunkSize: 256 * 1024)) }
        server.route("/404") { _ in ServerResponse(status: 404, body: .data(Data("missing".utf8))) }
    }

    override func tearDown() {
        server.shutdown()
        server = nil
    }

    /// Every byte, in order, a byte at a time and a piece at a time; the response comes first.
    func testTheBodyStreamsIntact() async throws {
        let manager = URLTaskManager(configuration: .ephemeral)
        defer { manager.invalidateAndCancel() }
        let (bytes, response) = try await manager.bytes(for: URLRequest(url: server.url("/8mb")))
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        let hasher = FastSHA256()
        var pending = [UInt8]()
        pending.reserveCapacity(64 * 1024)
        var count = 0
        for try await byte in bytes {
            pending.append(byte)
            count += 1
            if pending.count == 64 * 1024 {
                pending.withUnsafeBytes { hasher.update($0) }
                pending.removeAll(keepingCapacity: true)
            }
        }
        pending.withUnsafeBytes { hasher.update($0) }
        XCTAssertEqual(count, 8 * Self.megabyte)
        XCTAssertEqual(hasher.hexDigest(), FastSHA256.generatedBody(length: 8 * Self.megabyte))

        let (again, _) = try await manager.bytes(from: server.url("/8mb"))
        var chunks = 0
        var length = 0
        let pieces = FastSHA256()
        for try await chunk in again.chunks {
            chunks += 1
            length += chunk.count
            chunk.withUnsafeBytes { pieces.update($0) }
        }
        XCTAssertEqual(length, 8 * Self.megabyte)
        XCTAssertGreaterThan(chunks, 1, "streamed, not delivered in one piece")
        XCTAssertEqual(pieces.hexDigest(), FastSHA256.generatedBody(length: 8 * Self.megabyte))
    }

    /// A reader that takes nothing until the whole 64 MB body has arrived: at most 1 MiB of it
    /// waits in memory, the rest in the temporary file, and every byte is then read in order.
    func testAReaderSlowerThanTheNetworkCostsDiskNotMemory() async throws {
        let manager = URLTaskManager(configuration: .ephemeral)
        defer { manager.invalidateAndCancel() }
        let completions = EventCollector(manager.events())
        XCTAssertTrue(MemoryProbe.resetPeak(), "cannot reset VmHWM on this machine")
        let base = MemoryProbe.residentKiB ?? 0
        let (bytes, _) = try await manager.bytes(for: URLRequest(url: server.url("/64mb")))
        try await completions.waitFor("the transfer's end") { $0.contains(where: \.isCompletion) }
        let growth = ((MemoryProbe.peakKiB ?? 0) - base) / 1024
        printFigures("BYTES| 64 MB arrived before a byte was read: peak RSS +\(growth) MB")
        XCTAssertLessThan(growth, 24, "the unread body was held in memory")
        let hasher = FastSHA256()
        var length = 0
        for try await chunk in bytes.chunks {
            length += chunk.count
            chunk.withUnsafeBytes { hasher.update($0) }
        }
        XCTAssertEqual(length, 64 * Self.megabyte)
        XCTAssertEqual(hasher.hexDigest(), FastSHA256.generatedBody(length: 64 * Self.megabyte))
    }

    /// A reader that lets the sequence go after the first piece stops the transfer: the task
    /// completes as cancelled, long before the 64 MB could have arrived at a reader's pace.
    func testAReaderThatLeavesStopsTheTransfer() async throws {
        let manager = URLTaskManager(configuration: .ephemeral)
        defer { manager.invalidateAndCancel() }
        let completions = EventCollector(manager.events())
        do {
            let (bytes, _) = try await manager.bytes(for: URLRequest(url: server.url("/64mb")))
            var iterator = bytes.chunks.makeAsyncIterator()
            _ = try await iterator.next()
        }
        try await completions.waitFor("the task's end") { $0.contains(where: \.isCompletion) }
        let completion = completions.all.compactMap { event -> URLTaskEvent.Completion? in
            if case .completed(let completion) = event.kind { return completion }
            return nil
        }.first
        XCTAssertEqual((completion?.error as? URLError)?.code, .cancelled, "\(String(describing: completion))")
    }

    /// Cancelling the reading task throws `URLError.cancelled` from the sequence and stops the transfer.
    func testCancellingTheReaderThrowsCancelled() async throws {
        let manager = URLTaskManager(configuration: .ephemeral)
        defer { manager.invalidateAndCancel() }
        let started = Latch<Void>("reading started")
        let url = server.url("/8mb")
        let reader = Task {
            let (bytes, _) = try await manager.bytes(for: URLRequest(url: url))
            var iterator = bytes.makeAsyncIterator()
            _ = try await iterator.next()
            started.fulfill(())
            while try await iterator.next() != nil {
                try await Task.sleep(for: .milliseconds(1))  // a slow reader, to be cancelled midway
            }
        }
        try await started.wait(timeout: .seconds(20))
        reader.cancel()
        let result = await reader.result
        switch result {
        case .success: XCTFail("the reader read the whole body although cancelled")
        case .failure(let error):
            XCTAssertTrue((error as? URLError)?.code == .cancelled || error is CancellationError, "\(error)")
        }
    }

    /// Two tasks reading one body at once: the one that comes second is refused at once with
    /// ``URLTaskError/Code-swift.struct/alreadyBeingRead``, and the other reads the rest of the
    /// body as if it were alone. (Before: a trap, `ByteStreamStateMachine`'s "one consumer".)
    func testASecondReaderAtOnceIsRefusedAndTheFirstReadsOn() async throws {
        let first = Data("first;".utf8)
        let rest = Data(GeneratedBody.bytes(offset: 0, count: 200_000))
        // Nothing arrives for a second after the first part: both readers below start within
        // it and find nothing to read, so one of them waits while the other asks.
        server.route("/paused") { _ in
            ServerResponse(
                headers: ["Content-Length": "\(first.count + rest.count)"], body: .chunked([first, rest], chunkDelay: .seconds(1)))
        }
        let manager = URLTaskManager(configuration: .ephemeral)
        defer { manager.invalidateAndCancel() }
        let (bytes, _) = try await manager.bytes(for: URLRequest(url: server.url("/paused")))
        var head = Data()
        var iterator = bytes.chunks.makeAsyncIterator()
        while head.count < first.count, let chunk = try await iterator.next() { head.append(chunk) }
        XCTAssertEqual(head, first)

        let results = (0..<2).map { _ in Latch<Result<Data, any Error>>("a reader's end") }
        for latch in results {
            Task {
                var body = Data()
                do {
                    for try await chunk in bytes.chunks { body.append(chunk) }
                    latch.fulfill(.success(body))
                } catch {
                    latch.fulfill(.failure(error))
                }
            }
        }
        var bodies: [Data] = []
        var refusals: [URLTaskError] = []
        for latch in results {
            switch try await latch.wait(timeout: .seconds(20)) {
            case .success(let body): bodies.append(body)
            case .failure(let error as URLTaskError): refusals.append(error)
            case .failure(let error): XCTFail("a reader failed with \(error)")
            }
        }
        XCTAssertEqual(refusals.map(\.code), [.alreadyBeingRead], "exactly one reader is refused")
        XCTAssertEqual(bodies, [rest], "the other reads the rest of the body, whole")
    }

    /// A reader that holds an endless body without reading it: once the temporary file holds
    /// ``URLTaskManager/Options/maximumSpilledBodySize`` the transfer is stopped (the server
    /// sees the connection closed), and the reader then gets every byte that came before, in
    /// order, then ``URLTaskError/Code-swift.struct/spillLimitReached`` naming the limit.
    /// (Before: the file grew at the network's pace for as long as the reader waited.)
    func testAReaderThatFallsTooFarBehindGetsTheBodyUpToTheSpillLimitThenItsError() async throws {
        let limit = 4 * Self.megabyte
        let stopped = Latch<ServerResponse.SendOutcome>("the server seeing the client stop the transfer")
        server.route("/endless") { _ in
            ServerResponse(body: .generated(length: 1 << 40, chunkSize: 64 * 1024, chunked: true)).with {
                $0.onSent = { stopped.fulfill($0) }
            }
        }
        let manager = URLTaskManager(configuration: .ephemeral, options: URLTaskManager.Options(maximumSpilledBodySize: limit))
        defer { manager.invalidateAndCancel() }
        let completions = EventCollector(manager.events())
        let (bytes, _) = try await manager.bytes(for: URLRequest(url: server.url("/endless")))
        let outcome = try await stopped.wait(timeout: .seconds(30))
        XCTAssertFalse(outcome.completed)
        try await completions.waitFor("the transfer's end") { $0.contains(where: \.isCompletion) }
        let onDisk = bytes.reader.stream.spillFileSize
        printFigures("BYTES| spill limit 4 MiB, reader not reading: \(onDisk / 1024) KiB on disk, \(outcome.bodyBytesSent / 1024) KiB sent")
        XCTAssertGreaterThan(onDisk, 0, "nothing was spilled")
        XCTAssertLessThanOrEqual(onDisk, limit)

        let hasher = FastSHA256()
        var length = 0
        do {
            for try await chunk in bytes.chunks {
                length += chunk.count
                chunk.withUnsafeBytes { hasher.update($0) }
            }
            XCTFail("the body ended without an error after \(length) bytes: silently cut short")
        } catch let error as URLTaskError {
            XCTAssertEqual(error.code, .spillLimitReached)
            XCTAssertEqual(error.byteLimit, limit)
            XCTAssertTrue(error.description.contains("\(limit) bytes"), error.description)
        }
        // What memory and the file kept: the body's first bytes, in order, past the file's limit
        // (memory held up to 1 MiB more) and not past both.
        XCTAssertGreaterThanOrEqual(length, limit)
        XCTAssertLessThanOrEqual(length, limit + ByteStream.memoryLimit)
        XCTAssertEqual(hasher.hexDigest(), FastSHA256.generatedBody(length: length))
    }

    /// An error answer streams like any other; a transport error before the head is thrown by
    /// `bytes(for:)` itself.
    func testErrorsBeforeAndAfterTheHead() async throws {
        let manager = URLTaskManager(configuration: .ephemeral)
        defer { manager.invalidateAndCancel() }
        let (bytes, response) = try await manager.bytes(for: URLRequest(url: server.url("/404")))
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 404)
        var body = Data()
        for try await chunk in bytes.chunks { body.append(chunk) }
        XCTAssertEqual(String(decoding: body, as: UTF8.self), "missing")

        let dead = try ResilienceTestKit.deadURL("/nobody")
        do {
            _ = try await manager.bytes(for: URLRequest(url: dead))
            XCTFail("a refused connection gave a response")
        } catch let error as URLError {
            XCTAssertEqual(error.code, .cannotConnectToHost)
        }
    }
}
