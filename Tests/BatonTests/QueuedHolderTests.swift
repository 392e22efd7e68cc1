import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Claims in a queue with a width limit (a serial queue, a group with `maxConcurrentOperationCount`).
/// A Baton entry point (a group's launch) granted a child its categories before adding it to the
/// group's queue, where it then waited for a worker: the category was held by an operation that was
/// not executing, and when the group's running child waited for another claimant of it, nothing ran
/// again (stop 57). Now a Baton entry point passes a gate outside the queue only in a queue without a
/// width limit. (An operation granted as a serial queue reads it can still wait there behind the
/// running one while it holds: see `Docs/Conditions.md`.)
final class QueuedHolderTests: BatonTestCase {

    // MARK: - Operations

    /// The shape of the first defect: a serial group launches its children at once, the second
    /// claiming x; the first waits (without blocking) for an operation elsewhere that claims x. The
    /// second used to hold x while waiting in the group's queue for the first to end.
    func testASerialGroupsLaterChildDoesNotHoldItsCategoryWhileTheFirstWaitsForAClaimant() throws {
        for _ in 0..<50 {
            let category = OperationCategory("x", in: ExclusivityScope("serial-group-\(UUID())"))
            let (outsider, first) = try waitingForOutsider(claiming: category)
            let second = try claiming(category, name: "second")
            let group = GroupOperation(operations: [first, second], maxConcurrentOperationCount: 1)
            OperationQueue().addOperation(group)
            waitFinished(group)
            // The outsider's outcome observers (which finish `first`) run before it reads finished.
            waitFinished(outsider)
            XCTAssertTrue(second.isFinished)
        }
        XCTAssertTrue(Gatekeeper.isIdle)
    }

    /// Operations contending for one category on a queue one wide and in a group two wide all finish,
    /// one executing at a time.
    func testContentionInsideOneWidthLimitedQueueFinishes() throws {
        let category = OperationCategory("x", in: ExclusivityScope("contention-\(UUID())"))
        let executing = Locked(0)
        let most = Locked(0)
        func operations(_ count: Int) throws -> [AsyncBlockOperation] {
            try (0..<count).map { _ in
                let operation = AsyncBlockOperation { operation in
                    let now = executing.mutate { value -> Int in
                        value += 1
                        return value
                    }
                    most.mutate { $0 = Swift.max($0, now) }
                    executing.mutate { $0 -= 1 }
                    operation.finish()
                }
                try operation.addExclusivity(category)
                return operation
            }
        }
        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        let plain = try operations(1_000)
        serial.addOperations(plain, waitUntilFinished: false)
        let group = GroupOperation(operations: try operations(1_000), maxConcurrentOperationCount: 2)
        OperationQueue().addOperation(group)
        for operation in plain { waitFinished(operation) }
        waitFinished(group)
        XCTAssertEqual(most.value, 1)
        XCTAssertTrue(Gatekeeper.isIdle)
    }

    /// Baton's launch on queues whose limit counts as none (`Int.max`, `Int32.max`, -1) passes gates
    /// outside and runs every claimant; on a queue of width 0, which runs nothing, a claimant holds
    /// nothing until the queue is given a worker.
    func testALaunchOnWidthsThatCountAsNoneOrZero() throws {
        for width in [Int.max, Int(Int32.max), -1] {
            let x = OperationCategory("x", in: ExclusivityScope("odd-\(width)-\(UUID())"))
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = width
            let ops = try (0..<200).map { _ -> AsyncBlockOperation in
                let op = AsyncBlockOperation { $0.finish() }
                try op.addExclusivity(x)
                try op.claim()
                return op
            }
            queue.launch(ops)
            for op in ops { waitFinished(op) }
        }
        let zero = OperationQueue()
        zero.maxConcurrentOperationCount = 0
        let x = OperationCategory("x", in: ExclusivityScope("zero-\(UUID())"))
        let op = AsyncBlockOperation { $0.finish() }
        try op.addExclusivity(x)
        try op.claim()
        zero.launch(op)
        XCTAssertTrue(eventually(timeout: 1) { Gatekeeper.isIdle }, "width 0: it must hold nothing while it cannot run")
        zero.maxConcurrentOperationCount = 1
        waitFinished(op)
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    // MARK: - Helpers

    private func claiming(_ category: OperationCategory, name: String) throws -> AsyncBlockOperation {
        let operation = AsyncBlockOperation { $0.finish() }
        operation.name = name
        try operation.addExclusivity(category)
        return operation
    }

    /// An operation that claims `category`, and one that adds it to a queue without a width limit and
    /// finishes once it has finished.
    private func waitingForOutsider(
        claiming category: OperationCategory
    ) throws -> (outsider: AsyncBlockOperation, first: AsyncBlockOperation) {
        let outsider = try claiming(category, name: "outsider")
        let queue = OperationQueue()
        let first = AsyncBlockOperation { operation in
            outsider.onFinish { _ in operation.finish() }
            queue.addOperation(outsider)
        }
        first.name = "first"
        return (outsider, first)
    }
}
