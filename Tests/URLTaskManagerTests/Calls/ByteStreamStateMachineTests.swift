import Foundation
import XCTest
@testable import URLTaskManager

/// ``ByteStreamStateMachine`` alone, no I/O: memory first, then the spill, in order; one waiting
/// consumer woken by each event; the transfer stopped when the consumer leaves, at whatever point;
/// a second read while one is under way refused, the first unaffected; the spill bounded, with
/// the limit's error after what was kept.
final class ByteStreamStateMachineTests: XCTestCase {
    typealias Machine = ByteStreamStateMachine<Int>

    final class Handle: PipelineTaskHandle, Sendable {
        private let count = LockedState(0)
        var cancels: Int { count.withLock { $0 } }
        func cancel() { count.withLock { $0 += 1 } }
    }

    private func chunk(_ byte: UInt8, _ count: Int) -> Data { Data(repeating: byte, count: count) }

    private func expectChunk(_ action: Machine.NextAction, _ expected: Data, file: StaticString = #filePath, line: UInt = #line) {
        guard case .chunk(let data) = action else { return XCTFail("expected a chunk, got \(action)", file: file, line: line) }
        XCTAssertEqual(data, expected, file: file, line: line)
    }

    func testChunksWaitInMemoryUpToTheLimitThenInTheSpillInOrder() {
        var machine = Machine(memoryLimit: 10, readSize: 4)
        guard case .none = machine.received(chunk(1, 6)) else { return XCTFail("the first chunk fits in memory") }
        guard case .spill(let second, let offset) = machine.received(chunk(2, 6)) else { return XCTFail("past the limit: the spill") }
        XCTAssertEqual(second, chunk(2, 6))
        XCTAssertEqual(offset, 0)
        guard case .none = machine.spillWritten(.success(6)) else { return XCTFail("nobody waits") }
        // While the spill has unread bytes, even a small chunk goes after them.
        guard case .spill(_, let next) = machine.received(chunk(3, 1)) else { return XCTFail("order: after the spilled bytes") }
        XCTAssertEqual(next, 6)
        _ = machine.spillWritten(.success(1))

        expectChunk(machine.next(), chunk(1, 6))
        guard case .readSpill(0, 4) = machine.next() else { return XCTFail("then the spill, a read's size at a time") }
        machine.spillRead(count: 4)
        guard case .readSpill(4, 3) = machine.next() else { return XCTFail("the rest of the spill") }
        machine.spillRead(count: 3)
        // The spill was read to its end: memory again, and the file is written from its start.
        guard case .none = machine.received(chunk(4, 2)) else { return XCTFail("memory again") }
        expectChunk(machine.next(), chunk(4, 2))
        _ = machine.received(chunk(5, 9))
        guard case .spill(_, 0) = machine.received(chunk(6, 2)) else { return XCTFail("the next spill starts at the file's start") }
    }

    func testAChunkLargerThanTheLimitOnAnEmptyBufferStaysInMemory() {
        var machine = Machine(memoryLimit: 4)
        guard case .none = machine.received(chunk(1, 9)) else { return XCTFail("kept") }
        expectChunk(machine.next(), chunk(1, 9))
    }

    func testAWaitingConsumerIsHandedTheNextChunkOrTheEnd() {
        var machine = Machine(memoryLimit: 10)
        guard case .mustWait = machine.next() else { return XCTFail("nothing yet") }
        guard case .waiting = machine.wait(7) else { return XCTFail("waits") }
        guard case .deliver(7, let data) = machine.received(chunk(1, 3)) else { return XCTFail("handed straight over") }
        XCTAssertEqual(data, chunk(1, 3))
        guard case .mustWait = machine.next() else { return XCTFail("nothing yet") }
        guard case .waiting = machine.wait(8) else { return XCTFail("waits") }
        guard case .wake(8, .end(nil)) = machine.ended(nil) else { return XCTFail("woken with the end") }
        guard case .end(nil) = machine.next() else { return XCTFail("and the end stays") }
    }

    func testTheTransfersErrorComesAfterWhatWasBuffered() {
        var machine = Machine(memoryLimit: 10)
        _ = machine.received(chunk(1, 2))
        guard case .none = machine.ended(URLError(.networkConnectionLost)) else { return XCTFail("nobody waits") }
        expectChunk(machine.next(), chunk(1, 2))
        guard case .end(let error?) = machine.next() else { return XCTFail("then the error") }
        XCTAssertEqual((error as? URLError)?.code, .networkConnectionLost)
    }

    func testAConsumerWaitingOnASpillWriteIsToldToAskAgain() {
        var machine = Machine(memoryLimit: 2)
        _ = machine.received(chunk(1, 2))
        guard case .spill = machine.received(chunk(2, 2)) else { return XCTFail("spilled") }
        expectChunk(machine.next(), chunk(1, 2))
        guard case .mustWait = machine.next() else { return XCTFail("the write is not done") }
        guard case .waiting = machine.wait(3) else { return XCTFail("waits") }
        guard case .wake(3, .retry) = machine.spillWritten(.success(2)) else { return XCTFail("told to ask again") }
        guard case .readSpill(0, 2) = machine.retry() else { return XCTFail("reads what was written, as the same read") }
    }

    func testAFailedSpillWriteEndsTheBodyAndStopsTheTransfer() {
        var machine = Machine(memoryLimit: 2)
        let handle = Handle()
        XCTAssertNil(machine.attach(handle))
        _ = machine.received(chunk(1, 2))
        _ = machine.received(chunk(2, 2))
        guard case .fail(nil, _, let stop?) = machine.spillWritten(.failure(CocoaError(.fileWriteOutOfSpace))) else {
            return XCTFail("the transfer is stopped")
        }
        XCTAssertTrue((stop as AnyObject) === handle)
        expectChunk(machine.next(), chunk(1, 2))
        guard case .end(let error?) = machine.next() else { return XCTFail("then the write's error") }
        XCTAssertEqual((error as? CocoaError)?.code, .fileWriteOutOfSpace)
    }

    func testAConsumerThatLeavesStopsARunningTransferOnce() {
        var machine = Machine(memoryLimit: 10)
        let handle = Handle()
        XCTAssertNil(machine.attach(handle))
        guard case .mustWait = machine.next() else { return XCTFail("nothing yet") }
        guard case .waiting = machine.wait(1) else { return XCTFail("waits") }
        guard case .close(let stop?, 1) = machine.consumerLeft() else { return XCTFail("stopped, and the waiting consumer woken") }
        XCTAssertTrue((stop as AnyObject) === handle)
        guard case .none = machine.consumerLeft() else { return XCTFail("once") }
        guard case .none = machine.received(chunk(1, 1)) else { return XCTFail("nothing kept after") }
    }

    func testAConsumerThatLeavesBeforeTheHandleStopsItWhenItArrives() {
        var machine = Machine(memoryLimit: 10)
        guard case .close(nil, nil) = machine.consumerLeft() else { return XCTFail("nothing to stop yet") }
        let handle = Handle()
        XCTAssertTrue((machine.attach(handle) as AnyObject?) === handle, "stopped as it arrives")
    }

    func testNothingIsStoppedAfterTheTransferEnded() {
        var machine = Machine(memoryLimit: 10)
        XCTAssertNil(machine.attach(Handle()))
        _ = machine.ended(nil)
        guard case .close(nil, nil) = machine.consumerLeft() else { return XCTFail("nothing to stop") }
        guard case .end(nil) = machine.next() else { return XCTFail("closed") }
    }

    // MARK: One read at a time

    func testASecondReadWhileOneWaitsIsRefusedAndTheWaitingReadIsHandedTheNextChunk() {
        var machine = Machine(memoryLimit: 10)
        let handle = Handle()
        XCTAssertNil(machine.attach(handle))
        guard case .mustWait = machine.next() else { return XCTFail("nothing yet") }
        guard case .waiting = machine.wait(1) else { return XCTFail("the first read waits") }
        guard case .alreadyBeingRead = machine.next() else { return XCTFail("a second read is refused") }
        guard case .alreadyBeingRead = machine.next(cancelled: true) else {
            return XCTFail("a cancelled second reader is refused too: its task is not the reader's")
        }
        XCTAssertEqual(handle.cancels, 0, "the refused reads stop nothing")
        guard case .deliver(1, let data) = machine.received(chunk(1, 3)) else { return XCTFail("the first read is handed the chunk") }
        XCTAssertEqual(data, chunk(1, 3))
        // The read ended: another task may read now (one at a time, not one task for ever).
        _ = machine.received(chunk(2, 2))
        expectChunk(machine.next(), chunk(2, 2))
    }

    func testASecondReadBetweenTheFirstsMustWaitAndItsWaitIsRefused() {
        var machine = Machine(memoryLimit: 10)
        guard case .mustWait = machine.next() else { return XCTFail("nothing yet") }
        // The first read has not handed its continuation over yet.
        guard case .alreadyBeingRead = machine.next() else { return XCTFail("refused in that window too") }
        guard case .waiting = machine.wait(1) else { return XCTFail("the first read waits as if alone") }
        guard case .wake(1, .end(nil)) = machine.ended(nil) else { return XCTFail("and is woken with the end") }
        guard case .end(nil) = machine.next() else { return XCTFail("the read ended: the next one is answered") }
    }

    func testASecondReadWhileTheFirstReadsTheSpillIsRefused() {
        var machine = Machine(memoryLimit: 2)
        _ = machine.received(chunk(1, 2))
        guard case .spill(_, 0) = machine.received(chunk(2, 2)) else { return XCTFail("spilled") }
        _ = machine.spillWritten(.success(2))
        expectChunk(machine.next(), chunk(1, 2))
        guard case .readSpill(0, 2) = machine.next() else { return XCTFail("the spill") }
        guard case .alreadyBeingRead = machine.next() else { return XCTFail("refused while the spill is read") }
        machine.spillRead(count: 2)
        guard case .mustWait = machine.next() else { return XCTFail("the spill read ended the read") }
    }

    func testAReadWokenToAskAgainIsStillTheOneUnderWay() {
        var machine = Machine(memoryLimit: 2)
        _ = machine.received(chunk(1, 2))
        guard case .spill = machine.received(chunk(2, 2)) else { return XCTFail("spilled") }
        expectChunk(machine.next(), chunk(1, 2))
        guard case .mustWait = machine.next() else { return XCTFail("the write is not done") }
        guard case .waiting = machine.wait(1) else { return XCTFail("waits") }
        guard case .wake(1, .retry) = machine.spillWritten(.success(2)) else { return XCTFail("told to ask again") }
        guard case .alreadyBeingRead = machine.next() else { return XCTFail("another read before it asks again is refused") }
        guard case .readSpill(0, 2) = machine.retry() else { return XCTFail("the woken read goes on") }
    }

    func testACancelledReaderLeavesAndStopsTheTransfer() {
        var machine = Machine(memoryLimit: 10)
        let handle = Handle()
        XCTAssertNil(machine.attach(handle))
        _ = machine.received(chunk(1, 1))
        guard case .left(.close(let stop?, nil)) = machine.next(cancelled: true) else { return XCTFail("the reader left") }
        XCTAssertTrue((stop as AnyObject) === handle)
        guard case .end(nil) = machine.next() else { return XCTFail("nothing is kept") }
    }

    // MARK: The spill's limit

    func testTheSpillHoldsAtMostItsLimitUnreadThenTheBodyEndsWithTheLimitsError() {
        var machine = Machine(memoryLimit: 2, spillLimit: 5)
        let handle = Handle()
        XCTAssertNil(machine.attach(handle))
        _ = machine.received(chunk(1, 2))
        guard case .spill(_, 0) = machine.received(chunk(2, 3)) else { return XCTFail("spilled") }
        _ = machine.spillWritten(.success(3))
        guard case .spill(_, 3) = machine.received(chunk(3, 2)) else { return XCTFail("5 bytes unread: at the limit, not past it") }
        _ = machine.spillWritten(.success(2))
        guard case .limitReached(let stop?) = machine.received(chunk(4, 1)) else { return XCTFail("one byte more is past it") }
        XCTAssertTrue((stop as AnyObject) === handle, "the transfer is stopped")
        guard case .none = machine.received(chunk(5, 1)) else { return XCTFail("nothing is kept after the limit") }
        guard case .none = machine.ended(URLError(.cancelled)) else { return XCTFail("the stopped transfer's end") }

        // Everything before the limit, in order, then the limit's error (not the cancellation).
        expectChunk(machine.next(), chunk(1, 2))
        guard case .readSpill(0, 5) = machine.next() else { return XCTFail("the spill, whole") }
        machine.spillRead(count: 5)
        guard case .end(let error?) = machine.next() else { return XCTFail("then the limit's error") }
        XCTAssertEqual((error as? URLTaskError)?.code, .spillLimitReached)
        XCTAssertEqual((error as? URLTaskError)?.byteLimit, 5)
    }

    func testTheLimitCountsWhatIsUnreadNotWhatWasWritten() {
        var machine = Machine(memoryLimit: 1, spillLimit: 4, readSize: 2)
        _ = machine.received(chunk(1, 1))
        guard case .spill(_, 0) = machine.received(chunk(2, 4)) else { return XCTFail("spilled up to the limit") }
        _ = machine.spillWritten(.success(4))
        expectChunk(machine.next(), chunk(1, 1))
        guard case .readSpill(0, 2) = machine.next() else { return XCTFail("half the spill") }
        machine.spillRead(count: 2)
        // 2 unread: 2 more fit though 6 will have been written (the file reuses what was read).
        guard case .spill(_, 4) = machine.received(chunk(3, 2)) else { return XCTFail("fits: 4 unread") }
        _ = machine.spillWritten(.success(2))
        guard case .limitReached = machine.received(chunk(4, 1)) else { return XCTFail("5 unread would pass it") }
    }

    func testWithASpillLimitOfZeroNothingIsSpilled() {
        var machine = Machine(memoryLimit: 2, spillLimit: 0)
        _ = machine.received(chunk(1, 2))
        guard case .limitReached(nil) = machine.received(chunk(2, 1)) else { return XCTFail("the body ends once memory is full") }
        let handle = Handle()
        XCTAssertTrue((machine.attach(handle) as AnyObject?) === handle, "a transfer whose handle comes later is stopped as it arrives")
        expectChunk(machine.next(), chunk(1, 2))
        guard case .end(let error?) = machine.next() else { return XCTFail("then the error") }
        XCTAssertEqual((error as? URLTaskError)?.byteLimit, 0)
    }

    func testTheDefaultSpillLimitIs256MiB() {
        XCTAssertEqual(URLTaskManager.Options.default.maximumSpilledBodySize, 256 << 20)
        XCTAssertEqual(URLTaskManager.Options().maximumSpilledBodySize, 256 << 20)
    }
}
