import XCTest
@testable import URLTaskManager

/// ``SharedTransferStateMachine`` driven event by event: no I/O.
final class SharedTransferStateMachineTests: XCTestCase {
    typealias Machine = SharedTransferStateMachine<String>

    private func subscriber(_ n: UInt64) -> Machine.Subscriber { Machine.Subscriber(rawValue: n) }
    private func transfer(_ n: UInt64) -> Machine.Transfer { Machine.Transfer(rawValue: n) }

    func testFirstLeadsLaterIdenticalJoinUntilTheAnswerBegins() {
        var machine = Machine()
        let (a, b, c, d) = (subscriber(1), subscriber(2), subscriber(3), subscriber(4))
        XCTAssertEqual(machine.arrived(a, key: "k"), .lead(transfer(1)))
        XCTAssertEqual(machine.arrived(b, key: "k"), .join(transfer(1), replay: false), "joins while the inner task is created")
        XCTAssertEqual(machine.started(transfer(1)), .none)
        XCTAssertEqual(machine.arrived(c, key: "other"), .lead(transfer(2)), "another key never joins")
        XCTAssertEqual(machine.answerBegan(transfer(1), replayable: false), [a, b])
        XCTAssertEqual(machine.arrived(d, key: "k"), .lead(transfer(3)), "after an unreplayable head, an identical request sends its own")
        XCTAssertEqual(machine.completed(transfer(1)), [a, b])
        XCTAssertEqual(machine.completed(transfer(1)), [], "a transfer completes once")
        XCTAssertEqual(machine.left(a, of: transfer(1)), .none, "a subscriber of an ended transfer is gone")
        XCTAssertEqual(machine.transferCount, 2)
    }

    func testOnlyTheLastToLeaveStopsTheTransfer() {
        var machine = Machine()
        let (a, b) = (subscriber(1), subscriber(2))
        _ = machine.arrived(a, key: "k")
        _ = machine.started(transfer(1))
        _ = machine.arrived(b, key: "k")
        XCTAssertEqual(machine.left(a, of: transfer(1)), .left, "the sender leaving never stops the others' transfer")
        XCTAssertEqual(machine.answerBegan(transfer(1), replayable: false), [b])
        XCTAssertEqual(machine.left(b, of: transfer(1)), .cancelTransfer)
        XCTAssertEqual(machine.completed(transfer(1)), [], "the stopped transfer's end reaches nobody")
        XCTAssertEqual(machine.arrived(subscriber(3), key: "k"), .lead(transfer(2)))
    }

    func testEveryoneLeavingBeforeTheInnerTaskExistsStopsItAsItStarts() {
        var machine = Machine()
        let (a, b) = (subscriber(1), subscriber(2))
        _ = machine.arrived(a, key: "k")
        _ = machine.arrived(b, key: "k")
        XCTAssertEqual(machine.left(a, of: transfer(1)), .left)
        XCTAssertEqual(machine.left(b, of: transfer(1)), .left, "no inner task to stop yet")
        XCTAssertEqual(machine.arrived(subscriber(3), key: "k"), .lead(transfer(2)), "an abandoned transfer is not joined")
        XCTAssertEqual(machine.started(transfer(1)), .cancel)
        XCTAssertEqual(machine.completed(transfer(1)), [])
    }

    func testAFailureBeforeTheHeadReachesEveryListenerAndEndsJoining() {
        var machine = Machine()
        let (a, b) = (subscriber(1), subscriber(2))
        _ = machine.arrived(a, key: "k")
        _ = machine.started(transfer(1))
        _ = machine.arrived(b, key: "k")
        XCTAssertEqual(machine.completed(transfer(1)), [a, b])
        XCTAssertEqual(machine.arrived(subscriber(3), key: "k"), .lead(transfer(2)))
    }
}

extension SharedTransferStateMachineTests {
    func testAnAnswerThatBeginsBeforeTheCreationIsReportedIsStillStoppedByTheLastToLeave() {
        var machine = Machine()
        let a = subscriber(1)
        _ = machine.arrived(a, key: "k")
        XCTAssertEqual(machine.answerBegan(transfer(1), replayable: false), [a], "the head may come before `started`")
        XCTAssertEqual(machine.left(a, of: transfer(1)), .left, "no inner task known yet")
        XCTAssertEqual(machine.started(transfer(1)), .cancel, "stopped as its creation is reported")

        let b = subscriber(2)
        _ = machine.arrived(b, key: "k")
        _ = machine.answerBegan(transfer(2), replayable: false)
        XCTAssertEqual(machine.started(transfer(2)), .none)
        XCTAssertEqual(machine.left(b, of: transfer(2)), .cancelTransfer)
    }

    func testATransferThatEndsBeforeItsCreationIsReportedIsNotStopped() {
        var machine = Machine()
        let a = subscriber(1)
        _ = machine.arrived(a, key: "k")
        _ = machine.answerBegan(transfer(1), replayable: false)
        XCTAssertEqual(machine.completed(transfer(1)), [a])
        XCTAssertEqual(machine.started(transfer(1)), .none, "an ended transfer is not cancelled")
        XCTAssertEqual(machine.transferCount, 0)
    }
}

extension SharedTransferStateMachineTests {
    func testALateRequestJoinsAReplayableAnswerUntilItStopsBeingKept() {
        var machine = Machine()
        let (a, b, c) = (subscriber(1), subscriber(2), subscriber(3))
        _ = machine.arrived(a, key: "k")
        _ = machine.started(transfer(1))
        XCTAssertEqual(machine.answerBegan(transfer(1), replayable: true), [a])
        XCTAssertTrue(machine.isReplayable(transfer(1)))
        XCTAssertEqual(machine.arrived(b, key: "k"), .join(transfer(1), replay: true), "handed what came so far")
        machine.stopReplaying(transfer(1))
        XCTAssertFalse(machine.isReplayable(transfer(1)))
        XCTAssertEqual(machine.arrived(c, key: "k"), .lead(transfer(2)), "too long to keep: it sends its own")
        XCTAssertEqual(machine.completed(transfer(1)), [a, b], "the listeners get all of it")
    }

    func testEveryoneLeavingAReplayableAnswerStopsItAndNobodyJoinsIt() {
        var machine = Machine()
        let a = subscriber(1)
        _ = machine.arrived(a, key: "k")
        _ = machine.started(transfer(1))
        _ = machine.answerBegan(transfer(1), replayable: true)
        XCTAssertEqual(machine.left(a, of: transfer(1)), .cancelTransfer)
        XCTAssertEqual(machine.arrived(subscriber(2), key: "k"), .lead(transfer(2)))
    }
}

extension SharedTransferStateMachineTests {
    /// The configuration's header patterns as the key applies them: names without case, a
    /// trailing `*` as a prefix, and credentials, `Range` and `If-*` never ignored.
    func testSharingRulesIgnoreOnlyWhatTheConfigurationListsAndNeverACredential() {
        let rules = SharingRules(
            .init(headersThatNeverIdentifyACaller: ["X-Request-Id", "x-trace-*", "Authorization", "If-*", "range"]))
        XCTAssertTrue(rules.ignoresHeader("x-request-id"))
        XCTAssertTrue(rules.ignoresHeader("x-trace-span"))
        XCTAssertFalse(rules.ignoresHeader("x-trace"), "the prefix is `x-trace-`")
        XCTAssertFalse(rules.ignoresHeader("x-api-key"))
        XCTAssertFalse(rules.ignoresHeader("authorization"), "never, even when listed")
        XCTAssertFalse(rules.ignoresHeader("if-none-match"))
        XCTAssertFalse(rules.ignoresHeader("range"))
        XCTAssertEqual(rules.methods, ["GET", "HEAD"])
    }
}
