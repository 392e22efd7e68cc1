import Dispatch
import Foundation
import XCTest

@testable import Baton

/// A composite's queue that remembers "nothing is lent here" (409f34b) must never be one under a composite
/// that holds a category: nestings through every kind of composite, each of which would deadlock (or
/// let two holders run) if the queue remembered wrongly. Written by the review of that change.
final class LendsNothingTests: BatonTestCase {
    private func leaves(_ n: Int, _ meter: ConcurrencyMeter, _ c: OperationCategory) throws -> [MeteredOperation] {
        try (0..<n).map { _ in
            let o = MeteredOperation(meter, lingers: 0...100)
            try o.addExclusivity(c)
            return o
        }
    }

    func testSequenceOfGatelessGroupsUnderHolder() throws {
        let x = OperationCategory("x", in: ExclusivityScope("r-seq"))
        let meter = ConcurrencyMeter()
        let groups = try (0..<3).map { _ in GroupOperation(operations: try leaves(10, meter, x)) }
        let seq = SequenceOperation<Void>(operations: groups)
        let outer = GroupOperation(operations: [seq])
        try outer.addExclusivity(x)
        try outer.run(timeout: .seconds(20))
        XCTAssertEqual(meter.total, 30)
        XCTAssertEqual(meter.most, 1)
    }

    func testRetryUnderHolder() throws {
        let x = OperationCategory("x", in: ExclusivityScope("r-retry"))
        let meter = ConcurrencyMeter()
        let retry = RetryOperation<Void>(
            maximumAttempts: 4, delay: .immediate, shouldRetry: { _, _ in true }, keepsFinishedChildren: false,
            attempts: { n in
                let a = MeteredOperation(meter, fails: n < 3)
                try? a.addExclusivity(x)
                let b = MeteredOperation(meter)
                try? b.addExclusivity(x)
                return GroupOperation(operations: [b, a])
            })
        let outer = GroupOperation(operations: [retry])
        try outer.addExclusivity(x)
        _ = try? outer.run(timeout: .seconds(20))
        XCTAssertTrue(outer.isFinished)
        XCTAssertEqual(meter.total, 6)
        XCTAssertEqual(meter.most, 1)
    }

    func testConditionOnlyCompositeBetweenHolderAndGatelessGroup() throws {
        let x = OperationCategory("x", in: ExclusivityScope("r-cond"))
        let meter = ConcurrencyMeter()
        let middle = GroupOperation(operations: try leaves(20, meter, x))
        let conditioned = GroupOperation(operations: [middle])
        try conditioned.addCondition(Condition("ok") { _, answer in answer(.satisfied) })
        let outer = GroupOperation(operations: [conditioned])
        try outer.addExclusivity(x)
        try outer.run(timeout: .seconds(20))
        XCTAssertEqual(meter.total, 20)
        XCTAssertEqual(meter.most, 1)
        XCTAssertFalse(middle.group.queue.lending.lendsNothing)
    }

    func testProducedOperationInGatelessGroupUnderHolder() throws {
        let x = OperationCategory("x", in: ExclusivityScope("r-produced"))
        let meter = ConcurrencyMeter()
        let condition = needsProduced {
            let p = MeteredOperation(meter, name: "produced")
            try? p.addExclusivity(x)
            return p
        }
        let waiter = MeteredOperation(meter)
        try waiter.addCondition(condition)
        try waiter.addExclusivity(x)
        let middle = GroupOperation(operations: try leaves(10, meter, x) + [waiter])
        let outer = GroupOperation(operations: [middle])
        try outer.addExclusivity(x)
        try outer.run(timeout: .seconds(20))
        XCTAssertEqual(meter.total, 12)
        XCTAssertEqual(meter.most, 1)
    }

    func testChildrenAddedLaterToRunningGatelessGroupUnderHolder() throws {
        let x = OperationCategory("x", in: ExclusivityScope("r-add"))
        let meter = ConcurrencyMeter()
        let box = Locked<GroupOperation?>(nil)
        let adder = AsyncBlockOperation { op in
            for _ in 0..<10 {
                let l = MeteredOperation(meter)
                try? l.addExclusivity(x)
                try? box.value?.addChild(l)
            }
            op.finish()
        }
        try adder.addExclusivity(x)
        let middle = GroupOperation(operations: try leaves(5, meter, x) + [adder])
        box.mutate { $0 = middle }
        let outer = GroupOperation(operations: [middle])
        try outer.addExclusivity(x)
        try outer.run(timeout: .seconds(20))
        XCTAssertEqual(meter.total, 15)
        XCTAssertEqual(meter.most, 1)
    }

    func testHolderInsideCachedTopLevelGroupStillLends() throws {
        let scope = ExclusivityScope("r-mixed")
        let (x, y) = (OperationCategory("x", in: scope), OperationCategory("y", in: scope))
        let meter = ConcurrencyMeter()
        let ym = ConcurrencyMeter()
        let first = try leaves(5, ym, y)
        let inner = GroupOperation(operations: try leaves(20, meter, x))
        let holder = GroupOperation(operations: [inner])
        try holder.addExclusivity(x)
        let seq = SequenceOperation<Void>(operations: [GroupOperation(operations: first), holder])
        let top = GroupOperation(operations: [seq as Operation] + (try leaves(5, ym, y)))
        try top.run(timeout: .seconds(20))
        XCTAssertEqual(meter.total, 20)
        XCTAssertEqual(meter.most, 1)
        XCTAssertTrue(top.group.queue.lending.lendsNothing)
        XCTAssertFalse(inner.group.queue.lending.lendsNothing)
    }

    func testTreeUnderHolderWithRetries() throws {
        let x = OperationCategory("x", in: ExclusivityScope("r-tree"))
        let meter = ConcurrencyMeter()
        let node = TreeNode<Int, Void>("item", items: { 0..<$0 }) { _ in
            let a = MeteredOperation(meter)
            try? a.addExclusivity(x)
            let b = MeteredOperation(meter)
            try? b.addExclusivity(x)
            return GroupOperation(operations: [a, b])
        }
        node.retry(maximumAttempts: 2)
        let tree = TreeOperation(root: node, input: 10)
        let outer = GroupOperation(operations: [tree])
        try outer.addExclusivity(x)
        try outer.run(timeout: .seconds(20))
        XCTAssertEqual(meter.total, 20)
        XCTAssertEqual(meter.most, 1)
    }
}
