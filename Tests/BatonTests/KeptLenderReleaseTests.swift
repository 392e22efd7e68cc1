import Dispatch
import Foundation
import XCTest

@testable import Baton

/// From the second review of the worker-holder fixes: a composite freed by the claim table while it
/// held its lock (a defect older than those fixes).
final class KeptLenderReleaseTests: BatonTestCase {
    /// A group holding X (process scope) and Y (in a scope only the group's claim keeps alive) lends
    /// X to its child's produced operation; the child leaves, the group finishes while the produced
    /// operation still holds X under it (the table keeps the group's hold: lenderRelease), and every
    /// other reference to the group goes. When the produced operation gives X back, the table drops
    /// the group's hold, its last reference, under the table's lock: the group is freed there, its
    /// categories with it, and the scope's deinit calls Gatekeeper.forgetLimits, which takes the
    /// table's lock again on the same thread.
    func testAKeptLenderFreedByTheTableDoesNotTakeTheTablesLockAgain() throws {
        weak var weakGroup: GroupOperation?
        weak var weakScope: ExclusivityScope?
        let meter = ConcurrencyMeter()
        let made = Locked<[HeldClaimant]>([])
        let x = OperationCategory("kept-lender-release-x")
        let outsider = AsyncBlockOperation { $0.finish() }
        let condition = needsProduced {
            let produced = HeldClaimant(meter, name: "produced")
            try? produced.addExclusivity(x)
            made.mutate { $0.append(produced) }
            return produced
        }
        try inScope {
            let lonely = ExclusivityScope("kept-lender-release-only-the-group")
            weakScope = lonely
            let child = AsyncBlockOperation { $0.finish() }
            try child.addCondition(condition)
            let group = GroupOperation(operations: [child])
            group.name = "group"
            try group.addExclusivity(x, OperationCategory("y", in: lonely))
            weakGroup = group
            OperationQueue().addOperation(group)
            XCTAssertTrue(eventually(timeout: testTimeout) { made.value.count == 1 })
            XCTAssertTrue(made.value[0].started.wait(timeout: testTimeout))
            try outsider.addCondition(condition)
            OperationQueue().addOperation(outsider)
            XCTAssertTrue(eventually(timeout: testTimeout) { condition.producer?.waiterCount == 2 })
            child.cancel()
            waitFinished(group, timeout: testTimeout)
        }
        // Only the table keeps the group now (its hold on X, kept while the produced operation holds X
        // under it), and only the group's claim keeps the scope.
        XCTAssertTrue(eventually(timeout: 2) { weakScope == nil || weakGroup != nil })
        let produced = made.value[0]
        made.mutate { $0 = [] }
        let alive = (group: weakGroup != nil, scope: weakScope != nil)
        produced.release.signal()
        let finished = eventually(timeout: 10) { produced.isFinished && outsider.isFinished }
        XCTAssertTrue(
            finished,
            "hung: produced finished \(produced.isFinished), outsider \(outsider.isFinished); before the release the group was alive \(alive.group), the scope \(alive.scope)"
        )
        guard finished else {
            // The table's lock is held for good: anything else that touches it hangs.
            FileHandle.standardError.write(Data("kept lender release: the claim table's lock is stuck; exiting\n".utf8))
            exit(4)
        }
        XCTAssertTrue(eventually(timeout: testTimeout) { Gatekeeper.isIdle }, "something stays held")
    }
}
