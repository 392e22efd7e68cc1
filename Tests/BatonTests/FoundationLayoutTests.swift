import CBatonAtomics
import Dispatch
import Foundation
import XCTest

@testable import Baton

#if !canImport(Darwin)
/// Where Baton finds Foundation's queue records in an `Operation`: looked for once, then published
/// in one atomic word that every later read decodes (no lock per read, even under ThreadSanitizer).
final class FoundationLayoutTests: BatonTestCase {
    private typealias Layout = FoundationQueueState.Layout

    func testTheLayoutIsFoundAndPublishedInTheWordEveryReadDecodes() throws {
        let layout = try XCTUnwrap(Layout.shared, "Linux's Foundation keeps the records Baton reads")
        let word = baton_foundation_layout()
        XCTAssertEqual(word, layout.word)
        XCTAssertEqual(Layout(word: word), layout)
        // Four distinct fields of one object.
        let offsets = [layout.queueOffset, layout.stateOffset, layout.dependenciesOffset, layout.lockOffset]
        XCTAssertEqual(Set(offsets).count, 4, "\(offsets)")
    }

    func testAWordRoundTripsEveryOffsetItCanHold() {
        for offsets in [(0, 1, 2, 3), (32_767, 0, 32_767, 1), (8, 16, 24, 32_766), (1_000, 2_000, 3_000, 4_000)] {
            let layout = Layout(
                queueOffset: offsets.0, stateOffset: offsets.1, dependenciesOffset: offsets.2, lockOffset: offsets.3)
            let word = layout.word
            XCTAssertNotNil(word, "\(offsets)")
            XCTAssertNotEqual(word, 0, "0 means nobody has looked yet")
            XCTAssertNotEqual(word, Layout.absent)
            XCTAssertEqual(word.flatMap(Layout.init(word:)), layout, "\(offsets)")
        }
    }

    func testALayoutThatCannotBePublishedHasNoWordAndTheAbsentWordNoLayout() {
        XCTAssertNil(Layout(queueOffset: 32_768, stateOffset: 0, dependenciesOffset: 8, lockOffset: 16).word)
        XCTAssertNil(Layout(queueOffset: 0, stateOffset: -1, dependenciesOffset: 8, lockOffset: 16).word)
        XCTAssertNil(Layout(word: Layout.absent))
    }

    func testReadsFromManyThreadsAgree() {
        let expected = Layout.shared
        let disagreements = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 64) { _ in
            for _ in 0..<1_000 where Layout.shared != expected { disagreements.increment() }
        }
        XCTAssertEqual(disagreements.value, 0)
    }

    /// The first reads of a process race: many threads find the word unset at once, each looks, each
    /// publishes. Set back to "not looked for" before every trial (a reader that finds it so only
    /// looks again), the threads are let go together while operations with categories run through a
    /// queue: every read agrees, states read through it are right, and the word ends as it began.
    func testFirstReadsRacingFromManyThreadsAgreeWhileOperationsRun() throws {
        let expected = try XCTUnwrap(Layout.shared)
        let word = baton_foundation_layout()
        let wrong = Locked([String]())
        let suspended = OperationQueue()
        suspended.isSuspended = true
        let waiting = BlockOperation {}
        suspended.addOperation(waiting)
        let running = OperationQueue()
        for trial in 0..<200 {
            baton_publish_foundation_layout(0)
            let line = StartingLine()
            for reader in 0..<12 {
                line.thread {
                    if Layout.shared != expected { wrong.mutate { $0.append("trial \(trial) reader \(reader): layout") } }
                    if FoundationQueueState.of(waiting) != .waiting {
                        wrong.mutate { $0.append("trial \(trial) reader \(reader): waiting") }
                    }
                    if FoundationQueueState.of(BlockOperation {}) != FoundationQueueState.none {
                        wrong.mutate { $0.append("trial \(trial) reader \(reader): fresh") }
                    }
                }
            }
            let operations = (0..<4).map { _ in ImmediateOperation(.success(trial)) }
            for operation in operations { try operation.addExclusivity(OperationCategory("layout-race")) }
            line.thread { running.addOperations(operations, waitUntilFinished: false) }
            XCTAssertTrue(line.release(timeout: testTimeout), "trial \(trial)")
            for operation in operations { waitFinished(operation) }
            XCTAssertTrue(operations.allSatisfy { $0.outcome?.isSuccess == true }, "trial \(trial)")
        }
        suspended.isSuspended = false
        waitFinished(waiting)
        XCTAssertEqual(wrong.value, [])
        XCTAssertEqual(baton_foundation_layout(), word)
    }

    // MARK: - The queue's dispatch queue

    /// Read from Foundation's record of the queue (no lock of the queue's), it says what the getter
    /// says: none for a plain queue, the one set, and the main queue's.
    func testAQueuesOwnDispatchQueueReadsAsTheGetterSays() throws {
        let layout = try XCTUnwrap(FoundationQueueState.QueueLayout.shared, "Linux's Foundation keeps the record")
        XCTAssertEqual(baton_foundation_queue_layout(), layout.word)
        XCTAssertEqual(layout.word.flatMap(FoundationQueueState.QueueLayout.init(word:)), layout)
        XCTAssertNotEqual(layout.dispatchOffset, layout.mainOffset)
        let lane = DispatchQueue(label: "layout-tests.lane")
        let own = OperationQueue()
        own.underlyingQueue = lane
        withExtendedLifetime(lane) {
            XCTAssertNil(OperationQueue().ownDispatchQueue)
            XCTAssertTrue(own.ownDispatchQueue === lane)
            XCTAssertEqual(OperationQueue.main.ownDispatchQueue?.label, DispatchQueue.main.label)
            // A queue holding operations cannot change it; one emptied again can, and reads the change.
            own.underlyingQueue = nil
            XCTAssertNil(own.ownDispatchQueue)
        }
    }

    func testAQueueLayoutWordRoundTripsAndRefusesWhatItCannotHold() {
        for offsets in [(0, 1), (32_767, 8), (16, 32_766)] {
            let layout = FoundationQueueState.QueueLayout(dispatchOffset: offsets.0, mainOffset: offsets.1)
            XCTAssertEqual(layout.word.flatMap(FoundationQueueState.QueueLayout.init(word:)), layout, "\(offsets)")
        }
        XCTAssertNil(FoundationQueueState.QueueLayout(dispatchOffset: 32_768, mainOffset: 0).word)
        XCTAssertNil(FoundationQueueState.QueueLayout(word: FoundationQueueState.Layout.absent))
    }
}
#endif
