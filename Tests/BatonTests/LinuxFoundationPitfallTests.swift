import Dispatch
import Foundation
import XCTest
@testable import Baton

/// One test (or a pointer to one) for each Linux Foundation fact in `shared/DESIGN.md`, showing that
/// Baton is immune to it.
///
/// | Foundation on Linux | Baton's answer | test |
/// | --- | --- | --- |
/// | not-ready operations in a queue cost O(N²) | a chain enqueues one stage at a time | `testAChainKeepsAtMostOneStageInTheQueue` (and the benchmark) |
/// | dependents are held unretained | the handle holds every operation until the chain is done | `testAChainWhoseEveryReferenceIsDroppedStillRuns` |
/// | releasing ~40,000 dependent operations overflows the stack | chains drop finished edges | `OperationQueueChainingTests.testALongChainRunsAndIsReleasedWithoutRecursion` |
/// | announcing isFinished before the queue started it crashes | `cancel()` and `finish()` before start never announce | `testCancelAndFinishBeforeStartOnAQueue` |
/// | a cancelled operation added behind a barrier deadlocks | cancelled operations are started, never enqueued | `testACancelledStageBehindAPendingBarrierDoesNotDeadlock` |
/// | completion blocks are never cleared (captures leak) | Baton's wrappers put the user's block back | `testCompletionBlocksAreRestored` |
/// | a cancelled dependency counts as finished | the dependency policy | `DependencyPolicyTests` |
/// | `waitUntilFinished`, `NSLock.lock()` unavailable in async code | `waitForOutcome()`, `value()` | `ConcurrencyTests` |
/// | `isAsynchronous` is never read; `queue.progress` ignores `start()` overrides | Baton finishes by KVO; composites report their own `Progress` | `testProgressDoesNotDependOnTheQueue` |
final class LinuxFoundationPitfallTests: BatonTestCase {
    func testAChainKeepsAtMostOneStageInTheQueue() throws {
        let queue = OperationQueue()
        let largest = Locked(0)
        var operations: [Operation] = [ResultBlockOperation<Int> { $0.finish(with: 0) }]
        for _ in 0..<500 {
            operations.append(TransformBlockOperation<Int, Int> { operation in
                let count = queue.operationCount
                largest.mutate { $0 = max($0, count) }
                operation.finish(with: operation.input! + 1)
            })
        }
        XCTAssertEqual(try queue.addChain(operations).wait(timeout: testTimeout).output as? Int, 500)
        XCTAssertLessThanOrEqual(largest.value, 3)
    }

    func testAChainWhoseEveryReferenceIsDroppedStillRuns() throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let finished = Gate()
        let freed = Gate()
        try inScope {
            let handle = try queue.addChain([ResultBlockOperation<Int> { $0.finish(with: 1) }, TrackedOperation(freed: freed), BlockOperation {}])
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
        XCTAssertTrue(cancelled.result?.isCancelled == true)
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
        XCTAssertTrue(try handle.wait(timeout: testTimeout).isCancelled)
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
        XCTAssertTrue(try second.wait(timeout: testTimeout).isSucceeded)
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
}

/// The misuse catalogue: each mistake and what Baton does about it (Docs/Performance.md lists them).
final class MisuseTests: BatonTestCase {
    private var diagnostics: DiagnosticsRecorder!

    override func setUp() {
        super.setUp()
        diagnostics = DiagnosticsRecorder()
    }

    override func tearDown() {
        diagnostics.stop()
        super.tearDown()
    }

    func testFinishTwiceStartTwiceAndFinishBeforeStart() {
        let operation = ManualOperation()
        operation.finish(with: 1)
        operation.finish(with: 2)
        operation.start()
        operation.start()
        XCTAssertEqual(operation.output, 1)
        XCTAssertEqual(diagnostics.kinds(for: operation), [.finishedTwice, .startedTwice])
    }

    func testOneOperationInTwoChainsIsRefused() throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let shared = ManualOperation(name: "shared")
        try queue.addChain([shared])
        XCTAssertThrowsError(try OperationQueue().addChain([ManualOperation(), shared])) { error in
            guard case BatonError.alreadyEnqueued("shared") = error else { return XCTFail("unexpected \(error)") }
        }
        shared.cancel()
        queue.isSuspended = false
    }

    func testAChainHoldingAnExecutingOperationIsRefused() {
        let running = ManualOperation(name: "running")
        OperationQueue().addOperation(running)
        running.started.wait()
        XCTAssertThrowsError(try OperationQueue().addChain([running])) { error in
            guard case BatonError.alreadyExecuting("running") = error else { return XCTFail("unexpected \(error)") }
        }
        running.finish(with: 0)
    }

    func testAnOperationThatNeverFinishesIsReportedAndCancelledByItsTimeout() {
        let stuck = ManualOperation(name: "stuck", finishesOnCancel: true)
        stuck.timeout = 0.05
        let done = Gate()
        stuck.whenFinished { done.open() }
        OperationQueue().addOperation(stuck)
        done.wait()
        XCTAssertTrue(stuck.result?.isCancelled == true)
        XCTAssertEqual(diagnostics.kinds(for: stuck), [.timedOut])
    }

    func testATimeoutThatDoesNotRunOutChangesNothing() {
        let quick = ImmediateOperation(.success(4))
        quick.timeout = 60
        finished(quick)
        XCTAssertEqual(quick.output, 4)
        XCTAssertEqual(diagnostics.kinds(for: quick), [])
    }

    func testADependencyCycleIsRefused() {
        let first = ManualOperation(name: "first")
        let second = ManualOperation(name: "second")
        first.addDependency(second)
        XCTAssertThrowsError(try OperationQueue().addChain([first, second])) { error in
            guard case BatonError.dependencyCycle(["first", "second", "first"]) = error else { return XCTFail("unexpected \(error)") }
        }
    }
}
