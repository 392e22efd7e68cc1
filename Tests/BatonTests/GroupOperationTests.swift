import Dispatch
import Foundation
import XCTest

@testable import Baton

final class GroupOperationTests: BatonTestCase {
    func testTheGroupFinishesAfterAllItsChildren() {
        let children = (0..<50).map { JitterOperation($0) }
        let blocks = (0..<10).map { _ in BlockOperation {} }
        let group = finished(GroupOperation(operations: children + blocks))
        XCTAssertTrue(group.outcome?.isSuccess == true)
        XCTAssertTrue(children.allSatisfy(\.isFinished))
        XCTAssertTrue(blocks.allSatisfy(\.isFinished))
        XCTAssertEqual(children.map { $0.executions.value }, Array(repeating: 1, count: 50))
    }

    func testAnEmptyGroupSucceedsAtOnce() {
        XCTAssertTrue(finished(GroupOperation()).outcome?.isSuccess == true)
        XCTAssertEqual(finished(ResultGroupOperation<Int>()).output, [])
    }

    func testErrorsAreCollectedAndTheGroupFails() {
        let group = finished(
            GroupOperation(operations: [
                ImmediateOperation(.failure(TestError(code: 1))),
                ImmediateOperation(.success(2)),
                ImmediateOperation(.failure(TestError(code: 3))),
            ]))
        XCTAssertEqual(Set(group.errors.compactMap { ($0 as? TestError)?.code }), [1, 3])
        guard case .failed(BatonError.childrenFailed(_, let errors))? = group.outcome else {
            return XCTFail("got \(String(describing: group.outcome))")
        }
        XCTAssertEqual(errors.count, 2)
    }

    func testCancelSiblingsOnFailure() {
        let waiting = (0..<5).map { ManualOperation(name: "waiting \($0)", finishesOnCancel: true) }
        let failing = ImmediateOperation(.failure(TestError(code: 8)))
        let group = GroupOperation(operations: waiting + [failing], failurePolicy: .cancelSiblingsOnFailure)
        finished(group)
        XCTAssertEqual(group.errors.count, 1)
        XCTAssertTrue(waiting.allSatisfy { $0.outcome?.isCancelled == true })
        XCTAssertEqual(group.outcome?.error.map { "\($0)" }?.contains("TestError(code: 8)"), true)
    }

    func testContinueOnFailureLetsSiblingsFinish() {
        let sibling = JitterOperation(4)
        let group = finished(GroupOperation(operations: [ImmediateOperation(.failure(TestError(code: 1))), sibling]))
        XCTAssertEqual(sibling.output, 4)
        XCTAssertEqual(group.errors.count, 1)
    }

    func testCancellingTheGroupCancelsEveryRunningChild() {
        let children = (0..<4).map { ManualOperation(name: "child \($0)", finishesOnCancel: true) }
        let group = GroupOperation(operations: children)
        let done = Gate()
        group.whenFinished { done.open() }
        OperationQueue().addOperation(group)
        for child in children { child.started.wait() }
        group.cancel()
        done.wait()
        XCTAssertTrue(group.outcome?.isCancelled == true)
        XCTAssertEqual(children.map { $0.cancellations.value }, [1, 1, 1, 1])
    }

    func testAGroupCancelledBeforeStartFinishesItsChildrenToo() {
        let children = (0..<3).map { _ in ManualOperation() }
        let group = GroupOperation(operations: children)
        group.cancel()
        finished(group)
        XCTAssertTrue(group.outcome?.isCancelled == true)
        XCTAssertTrue(children.allSatisfy { $0.isFinished && $0.executions.value == 0 })
    }

    func testChildrenCanBeAddedWhileTheGroupRuns() throws {
        let first = ManualOperation(name: "first")
        let group = GroupOperation(operations: [first], keepsFinishedChildren: true)
        let done = Gate()
        group.whenFinished { done.open() }
        OperationQueue().addOperation(group)
        first.started.wait()
        let late = JitterOperation(9)
        try group.addChild(late)
        first.finish(with: 1)
        done.wait()
        XCTAssertEqual(late.output, 9)
        XCTAssertEqual(group.children.count, 2)
        let refused = JitterOperation(0)
        XCTAssertThrowsError(try group.addChild(refused)) { error in
            guard case BatonError.alreadyFinished = error else { return XCTFail("unexpected \(error)") }
        }
        // A refused child is the caller's again, untouched: it still runs elsewhere.
        XCTAssertFalse(refused.isCancelled)
        XCTAssertEqual(try refused.run(timeout: .seconds(testTimeout)), 0)
    }

    func testBadChildrenAreReported() {
        let twice = JitterOperation(1)
        twice.name = "twice"
        let group = finished(GroupOperation(operations: [twice, twice]))
        guard case .failed(BatonError.duplicateOperation("twice"))? = group.outcome else {
            return XCTFail("got \(String(describing: group.outcome))")
        }
        XCTAssertTrue(twice.isFinished, "children of a group that never ran are finished, not left pending")
        XCTAssertThrowsError(try GroupOperation().addChild(finished(JitterOperation(1))))
    }

    /// The group finds a duplicate by its refused claim, then by position: a child added again while it
    /// waits in the running group, while it executes, and after it finished is refused each time with
    /// the error for that stage, and the group runs it once.
    func testAChildAddedAgainAtEachStageOfItsLifeIsRefusedByName() throws {
        let started = Gate()
        let release = Gate()
        let executions = Locked(0)
        let holder = AsyncBlockOperation { operation in
            started.open()
            release.wait()
            operation.finish()
        }
        let running = AsyncBlockOperation { operation in
            executions.increment()
            operation.finish()
        }
        running.name = "again"
        let waiting = BlockOperation {}
        waiting.name = "waiting"
        waiting.addDependency(holder)
        let group = GroupOperation(operations: [holder], maxConcurrentOperationCount: 2)
        let queue = OperationQueue()
        queue.addOperation(group)
        XCTAssertTrue(started.wait())
        try group.addChild(waiting)
        XCTAssertThrowsError(try group.addChild(waiting)) { error in
            guard case BatonError.duplicateOperation("waiting") = error else { return XCTFail("unexpected \(error)") }
        }
        XCTAssertThrowsError(try group.addChild(holder)) { error in
            guard case BatonError.duplicateOperation = error else { return XCTFail("unexpected \(error)") }
        }
        try group.addChild(running)
        // Finished and let go by the group (until then it is still the group's, and a duplicate).
        XCTAssertTrue(eventually { running.isFinished && !group.children.contains(running) })
        XCTAssertThrowsError(try group.addChild(running)) { error in
            guard case BatonError.alreadyFinished = error else { return XCTFail("unexpected \(error)") }
        }
        release.open()
        XCTAssertTrue(eventually { group.isFinished })
        XCTAssertTrue(group.outcome?.isSuccess == true)
        XCTAssertEqual(executions.value, 1)
        XCTAssertTrue(waiting.isFinished)
    }

    /// Outcomes without a payload are shared, and a shared outcome gives back the outcome it was made
    /// from, case and payload.
    func testASharedOutcomeKeepsItsCaseAndPayload() {
        XCTAssertTrue(SharedOutcome.succeeded(nil) === SharedOutcome.succeededWithoutOutput)
        XCTAssertTrue(SharedOutcome.of(.cancelled) === SharedOutcome.cancelled)
        let success = SharedOutcome.of(.succeeded(42))
        XCTAssertEqual(success.kind, .succeeded)
        XCTAssertEqual((success.value.output ?? nil) as? Int, 42)
        XCTAssertNil(success.error)
        let failure = SharedOutcome.failed(BatonError.missingInput(operation: AsyncBlockOperation { $0.finish() }.reference))
        XCTAssertEqual(failure.kind, .failed)
        guard case BatonError.missingInput? = failure.error else { return XCTFail("lost the error") }
        XCTAssertFalse(failure.isCancelled)
        XCTAssertTrue(SharedOutcome.cancelled.isCancelled)
    }

    func testMaximumConcurrencyIsRespected() {
        let running = Locked(0)
        let highest = Locked(0)
        let children = (0..<40).map { _ in
            AsyncBlockOperation { operation in
                let now = running.increment()
                highest.mutate { $0 = max($0, now) }
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(1)) {
                    running.mutate { $0 -= 1 }
                    operation.finish()
                }
            }
        }
        finished(GroupOperation(operations: children, maxConcurrentOperationCount: 3))
        XCTAssertLessThanOrEqual(highest.value, 3)
        XCTAssertGreaterThanOrEqual(highest.value, 1)
    }

    func testSuspendHoldsNewChildrenBack() throws {
        let first = ManualOperation(name: "first")
        let group = GroupOperation(operations: [first], maxConcurrentOperationCount: 1)
        let second = JitterOperation(2)
        try group.addChild(second)
        let done = Gate()
        group.whenFinished { done.open() }
        OperationQueue().addOperation(group)
        first.started.wait()
        group.suspend()
        XCTAssertTrue(group.isSuspended)
        first.finish(with: 1)
        waitFinished(first)
        XCTAssertEqual(second.executions.value, 0, "a suspended group starts no new child")
        group.resume()
        done.wait()
        XCTAssertEqual(second.output, 2)
    }

    func testTypedGroupReturnsOutputsInInputOrder() {
        let group = finished(ResultGroupOperation(operations: (0..<200).map { JitterOperation($0) }))
        XCTAssertEqual(group.output, Array(0..<200))
    }

    func testATypedGroupWithAFailureFails() {
        let group = finished(
            ResultGroupOperation(operations: [JitterOperation(1), ImmediateOperation(.failure(TestError(code: 2)))]))
        guard case .failed(BatonError.childrenFailed)? = group.outcome else {
            return XCTFail("got \(String(describing: group.outcome))")
        }
    }

    func testThousandsOfChildren() {
        let count = 5_000
        let total = Locked(0)
        let children = (0..<count).map { index in
            ResultBlockOperation<Int> { operation in
                total.mutate { $0 += index }
                operation.finish(with: index)
            }
        }
        let group = finished(ResultGroupOperation(operations: children))
        XCTAssertEqual(group.output?.count, count)
        XCTAssertEqual(total.value, count * (count - 1) / 2)
        XCTAssertEqual(group.progress.completedUnitCount, Int64(count))
        XCTAssertEqual(group.progress.fractionCompleted, 1, accuracy: 1e-9)
    }

    func testSubclassesSeeEachChild() {
        final class Collector: GroupOperation, @unchecked Sendable {
            let seen = Locked<[Int]>([])
            init() { super.init(operations: (0..<5).map { JitterOperation($0) }) }
            override func childDidFinish(_ child: Operation) {
                if let value = (child as? JitterOperation)?.output { seen.mutate { $0.append(value) } }
            }
        }
        let collector = finished(Collector())
        XCTAssertEqual(collector.seen.value.sorted(), [0, 1, 2, 3, 4])
    }

    func testGroupsAndTheirChildrenAreFreed() {
        let groupFreed = Gate()
        let childFreed = Gate()
        let done = Gate()
        inScope {
            let child = TrackedOperation(freed: childFreed)
            let group = TrackedGroup(freed: groupFreed, children: [child, BlockOperation {}])
            group.whenFinished { done.open() }
            OperationQueue().addOperation(group)
        }
        done.wait()
        groupFreed.wait()
        childFreed.wait()
    }
}

/// A group that signals when it is freed.
final class TrackedGroup: GroupOperation, @unchecked Sendable {
    let freed: Gate
    init(freed: Gate, children: [Operation]) {
        self.freed = freed
        super.init(operations: children)
    }
    deinit { freed.open() }
}
