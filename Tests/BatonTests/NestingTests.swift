import Foundation
import XCTest

@testable import Baton

final class NestingTests: BatonTestCase {
    /// sequence[ group[ sequence[1 → +1], sequence[10 → +1] ], sum ]
    private func makeNest(cancelInside: ManualOperation? = nil) -> (SequenceOperation<Int>, [Operation]) {
        let left = SequenceOperation<Int>(operations: [ResultBlockOperation<Int> { $0.finish(with: 1) }, AddTen()])
        var rightSteps: [Operation] = [ResultBlockOperation<Int> { $0.finish(with: 10) }, AddTen()]
        if let cancelInside { rightSteps.insert(cancelInside, at: 1) }
        let right = SequenceOperation<Int>(operations: rightSteps)
        let group = ResultGroupOperation<Int>(operations: [left, right])
        let sum = TransformBlockOperation<[Int], Int> { $0.finish(with: $0.input!.reduce(0, +)) }
        return (SequenceOperation<Int>(operations: [group, sum]), [left, right, group, sum])
    }

    func testResultsCrossEveryLevel() {
        let (outer, _) = makeNest()
        XCTAssertEqual(finished(outer).output, 11 + 20)
    }

    func testCancellingTheOuterSequenceReachesTheInnermostChild() {
        let inner = ManualOperation(name: "inner", finishesOnCancel: true)
        let (outer, parts) = makeNest(cancelInside: inner)
        let done = Gate()
        outer.whenFinished { done.open() }
        OperationQueue().addOperation(outer)
        inner.started.wait()
        outer.cancel()
        done.wait()
        inner.cancelled.wait()
        XCTAssertEqual(inner.cancellations.value, 1)
        XCTAssertTrue(outer.outcome?.isCancelled == true)
        XCTAssertTrue(parts.allSatisfy(\.isFinished))
        XCTAssertTrue((parts[3] as? AsyncOperation)?.outcome?.isCancelled == true, "the step after the group never runs")
    }

    func testAFailureDeepInsideFailsEveryLevel() {
        let deep = SequenceOperation<Int>(operations: [ResultBlockOperation<Int> { $0.finish(with: 1) }, Explosive(code: 44)])
        let group = GroupOperation(operations: [deep, ImmediateOperation(.success(0))])
        let outer = finished(SequenceOperation<Void>(operations: [group]))
        guard case .failed(BatonError.childrenFailed(_, let errors))? = outer.outcome else {
            return XCTFail("got \(String(describing: outer.outcome))")
        }
        XCTAssertEqual(errors.first as? TestError, TestError(code: 44))
    }

    func testProgressIsBuiltFromTheChildren() {
        let (outer, _) = makeNest()
        finished(outer)
        XCTAssertEqual(outer.progress.fractionCompleted, 1, accuracy: 1e-9)
        XCTAssertEqual(outer.progress.totalUnitCount, 2)
    }
}

private final class AddTen: TransformOperation<Int, Int>, @unchecked Sendable {
    override func execute() { finish(with: input! + 10) }
}
