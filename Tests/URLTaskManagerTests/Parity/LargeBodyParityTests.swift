import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager
import XCTest
import TestSupport

/// Large bodies arrive intact through a manager, and a delegate-driven 100 MB response streams
/// through the bridge without being buffered.
final class LargeBodyParityTests: XCTestCase {
    private static let megabyte = 1 << 20
    private static let hundredMegabytes = 100 << 20
    private static let fiftyMegabytes = 50 << 20
    private static let fourHundredMegabytes = 400 << 20
    private static let fiftyMegabyteBody = Data(GeneratedBody.bytes(offset: 0, count: fiftyMegabytes))

    private var harness: ParityHarness!

    override func setUpWithError() throws {
        harness = try ParityHarness()
        harness.route("/1mb") { _, _ in ServerResponse(body: .generated(length: Self.megabyte)) }
        harness.route("/1mb-chunked") { _, _ in ServerResponse(body: .generated(length: Self.megabyte, chunkSize: 16 * 1024, chunked: true))
        }
        _ = Self.fiftyMegabyteBody.count  // made before any measurement
        harness.route("/50mb") { _, _ in
            // Made once: the server then writes as fast as loopback takes it, faster than the delegate reads.
            ServerResponse(headers: ["Content-Type": "application/octet-stream"], body: .data(Self.fiftyMegabyteBody))
        }
        harness.route("/100mb") { _, _ in
            ServerResponse(
                headers: ["Content-Type": "application/octet-stream"],
                body: .generated(length: Self.hundredMegabytes, chunkSize: 256 * 1024))
        }
        harness.route("/400mb") { _, _ in
            // Generated as it is written: the server never holds the body.
            ServerResponse(
                headers: ["Content-Type": "application/octet-stream"],
                body: .generated(length: Self.fourHundredMegabytes, chunkSize: 256 * 1024))
        }
    }

    override func tearDown() {
        harness.shutdown()
        harness = nil
    }

    /// Completion-handler and async tasks need the whole body in one piece (corelibs keeps only
    /// the last chunk otherwise): a chunked 1 MB body must not lose its first 1008 KB.
    func testOneMegabyte() async throws {
        let expected = GeneratedBody.sha256(length: Self.megabyte)
        for path in ["/1mb", "/1mb-chunked"] {
            let async = try await harness.both { client in await client.asyncData(URLRequest(url: client.url(path))) }
            XCTAssertParity(async, "1 MB \(path), async data(for:)")
            XCTAssertEqual(async.manager.bodyLength, Self.megabyte)
            XCTAssertEqual(async.manager.bodySHA256, expected)

            let completion = try await harness.both { client in try await client.completionData(URLRequest(url: client.url(path))) }
            XCTAssertParity(completion, "1 MB \(path), completion handler")
            XCTAssertEqual(completion.manager.bodySHA256, expected)
        }
    }

    /// 100 MB to a delegate that hashes incrementally (never holding the body).
    func testHundredMegabytesToDelegate() async throws {
        let result = try await harness.both { client in
            let delegate = RecordingDelegate(handling: .hashOnly)
            let (outcome, record, _) = try await client.delegateTask(delegate, timeout: .seconds(60)) {
                $0.dataTask(with: client.url("/100mb"))
            }
            XCTAssertGreaterThan(record.chunkCount, 100, "\(client.side): streamed, not delivered in one piece")
            return outcome
        }
        XCTAssertParity(result, "100 MB, delegate hashing incrementally")
        XCTAssertEqual(result.manager.bodyLength, Self.hundredMegabytes)
        // GeneratedBody.sha256(length:) computed with the fast hasher (see FastSHA256).
        let expectedSHA = FastSHA256.generatedBody(length: Self.hundredMegabytes)
        XCTAssertEqual(result.plain.bodySHA256, expectedSHA)
        XCTAssertEqual(result.manager.bodySHA256, expectedSHA)
    }

    /// The bridge streams a delegate-driven 100 MB response: the manager's peak growth stays
    /// within a plain session's + the streaming allowance, 28 MB here (before, its peak within
    /// 32 MB of plain's peak, a bound of its own; measured on a loaded 2-core machine, release,
    /// 2026-12-02: manager +13 to +21 MB against plain +3 to +6).
    func testHundredMegabytesStreamsWithoutBuffering() async throws {
        let (plain, manager) = try await peakGrowth(of: "/100mb", length: Self.hundredMegabytes, handling: .spotCheckOnly)
        ParityLog.record("100 MB delegate download, peak RSS growth", plain: "+\(plain.growth) MB", manager: "+\(manager.growth) MB")
        XCTAssertLessThanOrEqual(
            manager.growth, plain.growth + Self.streamingAllowance(for: Self.hundredMegabytes), "the manager buffered the body")
        XCTAssertLessThan(manager.growth, 64, "a 100 MB body must stream, not be held")
    }

    /// A delegate slower than loopback (1 ms of work every 100 chunks) must not make the bridge
    /// queue the body: each chunk reaches the delegate right after libcurl read it, as with a
    /// plain session (the transport's callbacks run on libcurl's own queue: see
    /// `CorelibsPlatform.runCallbacksOnWorkQueue`). 50 MB, every chunk checked against the
    /// pattern; peak RSS growth at most a plain session's + the streaming allowance, 22 MB here
    /// (queued behind the delegate it was +48 to +54 MB against +5 to +7; the bridge's own cost
    /// is about a ninth of the body, see the 400 MB tests; 0.2 had +16 MB flat, which a loaded
    /// CI run once exceeded: +36 MB).
    ///
    /// Issue 49 saw plain + 22 MB here under load, the allowance's edge. Not a buffer the bridge
    /// keeps: measured on a loaded 2-core machine (four busy processes beside, release,
    /// 2026-12-02, 6 rounds of plain, manager, plain, manager), the manager grew +9 to +14 MB
    /// every time, and plain +2 to +11 MB, the same plain moving by 9 MB from one run to the next
    /// as its delegate fell behind or did not. What moves is plain's side: the jitter allowance.
    func testFiftyMegabytesToASlowDelegateStayBounded() async throws {
        let (plain, manager) = try await peakGrowth(of: "/50mb", length: Self.fiftyMegabytes, handling: .slowConsumer)
        ParityLog.record("50 MB to a slow delegate, peak RSS growth", plain: "+\(plain.growth) MB", manager: "+\(manager.growth) MB")
        XCTAssertLessThanOrEqual(
            manager.growth, plain.growth + Self.streamingAllowance(for: Self.fiftyMegabytes),
            "the manager queued the body behind a slow delegate")
    }

    /// A delegate far slower than loopback (1 ms of work every other chunk): corelibs has no
    /// flow control (and its `suspend()` resends the request: `SuspendResumePinTests`), so a
    /// plain session queues what the delegate has not taken yet; the manager holds no more.
    ///
    /// How much a plain session queues depends on how far its delegate falls behind, so its
    /// figure moves from run to run (+48 to +50 MB usually, +31 MB once in a full-suite run
    /// while the manager's was +48). The bound is therefore the larger of plain's growth and one
    /// copy of the body, plus the jitter allowance (16 MB): a bridge that held a second copy (+100 MB) fails it either
    /// way. A bridge that queues where plain does not is caught by the slow-delegate test above,
    /// where plain queues little.
    func testFiftyMegabytesAtLoopbackSpeedToAVerySlowDelegate() async throws {
        let (plain, manager) = try await peakGrowth(of: "/50mb", length: Self.fiftyMegabytes, handling: .verySlowConsumer)
        ParityLog.record(
            "50 MB at loopback speed to a very slow delegate, peak RSS growth", plain: "+\(plain.growth) MB",
            manager: "+\(manager.growth) MB")
        let oneCopy = Self.fiftyMegabytes / Self.megabyte
        XCTAssertLessThanOrEqual(
            manager.growth, max(plain.growth, oneCopy) + Self.jitterAllowance,
            "the manager queued more than a plain session and more than one copy of the body (plain +\(plain.growth) MB)")
    }

    /// 400 MB to a delegate that keeps up: the manager's peak grows with the body, where a plain
    /// session's does not, and this pins how much (see "Streaming memory" in the Linux notes).
    ///
    /// The inner session's delegate callbacks run on libcurl's queue, so that each chunk reaches
    /// the outer task's client on the work queue right after it was read; what corelibs and
    /// libdispatch allocate per callback there is given back only when that queue stops
    /// draining, at the end of the transfer (the inner session alone, with the bridge dropping
    /// every chunk, grew +30 to +35 MB for 400 MB; with its callbacks on a thread of their own,
    /// as a plain session's, +5 MB). Measured, release build: +11/+12 MB for 50 MB, +26 to +33 for
    /// 200 MB, +40 to +52 for 400 MB against plain +1 to +14 (0.2.0: +66). The bound is plain's
    /// growth + the jitter allowance (16 MB) + an eighth of the body: a bridge that buffered the body (+400 MB) or held
    /// what a slow delegate has not taken yet fails it; the target (plain + 16 MB at any
    /// size) is not reached, for the reason above.
    func testFourHundredMegabytesToAFastDelegate() async throws {
        let (plain, manager) = try await peakGrowth(of: "/400mb", length: Self.fourHundredMegabytes, handling: .spotCheckOnly)
        ParityLog.record("400 MB to a fast delegate, peak RSS growth", plain: "+\(plain.growth) MB", manager: "+\(manager.growth) MB")
        XCTAssertLessThanOrEqual(
            manager.growth, plain.growth + Self.streamingAllowance(for: Self.fourHundredMegabytes),
            "the manager held more of a 400 MB body than the bridge's measured per-chunk cost (plain +\(plain.growth) MB)")
    }

    /// 400 MB to a delegate slower than loopback (1 ms of work every 100 chunks): the bound of
    /// ``testFourHundredMegabytesToAFastDelegate()``. Measured +40 to +50 MB against plain +11 to
    /// +14 (the delegate's own lag is in both figures).
    func testFourHundredMegabytesToASlowDelegate() async throws {
        let (plain, manager) = try await peakGrowth(of: "/400mb", length: Self.fourHundredMegabytes, handling: .slowConsumer)
        ParityLog.record("400 MB to a slow delegate, peak RSS growth", plain: "+\(plain.growth) MB", manager: "+\(manager.growth) MB")
        XCTAssertLessThanOrEqual(
            manager.growth, plain.growth + Self.streamingAllowance(for: Self.fourHundredMegabytes),
            "the manager queued a 400 MB body behind a slow delegate (plain +\(plain.growth) MB)")
    }

    /// How far a peak growth moves from one run to the next with nothing changed (MB): plain's
    /// own figure for 50 MB to a slow delegate spans +1 to +11 MB on a loaded 2-core machine
    /// (see ``testFiftyMegabytesToASlowDelegateStayBounded()``), and a loaded CI run once put
    /// 0.2's at +36 MB. The one allowance every test here that compares a peak growth with
    /// plain's adds; LinuxNotes, "Streaming memory", states it.
    private static let jitterAllowance = 16

    /// What the bridge may add to a plain session's peak growth (MB) while streaming `length`
    /// bytes: the jitter allowance and an eighth of the body (the measured slope is about a
    /// ninth: see ``testFourHundredMegabytesToAFastDelegate()``).
    private static func streamingAllowance(for length: Int) -> Int {
        jitterAllowance + length / 8 / megabyte
    }

    /// Streams `path` (`length` bytes of the generated pattern) to a delegate on each side and
    /// returns the peak resident set (KiB) and its growth (MB) over the transfer, after checking
    /// that every byte arrived, in order.
    private func peakGrowth(
        of path: String, length: Int, handling: RecordingDelegate.BodyHandling
    ) async throws -> (plain: (peak: Int, growth: Int), manager: (peak: Int, growth: Int)) {
        XCTAssertTrue(MemoryProbe.resetPeak(), "cannot reset VmHWM on this machine")
        var peaks: [Side: (base: Int, peak: Int)] = [:]
        for side in [Side.plain, .manager] {
            peaks[side] = try await harness.run(side) { client in
                let delegate = RecordingDelegate(handling: handling)
                let session = client.makeSession(delegate: delegate)
                // Warm up (connection, queues, first allocations) before measuring.
                try await client.barrier(session)
                MemoryProbe.resetPeak()
                let base = MemoryProbe.residentKiB ?? 0
                let task = session.dataTask(with: client.url(path))
                task.resume()
                try await delegate.completion(of: task, timeout: .seconds(180))
                let peak = MemoryProbe.peakKiB ?? 0
                let record = delegate.record(for: task)
                XCTAssertNil(record.error, "\(side)")
                XCTAssertEqual(record.byteCount, length, "\(side)")
                XCTAssertNil(record.firstMismatch, "\(side): byte \(record.firstMismatch ?? -1) differs from the generated pattern")
                XCTAssertGreaterThan(record.chunkCount, 100, "\(side)")
                return (base, peak)
            }
        }
        let plain = peaks[.plain]!
        let manager = peaks[.manager]!
        let figures = (plain: (plain.peak, (plain.peak - plain.base) / 1024), manager: (manager.peak, (manager.peak - manager.base) / 1024))
        if ParityLog.isVerbose {
            print(
                "MEMORY| \(length >> 20) MB delegate download (\(path)): plain peak \(plain.peak / 1024) MB (+\(figures.plain.1) MB); "
                    + "manager peak \(manager.peak / 1024) MB (+\(figures.manager.1) MB)")
        }
        return figures
    }
}
