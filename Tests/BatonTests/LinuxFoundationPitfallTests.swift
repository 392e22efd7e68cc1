import Dispatch
import Foundation
import XCTest

@testable import Baton

/// One test (or a pointer to one) for each Linux Foundation fact in `shared/DESIGN.md`, showing that
/// Baton is immune to it.
///
/// | Foundation on Linux | Baton's answer | test |
/// | --- | --- | --- |
/// | not-ready operations in a queue cost O(N²) | a chain enqueues one stage at a time | `OperationQueueChainingTests.testAChainNeverHoldsMoreThanOneStageInTheQueue` (and the benchmark) |
/// | dependents are held unretained | the handle holds every operation until the chain is done | `testAChainWhoseEveryReferenceIsDroppedStillRuns` |
/// | releasing ~40,000 dependent operations overflows the stack | chains drop finished edges | `OperationQueueChainingTests.testALongChainRunsAndIsReleasedWithoutRecursion` |
/// | announcing isFinished before the queue started it crashes | `cancel()` and `finish()` before start never announce | `testCancelAndFinishBeforeStartOnAQueue` |
/// | a cancelled operation added behind a barrier deadlocks | cancelled operations are started, never enqueued | `testACancelledStageBehindAPendingBarrierDoesNotDeadlock` |
/// | completion blocks are never cleared (captures leak) | Baton's wrappers put the user's block back | `testCompletionBlocksAreRestored` |
/// | a cancelled dependency counts as finished | the dependency policy | `DependencyPolicyTests` |
/// | `waitUntilFinished`, `NSLock.lock()` unavailable in async code | `waitForOutcome()`, `value()` | `ConcurrencyTests` |
/// | `isAsynchronous` is never read; `queue.progress` ignores `start()` overrides | Baton finishes by KVO; composites report their own `Progress` | `testProgressDoesNotDependOnTheQueue` |
final class LinuxFoundationPitfallTests: BatonTestCase {
    func testAChainWhoseEveryReferenceIsDroppedStillRuns() throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let finished = Gate()
        let freed = Gate()
        try inScope {
            let handle = try queue.addChain([
                ResultBlockOperation<Int> { $0.finish(with: 1) }, TrackedOperation(freed: freed), BlockOperation {},
            ])
            handle.onFinish { _ in finished.open() }
        }
        queue.isSuspended = false
        finished.wait()
        freed.wait()
    }

    func testCancelAndFinishBeforeStartOnAQueue() {
        let queue = OperationQueue()
        queue.isSuspended = true
        let cancelled = ManualOperation()
        cancelled.cancel()
        let early = ManualOperation()
        early.finish(with: 3)
        queue.addOperations([cancelled, early], waitUntilFinished: false)
        XCTAssertFalse(cancelled.isFinished)
        XCTAssertFalse(early.isFinished)
        queue.isSuspended = false
        drain(queue)
        XCTAssertTrue(cancelled.outcome?.isCancelled == true)
        XCTAssertEqual(early.output, 3)
        XCTAssertEqual(cancelled.executions.value + early.executions.value, 0)
    }

    func testACancelledStageBehindAPendingBarrierDoesNotDeadlock() throws {
        let queue = OperationQueue()
        let blocker = ManualOperation(name: "blocker")
        queue.addOperation(blocker)
        blocker.started.wait()
        queue.addBarrierBlock {}
        let cancelled = ResultBlockOperation<Int> { $0.finish(with: 1) }
        cancelled.cancel()
        let handle = try queue.addChain([cancelled, TransformBlockOperation<Int, Int> { $0.finish(with: $0.input!) }])
        blocker.finish(with: 0)
        XCTAssertTrue(try handle.waitToOutcome(timeout: testTimeout).isCancelled)
    }

    func testCompletionBlocksAreRestored() throws {
        // Without a block of its own, the operation ends with none: Baton's wrapper (which holds the
        // chain) is gone before the chain reports that it finished.
        let bare = BlockOperation {}
        let finished = Gate()
        let handle = try OperationQueue().addChain([ResultBlockOperation<Int> { $0.finish(with: 1) }, bare])
        handle.onFinish { _ in finished.open() }
        finished.wait()
        XCTAssertNil(bare.completionBlock)

        // With one, that block runs once and is back in place.
        let block = BlockOperation {}
        let runs = Locked(0)
        let ran = Gate()
        block.completionBlock = {
            runs.increment()
            ran.open()
        }
        let second = try OperationQueue().addChain([ResultBlockOperation<Int> { $0.finish(with: 1) }, block])
        XCTAssertTrue(try second.waitToOutcome(timeout: testTimeout).isSuccess)
        ran.wait()
        XCTAssertEqual(runs.value, 1)
        block.completionBlock?()
        XCTAssertEqual(runs.value, 2, "the user's block is back")
    }

    func testProgressDoesNotDependOnTheQueue() {
        let group = finished(GroupOperation(operations: (0..<10).map { _ in AsyncBlockOperation { $0.finish() } }))
        XCTAssertEqual(group.progress.completedUnitCount, 10)
        XCTAssertFalse(group.isAsynchronous == false)
    }

    /// A Foundation operation's completion block set after it finished never runs: the suite's
    /// `waitFinished` returns at once for one that has (it waited out its whole timeout before, and a
    /// test that raced a finish failed with "gate not opened").
    func testWaitingForAFoundationOperationThatHasFinishedReturnsAtOnce() {
        let operation = BlockOperation {}
        operation.start()
        XCTAssertTrue(operation.isFinished)
        // Fails with "gate not opened" if the helper waits for a block that will never run.
        waitFinished(operation)
    }
}
