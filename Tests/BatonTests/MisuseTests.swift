import Dispatch
import Foundation
import XCTest

@testable import Baton

/// The misuse catalogue: each mistake and what Baton does about it (Docs/Performance.md lists them).
final class MisuseTests: BatonTestCase {
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
        stuck.timeout = .milliseconds(50)
        let done = Gate()
        stuck.whenFinished { done.open() }
        OperationQueue().addOperation(stuck)
        done.wait()
        // Issue #22: a timeout is not a user's cancellation: the operation fails with `timedOut`
        // naming it, and no longer reads as cancelled once finished.
        guard case .failed(BatonError.timedOut(let culprit, let after))? = stuck.outcome else {
            return XCTFail("expected timedOut, got \(String(describing: stuck.outcome))")
        }
        XCTAssertTrue(culprit.operation === stuck)
        XCTAssertEqual(after, .milliseconds(50))
        XCTAssertFalse(stuck.isCancelled)
        XCTAssertEqual(diagnostics.kinds(for: stuck), [.timedOut])
    }

    func testATimeoutThatDoesNotRunOutChangesNothing() {
        let quick = ImmediateOperation(.success(4))
        quick.timeout = .seconds(60)
        finished(quick)
        XCTAssertEqual(quick.output, 4)
        XCTAssertEqual(diagnostics.kinds(for: quick), [])
    }

    func testADependencyCycleIsRefused() {
        let first = ManualOperation(name: "first")
        let second = ManualOperation(name: "second")
        first.addDependency(second)
        XCTAssertThrowsError(try OperationQueue().addChain([first, second])) { error in
            guard case BatonError.dependencyCycle(["first", "second", "first"]) = error else {
                return XCTFail("unexpected \(error)")
            }
        }
    }
}
