import Dispatch
import Foundation
import XCTest

@testable import Baton

private final class AddOne: TransformOperation<Int, Int>, @unchecked Sendable {
    let executions = Locked(0)
    override func execute() {
        executions.increment()
        DispatchQueue.global().async { self.finish(with: self.input! + 1) }
    }
}

final class SequenceOperationTests: BatonTestCase {
    func testChildrenRunOneAfterAnotherAndOutputsFlow() {
        let running = Locked(0)
        let overlap = Locked(false)
        let steps: [Operation] =
            [ResultBlockOperation<Int> { $0.finish(with: 0) }]
            + (0..<20).map { _ in
                TransformBlockOperation<Int, Int> { operation in
                    if running.increment() > 1 { overlap.mutate { $0 = true } }
                    DispatchQueue.global().async {
                        running.mutate { $0 -= 1 }
                        operation.finish(with: operation.input! + 1)
                    }
                }
            }
        let sequence = finished(SequenceOperation<Int>(operations: steps, keepsFinishedChildren: true))
        XCTAssertEqual(sequence.output, 20)
        XCTAssertFalse(overlap.value, "two children ran at once")
        XCTAssertEqual(sequence.childOutcomes.count, 21)
        XCTAssertEqual(sequence.childOutcomes.compactMap { $0.output as? Int }, Array(0...20))
        XCTAssertEqual(sequence.progress.fractionCompleted, 1, accuracy: 1e-9)
    }

    func testItStopsAtTheFirstFailureAndFinishesTheRest() {
        let later = AddOne()
        let sequence = finished(
            SequenceOperation<Int>(operations: [
                ResultBlockOperation<Int> { $0.finish(with: 0) }, AddOne(), Explosive(code: 6), later,
            ]))
        XCTAssertEqual(sequence.outcome?.error as? TestError, TestError(code: 6))
        XCTAssertEqual(later.executions.value, 0)
        XCTAssertTrue(later.isFinished, "an unrun child is finished (cancelled), never left pending")
        XCTAssertTrue(later.isCancelled)
    }

    func testAChildCancelledOnItsOwnCancelsTheSequence() {
        let stopper = ResultBlockOperation<Int> { operation in
            operation.cancel()
            operation.finish()
        }
        let later = AddOne()
        let sequence = finished(SequenceOperation<Int>(operations: [stopper, later]))
        XCTAssertTrue(sequence.outcome?.isCancelled == true)
        XCTAssertEqual(later.executions.value, 0)
    }

    func testCancellingTheSequenceCancelsTheRunningChild() {
        let running = ManualOperation(name: "running", finishesOnCancel: true)
        let later = AddOne()
        let sequence = SequenceOperation<Int>(operations: [running, later])
        let done = Gate()
        sequence.whenFinished { done.open() }
        OperationQueue().addOperation(sequence)
        running.started.wait()
        sequence.cancel()
        done.wait()
        XCTAssertTrue(sequence.outcome?.isCancelled == true)
        running.cancelled.wait()
        XCTAssertEqual(running.cancellations.value, 1)
        XCTAssertEqual(later.executions.value, 0)
        XCTAssertTrue(later.isFinished)
    }

    func testAnEmptySequenceSucceedsAtOnce() {
        XCTAssertTrue(finished(SequenceOperation<Void>(operations: [])).outcome?.isSuccess == true)
    }

    func testTheGeneratorMakesEachStepFromThePreviousOne() {
        let sequence = finished(
            SequenceOperation<Int>(
                first: ResultBlockOperation<Int> { $0.finish(with: 1) }, keepsFinishedChildren: true
            ) { previous in
                guard let value = (previous as? ResultOperation<Int>)?.output, value < 64 else { return nil }
                return ResultBlockOperation<Int> { $0.finish(with: value * 2) }
            })
        XCTAssertEqual(sequence.output, 64)
        XCTAssertEqual(sequence.children.count, 7)
    }

    func testTheGeneratorPassesOutputsIntoInputs() {
        let sequence = finished(
            SequenceOperation<Int>(first: ResultBlockOperation<Int> { $0.finish(with: 0) }) { previous in
                (previous as? ResultOperation<Int>)?.output ?? 0 < 5 ? AddOne() : nil
            })
        XCTAssertEqual(sequence.output, 5)
    }

    func testAWrongOutputTypeIsAClearError() {
        let sequence = finished(SequenceOperation<String>(operations: [ResultBlockOperation<Int> { $0.finish(with: 1) }]))
        guard case .failed(BatonError.outputTypeMismatch(_, "String", "Int"))? = sequence.outcome else {
            return XCTFail("got \(String(describing: sequence.outcome))")
        }
    }

    func testSuspendHoldsTheNextChildBack() {
        let first = ManualOperation(name: "first")
        let second = AddOne()
        let sequence = SequenceOperation<Int>(operations: [first, second])
        let done = Gate()
        sequence.whenFinished { done.open() }
        OperationQueue().addOperation(sequence)
        first.started.wait()
        sequence.suspend()
        first.finish(with: 10)
        waitFinished(first)
        XCTAssertTrue(sequence.isSuspended)
        XCTAssertEqual(second.executions.value, 0)
        XCTAssertFalse(sequence.isFinished)
        sequence.resume()
        done.wait()
        XCTAssertEqual(sequence.output, 11)
    }

    func testASequenceSuspendedBeforeStartHoldsEvenItsFirstChild() {
        let first = ImmediateOperation(.success(1))
        let sequence = SequenceOperation<Int>(operations: [first, AddOne()])
        sequence.suspend()
        let done = Gate()
        sequence.whenFinished { done.open() }
        OperationQueue().addOperation(sequence)
        XCTAssertEqual(first.executions.value, 0)
        sequence.resume()
        done.wait()
        XCTAssertEqual(sequence.output, 2)
    }

    func testCancellingASuspendedSequenceFinishesIt() {
        let first = ManualOperation(name: "first")
        let second = AddOne()
        let sequence = SequenceOperation<Int>(operations: [first, second])
        let done = Gate()
        sequence.whenFinished { done.open() }
        OperationQueue().addOperation(sequence)
        first.started.wait()
        sequence.suspend()
        first.finish(with: 1)
        waitFinished(first)
        sequence.cancel()
        done.wait()
        XCTAssertTrue(sequence.outcome?.isCancelled == true)
        XCTAssertTrue(second.isFinished)
        XCTAssertEqual(second.executions.value, 0)
    }

    func testAThousandSteps() {
        let steps: [Operation] =
            [ResultBlockOperation<Int> { $0.finish(with: 0) }]
            + (0..<1_000).map { _ in TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! + 1) } }
        XCTAssertEqual(finished(SequenceOperation<Int>(operations: steps)).output, 1_000)
    }
}

/// Fails with `TestError(code:)` whatever its input.
final class Explosive: TransformOperation<Int, Int>, @unchecked Sendable {
    let code: Int
    init(code: Int) {
        self.code = code
        super.init()
    }
    override func execute() { finish(throwing: TestError(code: code)) }

    func testAnEmptySequenceWithAnOutputSaysWhatToDo() {
        // What the sequence template scaffolds before its steps are filled in.
        final class ImportSteps: SequenceOperation<Int>, @unchecked Sendable {
            init() { super.init(operations: []) }
        }
        let sequence = ImportSteps()
        guard case .failed(BatonError.emptySequence(let culprit))? = finished(sequence).outcome else {
            return XCTFail(String(describing: sequence.outcome))
        }
        XCTAssertTrue(culprit.operation === sequence)
        let message = "\(BatonError.emptySequence(operation: culprit))"
        XCTAssertTrue(message.contains("init(operations:)") && !message.contains("finish(with:)"), message)
    }
}
