import Dispatch
import Foundation
import XCTest

@testable import Baton

final class AsyncOperationTests: BatonTestCase {
    // MARK: - Life cycle on a queue

    func testOnAQueueDependentsRunWaitsReturnCompletionBlocksRunAndCountDrops() {
        let queue = OperationQueue()
        let operation = ManualOperation(name: "manual")
        let dependentRan = Gate()
        let dependent = BlockOperation { dependentRan.open() }
        dependent.addDependency(operation)
        let completionRan = Gate()
        operation.completionBlock = { completionRan.open() }

        queue.addOperations([operation, dependent], waitUntilFinished: false)
        operation.started.wait()
        XCTAssertTrue(operation.isExecuting)
        XCTAssertFalse(operation.isFinished)
        XCTAssertFalse(dependent.isFinished, "the dependent must wait for the operation")

        DispatchQueue.global().async { operation.finish(with: 7) }
        dependentRan.wait()
        completionRan.wait()
        operation.waitUntilFinished()   // returns at once: the completion block ran after isFinished
        drain(queue)
        XCTAssertEqual(queue.operationCount, 0)
        XCTAssertTrue(operation.isFinished)
        XCTAssertFalse(operation.isExecuting)
        XCTAssertEqual(operation.output, 7)
        XCTAssertEqual(operation.executions.value, 1)
    }

    func testManualStartExecutesAndFinishes() {
        let operation = ManualOperation()
        XCTAssertFalse(operation.isExecuting)
        operation.start()
        XCTAssertTrue(operation.isExecuting)
        XCTAssertNil(operation.outcome)
        operation.finish(with: 3)
        XCTAssertTrue(operation.isFinished)
        XCTAssertFalse(operation.isExecuting)
        XCTAssertEqual(operation.outcome?.output, 3)
        XCTAssertTrue(operation.outcome?.isSuccess == true)
        XCTAssertTrue(operation.isAsynchronous)
    }

    // MARK: - KVO notifications (through the test seam)

    func testNotificationSequenceForEachTransition() {
        let events = Locked<[AsyncOperation.Notification]>([])
        let operation = ManualOperation()
        operation.installNotificationTap { event in events.mutate { $0.append(event) } }

        operation.start()
        XCTAssertEqual(events.value, [.willChange("isExecuting"), .didChange("isExecuting")])

        operation.finish(with: 1)
        XCTAssertEqual(
            events.value,
            [
                .willChange("isExecuting"), .didChange("isExecuting"),
                .willChange("isExecuting"), .willChange("isFinished"),
                .didChange("isExecuting"), .didChange("isFinished"),
            ])
    }

    func testSkippedOperationAnnouncesOnlyFinished() {
        let events = Locked<[AsyncOperation.Notification]>([])
        let operation = ManualOperation()
        operation.installNotificationTap { event in events.mutate { $0.append(event) } }
        operation.cancel()
        XCTAssertEqual(events.value, [], "cancel() must not announce anything before start")
        operation.start()
        XCTAssertEqual(events.value, [.willChange("isFinished"), .didChange("isFinished")])
    }

    func testStateIsStoredBeforeDidChangeIsSent() {
        let seen = Locked<[String]>([])
        let operation = ManualOperation()
        operation.installNotificationTap { [unowned operation] event in
            if case .didChange(let key) = event {
                seen.append("\(key) executing=\(operation.isExecuting) finished=\(operation.isFinished)")
            }
        }
        operation.start()
        operation.finish(with: 1)
        XCTAssertEqual(
            seen.value,
            [
                "isExecuting executing=true finished=false",
                "isExecuting executing=false finished=true",
                "isFinished executing=false finished=true",
            ])
    }

    // MARK: - Cancellation

    func testCancelBeforeStartFinishesOnlyWhenStarted() {
        let operation = ManualOperation()
        operation.cancel()
        XCTAssertTrue(operation.isCancelled)
        XCTAssertFalse(operation.isFinished, "cancel() must never finish a pending operation itself")
        operation.start()
        XCTAssertTrue(operation.isFinished)
        XCTAssertEqual(operation.executions.value, 0)
        XCTAssertTrue(operation.outcome?.isCancelled == true)
    }

    /// A cancelled operation that waits in a queue for a dependency finishes once the dependency has
    /// (it may only be freed then: Linux's queue keeps unretained pointers to dependents).
    func testCancelWhileWaitingInTheQueue() {
        let queue = OperationQueue()
        let blocker = ManualOperation(name: "blocker")
        let waiting = ManualOperation(name: "waiting")
        waiting.addDependency(blocker)
        queue.addOperations([blocker, waiting], waitUntilFinished: false)
        blocker.started.wait()

        waiting.cancel()
        XCTAssertTrue(waiting.isCancelled)
        XCTAssertFalse(waiting.isFinished, "a cancelled operation must not finish before its dependency")

        blocker.finish(with: 1)
        waitFinished(waiting)
        XCTAssertEqual(waiting.executions.value, 0)
        XCTAssertTrue(waiting.outcome?.isCancelled == true)
        drain(queue)
        XCTAssertEqual(queue.operationCount, 0)
    }

    func testCancelWhileExecutingIsCooperativeAndDropsTheResult() {
        let operation = ManualOperation()
        operation.start()
        operation.cancel()
        operation.cancelled.wait()
        XCTAssertEqual(operation.cancellations.value, 1)
        XCTAssertTrue(operation.isExecuting, "an executing operation finishes when the subclass says so")
        operation.cancel()
        XCTAssertEqual(operation.cancellations.value, 1, "didCancel() is called once")

        operation.finish(with: 99)
        XCTAssertTrue(operation.isFinished)
        XCTAssertTrue(operation.outcome?.isCancelled == true)
        XCTAssertNil(operation.output)
        XCTAssertEqual(diagnostics.kinds(for: operation), [.resultAfterCancellation])
    }

    func testCancelAfterFinishIsIgnored() {
        let operation = ImmediateOperation(.success(5))
        operation.start()
        operation.cancel()
        XCTAssertFalse(operation.isCancelled)
        XCTAssertEqual(operation.output, 5)
    }

    // MARK: - Misuse

    func testFinishTwiceIsIgnoredAndReported() {
        let operation = ManualOperation()
        operation.start()
        operation.finish(with: 1)
        operation.finish(with: 2)
        operation.finish(throwing: TestError(code: 1))
        XCTAssertEqual(operation.output, 1)
        XCTAssertEqual(diagnostics.kinds(for: operation), [.finishedTwice, .finishedTwice])
    }

    func testFinishBeforeStartIsRememberedAndAppliedWithoutExecuting() {
        let operation = ManualOperation()
        operation.finish(throwing: TestError(code: 4))
        XCTAssertFalse(operation.isFinished, "finishing before start must not announce isFinished")
        operation.start()
        XCTAssertTrue(operation.isFinished)
        XCTAssertEqual(operation.executions.value, 0)
        XCTAssertEqual(operation.outcome?.error as? TestError, TestError(code: 4))
    }

    func testFinishBeforeStartOnAQueue() {
        let queue = OperationQueue()
        let operation = ManualOperation()
        operation.finish(with: 8)
        queue.addOperation(operation)
        waitFinished(operation)
        drain(queue)
        XCTAssertEqual(operation.output, 8)
        XCTAssertEqual(operation.executions.value, 0)
    }

    func testStartTwiceIsReportedAndIgnored() {
        let operation = ManualOperation()
        operation.start()
        operation.start()
        XCTAssertEqual(operation.executions.value, 1)
        XCTAssertEqual(diagnostics.kinds(for: operation), [.startedTwice])
        operation.finish(with: 0)
        operation.start()
        XCTAssertEqual(diagnostics.kinds(for: operation), [.startedTwice, .startedTwice])
    }

    func testStartWhileNotReadyIsReportedAndRuns() {
        let blocker = ManualOperation()
        let operation = ManualOperation()
        operation.addDependency(blocker)
        operation.start()
        XCTAssertEqual(diagnostics.kinds(for: operation), [.startedWhileNotReady])
        XCTAssertEqual(operation.executions.value, 1)
        operation.finish(with: 0)
    }

    func testBaseExecuteThatWasNotOverriddenFails() {
        let operation = AsyncOperation()
        operation.start()
        guard case .failed(BatonError.executeNotOverridden)? = operation.outcome else {
            return XCTFail("expected executeNotOverridden, got \(String(describing: operation.outcome))")
        }
        XCTAssertEqual(diagnostics.kinds(for: operation), [.executeNotOverridden])
    }

    // MARK: - Outputs and errors

    func testOutputsAndErrors() {
        let value = ImmediateOperation(.success(12))
        value.start()
        XCTAssertEqual(value.output, 12)
        XCTAssertNil(value.outcome?.error)

        let failure = ImmediateOperation(.failure(TestError(code: 3)))
        failure.start()
        XCTAssertNil(failure.output)
        XCTAssertEqual(failure.outcome?.error as? TestError, TestError(code: 3))
        XCTAssertThrowsError(try failure.outcome?.get()) { XCTAssertEqual($0 as? TestError, TestError(code: 3)) }
    }

    func testUntypedFinishOnATypedOperationFailsWithMissingOutput() {
        let operation = ResultBlockOperation<Int> { $0.finish() }
        operation.start()
        guard case .failed(BatonError.missingOutput)? = operation.outcome else {
            return XCTFail("expected missingOutput, got \(String(describing: operation.outcome))")
        }
        let void = ResultBlockOperation<Void> { $0.finish() }
        void.start()
        XCTAssertTrue(void.outcome?.isSuccess == true)
    }

    func testTransformWithoutInputFailsWithoutExecuting() {
        let ran = Locked(0)
        let operation = TransformBlockOperation<Int, Int> {
            ran.increment()
            $0.finish(with: 0)
        }
        operation.start()
        XCTAssertEqual(ran.value, 0)
        guard case .failed(BatonError.missingInput)? = operation.outcome else {
            return XCTFail("expected missingInput, got \(String(describing: operation.outcome))")
        }
    }

    func testInputSetAfterStartIsIgnoredAndReported() {
        let operation = TransformBlockOperation<Int, Int> { _ in }
        operation.input = 1
        operation.start()
        operation.input = 2
        XCTAssertEqual(operation.input, 1)
        XCTAssertEqual(diagnostics.kinds(for: operation), [.inputAfterStart])
        operation.finish(with: 0)
    }

    // MARK: - Block form

    func testBlockOperationYieldsItselfAndCanRerun() {
        let runs = Locked(0)
        let operation = AsyncBlockOperation { operation in
            if runs.increment() < 3 { operation.rerun() } else { operation.finish() }
        }
        let queue = OperationQueue()
        queue.addOperation(operation)
        waitFinished(operation)
        XCTAssertEqual(runs.value, 3)
        XCTAssertTrue(operation.outcome?.isSuccess == true)
    }

    func testRerunOfACancelledOperationFinishesItCancelled() {
        let runs = Locked(0)
        let operation = AsyncBlockOperation { operation in
            runs.increment()
            operation.cancel()
            operation.rerun()
        }
        operation.start()
        XCTAssertEqual(runs.value, 1)
        XCTAssertTrue(operation.outcome?.isCancelled == true)
    }

    // MARK: - Stress

    func testTenThousandOperationsFinishedConcurrentlyCompleteExactlyOnce() {
        let count = 10_000
        let completions = Locked([Int](repeating: 0, count: count))
        let operations = (0..<count).map { index in
            let operation = ManualOperation()
            operation.onFinish { _ in completions.mutate { $0[index] += 1 } }
            return operation
        }
        DispatchQueue.concurrentPerform(iterations: count) { operations[$0].start() }
        // Three threads race to end each operation: two finishes and a cancel.
        DispatchQueue.concurrentPerform(iterations: count * 3) { index in
            let operation = operations[index / 3]
            switch index % 3 {
            case 0: operation.finish(with: index)
            case 1:
                operation.cancel()
                operation.finish()
            default: operation.finish(throwing: TestError(code: index))
            }
        }
        XCTAssertEqual(completions.value, [Int](repeating: 1, count: count))
        XCTAssertTrue(operations.allSatisfy(\.isFinished))
        XCTAssertTrue(operations.allSatisfy { !$0.isExecuting })
        for operation in operations {
            // Cancelled, or ended by whichever finish came first; never two outcomes.
            XCTAssertEqual(operation.isCancelled, operation.outcome?.isCancelled == true)
        }
    }

    func testTenThousandOperationsOnAQueueFinishedFromOtherThreads() {
        let count = 10_000
        let queue = OperationQueue()
        let finished = Locked(0)
        let operations = (0..<count).map { index in
            let operation = AsyncBlockOperation { operation in
                DispatchQueue.global().async { operation.finish() }
            }
            operation.onFinish { _ in finished.increment() }
            if index % 10 == 0 { operation.cancel() }
            return operation
        }
        queue.addOperations(operations, waitUntilFinished: false)
        drain(queue)
        XCTAssertEqual(finished.value, count)
        XCTAssertEqual(operations.filter { $0.outcome?.isCancelled == true }.count, count / 10)
        XCTAssertEqual(queue.operationCount, 0)
    }
}
