import Foundation
import XCTest

@testable import Baton

/// Finished hooks: order, a hook added from a hook, a hook that finishes another operation, chains of
/// 100,000 such hooks (one and three hooks per operation: inline first hook, then the list).
/// Finished hooks kept inline (6dc2389): order, hooks added late, and chains of hooks 100,000 deep.
/// Written by the review of that change.
final class FinishedHooksTests: BatonTestCase {
    func testHooksRunInOrderAndAHookAddedLateRunsAtOnce() {
        let order = Locked<[Int]>([])
        let op = AsyncBlockOperation { _ in }
        for index in 0..<5 { op.whenFinished { order.mutate { $0.append(index) } } }
        op.whenFinished { op.whenFinished { order.mutate { $0.append(99) } } }
        op.start()
        op.finish()
        XCTAssertEqual(order.value, [0, 1, 2, 3, 4, 99])
        op.whenFinished { order.mutate { $0.append(100) } }
        XCTAssertEqual(order.value, [0, 1, 2, 3, 4, 99, 100])
    }

    func testAChainOfHooksEachFinishingTheNextOperation() {
        for hooksPerOperation in [1, 3] {
            let count = 100_000
            let finishedOrder = Locked<[Int]>([])
            let ops = (0..<count).map { _ in AsyncBlockOperation { _ in } }
            for op in ops { op.start() }
            for index in 0..<count {
                let next = index + 1 < count ? ops[index + 1] : nil
                ops[index].whenFinished { finishedOrder.mutate { $0.append(index) } }
                for _ in 1..<hooksPerOperation { ops[index].whenFinished {} }
                ops[index].whenFinished { next?.finish() }
            }
            let done = Gate()
            Thread {
                ops[0].finish()
                done.open()
            }.start()
            done.wait(timeout: bulkTimeout)
            XCTAssertTrue(ops.allSatisfy(\.isFinished))
            XCTAssertEqual(finishedOrder.value, Array(0..<count), "hooks per operation \(hooksPerOperation)")
        }
    }
}
