import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Executes: enters the meter, opens `started`, then waits (off the worker) for `release` before it
/// leaves the meter and finishes. Ignores cancellation while it executes (a slow acknowledgement).
final class HeldClaimant: AsyncOperation, @unchecked Sendable {
    let meter: ConcurrencyMeter
    let started = Gate()
    let release = DispatchSemaphore(value: 0)
    let executions = Locked(0)
    init(_ meter: ConcurrencyMeter, name: String) {
        self.meter = meter
        super.init()
        self.name = name
    }
    override func execute() {
        executions.increment()
        meter.enter()
        started.open()
        DispatchQueue.global().async {
            _ = self.release.wait(timeout: .now() + 30)
            self.meter.leave()
            self.finish()
        }
    }
}

/// A gate's adversarial round on parked and produced work: a condition's produced dependency made for
/// a composite's child (it claims at the top and may outlive the composite), a dependency added or a
/// queue suspended while a claimant waits (the grant is given back rather than held while it cannot
/// start), and a waiter started by hand that is then added to a queue.
final class GateParkingAttackTests: BatonTestCase {
    /// A condition's produced dependency is shared by every operation that waits on the condition, so
    /// it is no composite's child: made for a child of a group, it claims its categories at the top,
    /// not in the group's lane, and still excludes others after the group has finished without it
    /// (its waiter cancelled, the produced operation slow to acknowledge the cancel).
    func testAProducedDependencyMadeForAGroupsChildClaimsAtTheTopAndOutlivesTheGroup() throws {
        let scope = ExclusivityScope("attack-produced")
        let x = OperationCategory("X", in: scope)
        let meter = ConcurrencyMeter()
        let produced = HeldClaimant(meter, name: "produced")
        try produced.addExclusivity(x)
        let condition = Condition("needs produced", producing: { _ in produced }) { _, answer in answer(.satisfied) }
        let child = AsyncBlockOperation { $0.finish() }
        child.name = "child"
        try child.addCondition(condition)
        let group = GroupOperation(operations: [child])
        group.name = "group"
        try group.addExclusivity(OperationCategory("Y", in: scope))
        OperationQueue().addOperation(group)
        XCTAssertTrue(produced.started.wait(timeout: testTimeout), "the produced operation never started")

        child.cancel()
        waitFinished(group, timeout: testTimeout)
        XCTAssertTrue(produced.isCancelled, "its last waiter left: it is cancelled")

        // X is held at the top by the produced operation, which still executes.
        let other = HeldClaimant(meter, name: "other")
        try other.addExclusivity(x)
        OperationQueue().addOperation(other)
        XCTAssertTrue(eventually(timeout: testTimeout) { other.gateWaitDescription()?.contains("produced") == true })
        XCTAssertEqual(other.executions.value, 0, "two holders of X (limit 1) executed at once")
        produced.release.signal()
        XCTAssertTrue(other.started.wait(timeout: testTimeout))
        other.release.signal()
        waitFinished(other, timeout: testTimeout)
        waitFinished(produced, timeout: testTimeout)
        XCTAssertEqual(meter.most, 1, "two holders of X executed at once")
    }

    /// A child of a group that holds X needs a condition whose produced operation claims X: the group
    /// waits for the child, the child for the produced operation, and that (at the top) for the group.
    /// The child is refused at once with `wouldDeadlock` naming X and the group (wrapped in
    /// `conditionFailed`), the produced operation never runs, and the group finishes.
    func testAChildWhoseProducedDependencyNeedsTheGroupsCategoryIsRefusedAtOnce() throws {
        let x = OperationCategory("X", in: ExclusivityScope("attack-produced-cycle"))
        let ran = Locked(0)
        let condition = Condition(
            "needs login",
            producing: { _ in
                let login = AsyncBlockOperation {
                    ran.increment()
                    $0.finish()
                }
                try? login.addExclusivity(x)
                return login
            }
        ) { _, answer in answer(.satisfied) }
        let child = AsyncBlockOperation { $0.finish() }
        try child.addCondition(condition)
        let group = GroupOperation(operations: [child])
        group.name = "sync"
        try group.addExclusivity(x)
        OperationQueue().addOperation(group)
        waitFinished(group, timeout: testTimeout)
        guard case .failed(BatonError.conditionFailed(_, let name, let underlying))? = child.outcome else {
            return XCTFail("\(String(describing: child.outcome))")
        }
        XCTAssertEqual(name, "needs login")
        guard case BatonError.wouldDeadlock(_, let reason) = underlying else { return XCTFail("\(underlying)") }
        XCTAssertTrue(reason.contains("'X'") && reason.contains("sync"), reason)
        XCTAssertEqual(ran.value, 0)
    }

    /// A gated operation waiting for its category in a plain queue is given a dependency (Foundation's
    /// `addDependency` after enqueue) that claims the same category. The docs: claims are taken only
    /// after the dependencies have finished. Expected: the dependency runs, then the operation.
    func testADependencyAddedWhileWaitingForACategoryThatClaimsItDoesNotDeadlock() throws {
        let x = OperationCategory("attack-late-dependency-\(UUID())")
        let queue = OperationQueue()
        let holder = try holding(x, on: queue)
        let waiter = ManualOperation(name: "waiter")
        try waiter.addExclusivity(x)
        queue.addOperation(waiter)
        XCTAssertTrue(eventually(timeout: testTimeout) { waiter.gateWaitDescription() != nil }, "never waited")
        let dependency = ManualOperation(name: "dependency")
        try dependency.addExclusivity(x)
        waiter.addDependency(dependency)
        queue.addOperation(dependency)
        holder.finish(with: 0)
        let ran = dependency.started.wait(timeout: testTimeout)
        XCTAssertTrue(ran, "deadlock: the waiter holds X while it waits for its dependency, which waits for X")
        dependency.finish(with: 1)
        XCTAssertTrue(waiter.started.wait(timeout: testTimeout))
        waiter.finish(with: 2)
        waitFinished(waiter, timeout: testTimeout)
        if !ran {
            // Unstick it so the test process can go on.
            waiter.cancel()
            dependency.cancel()
        }
    }

    /// The limit of a plain `OperationQueue`: Foundation does not say which queue holds an operation,
    /// so a grant that arrives while the operation's plain queue is suspended is kept, and the
    /// operation holds its category, parked, until the queue resumes (Conditions.md says so). Pinned:
    /// the other claimant waits for it, and nothing is lost when the queue resumes. (A composite's
    /// queue, or any queue a Baton entry point launches on, gives the grant back: see the next test.)
    func testAGrantWhileItsPlainQueueIsSuspendedIsKeptUntilTheQueueResumes() throws {
        let x = OperationCategory("x", in: ExclusivityScope("attack-suspended-waiter"))
        let holder = try holding(x)
        let queue = OperationQueue()
        let parked = ManualOperation(name: "parked")
        try parked.addExclusivity(x)
        queue.addOperation(parked)
        XCTAssertTrue(eventually(timeout: testTimeout) { parked.gateWaitDescription() != nil }, "never waited")
        queue.isSuspended = true
        holder.finish(with: 0)
        let other = ManualOperation(name: "other")
        try other.addExclusivity(x)
        OperationQueue().addOperation(other)
        XCTAssertTrue(eventually(timeout: testTimeout) { other.gateWaitDescription()?.contains("parked") == true })
        XCTAssertEqual(parked.executions.value, 0)
        queue.isSuspended = false
        XCTAssertTrue(parked.started.wait(timeout: testTimeout))
        parked.finish(with: 2)
        XCTAssertTrue(other.started.wait(timeout: testTimeout))
        other.finish(with: 1)
        waitFinished(parked, timeout: testTimeout)
        waitFinished(other, timeout: testTimeout)
    }

    /// A group suspended while a child waits for X (the group lends nothing): the grant is given back
    /// while the group's queue is suspended, the other claimant runs, and the child runs on resume.
    func testAChildWaitingInASuspendedGroupDoesNotHoldItsCategoryWhileParked() throws {
        let x = OperationCategory("x", in: ExclusivityScope("attack-suspended-group"))
        let holder = try holding(x)
        let child = ManualOperation(name: "child")
        try child.addExclusivity(x)
        let group = GroupOperation(operations: [child])
        OperationQueue().addOperation(group)
        XCTAssertTrue(eventually(timeout: testTimeout) { child.gateWaitDescription() != nil }, "never waited")
        group.suspend()
        holder.finish(with: 0)
        let other = ManualOperation(name: "other")
        try other.addExclusivity(x)
        OperationQueue().addOperation(other)
        let ran = other.started.wait(timeout: testTimeout)
        XCTAssertTrue(ran, "a parked child of a suspended group holds X: \(other.gateWaitDescription() ?? "-")")
        XCTAssertEqual(child.executions.value, 0)
        other.finish(with: 1)
        group.resume()
        XCTAssertTrue(child.started.wait(timeout: testTimeout))
        child.finish(with: 2)
        waitFinished(group, timeout: testTimeout)
        waitFinished(other, timeout: testTimeout)
    }

    /// Started by hand while X is held (it waits at its gate, unexecuted, `isExecuting == false`), then
    /// added to a plain queue. When X is given back it must execute exactly once, and finish.
    func testAWaiterStartedByHandThenAddedToAQueueRunsOnce() throws {
        var failures = 0
        for trial in 0..<20 {
            let x = OperationCategory("x", in: ExclusivityScope("attack-hand-then-queue-\(trial)"))
            let holder = try holding(x)
            let waiter = ManualOperation(name: "waiter")
            try waiter.addExclusivity(x)
            waiter.start()
            XCTAssertFalse(waiter.isExecuting)
            XCTAssertTrue(eventually(timeout: testTimeout) { waiter.gateWaitDescription() != nil }, "never waited")
            let queue = OperationQueue()
            queue.addOperation(waiter)
            holder.finish(with: 0)
            if !waiter.started.wait(timeout: testTimeout) {
                failures += 1
                XCTFail(
                    "trial \(trial): never executed; isReady \(waiter.isReady), executing \(waiter.isExecuting), diagnostics \(diagnostics.kinds(for: waiter))"
                )
                break
            }
            waiter.finish(with: 1)
            waitFinished(waiter, timeout: testTimeout)
            XCTAssertEqual(waiter.executions.value, 1)
        }
        XCTAssertEqual(failures, 0)
    }

    /// The produced dependency was made for a group's child; the group finishes and is released while
    /// another operation (on another queue) still waits for it: it runs on, and everything is freed.
    func testAProducedDependencyOutlivingTheGroupWhoseQueueRunsItFinishesAndFreesEverything() throws {
        weak var weakGroup: GroupOperation?
        weak var weakProduced: HeldClaimant?
        let meter = ConcurrencyMeter()
        let made = Locked<[HeldClaimant]>([])
        let outsider = AsyncBlockOperation { $0.finish() }
        try inScope {
            let condition = Condition(
                "needs produced",
                producing: { _ in
                    let produced = HeldClaimant(meter, name: "produced")
                    made.mutate { $0.append(produced) }
                    return produced
                }
            ) { _, answer in answer(.satisfied) }
            let child = AsyncBlockOperation { $0.finish() }
            try child.addCondition(condition)
            let group = GroupOperation(operations: [child])
            weakGroup = group
            OperationQueue().addOperation(group)
            XCTAssertTrue(eventually(timeout: testTimeout) { made.value.count == 1 })
            let produced = made.value[0]
            made.mutate { $0 = [] }
            weakProduced = produced
            XCTAssertTrue(produced.started.wait(timeout: testTimeout))
            try outsider.addCondition(condition)
            OperationQueue().addOperation(outsider)
            // Both wait for it: the child, and the outsider once it evaluates.
            XCTAssertTrue(eventually(timeout: testTimeout) { condition.producer?.waiterCount == 2 })
            child.cancel()
            waitFinished(group, timeout: testTimeout)
        }
        XCTAssertTrue(eventually(timeout: testTimeout) { weakGroup == nil }, "the group was not freed")
        XCTAssertEqual(made.value.count, 0, "made again: the outsider did not wait for the first one")
        XCTAssertNotNil(weakProduced)
        weakProduced?.release.signal()
        waitFinished(outsider, timeout: testTimeout)
        XCTAssertEqual(outsider.outcome?.isSuccess, true, "\(String(describing: outsider.outcome))")
        XCTAssertTrue(eventually(timeout: testTimeout) { weakProduced == nil }, "the produced operation was not freed")
    }

    /// A condition whose produced operation claims Y, shared by a child of a group that holds X and
    /// by an operation on a plain queue that is in no composite. Y is free. The produced operation is
    /// launched on the group's child queue, where Y cannot be lent, and fails with wouldDeadlock: the
    /// outsider, which holds nothing and is inside nothing, fails with it.
    func testAnOutsiderSharingAConditionWithAHoldingGroupsChildIsNotFailedByTheGroupsLending() throws {
        let scope = ExclusivityScope("attack-produced-lend")
        let x = OperationCategory("X", in: scope)
        let y = OperationCategory("Y", in: scope)
        let childStarted = Gate()
        let condition = Condition(
            "needs produced",
            producing: { _ in
                let produced = AsyncBlockOperation { $0.finish() }
                try? produced.addExclusivity(y)
                return produced
            }
        ) { _, answer in answer(.satisfied) }
        let child = AsyncBlockOperation { $0.finish() }
        try child.addCondition(condition)
        // Keeps the group executing until the outsider has finished.
        let keeper = AsyncBlockOperation { operation in
            childStarted.open()
            DispatchQueue.global().async { operation.finish() }
        }
        let group = GroupOperation(operations: [child, keeper])
        try group.addExclusivity(x)
        OperationQueue().addOperation(group)
        XCTAssertTrue(childStarted.wait(timeout: testTimeout))
        waitFinished(group, timeout: testTimeout)
        let outsider = AsyncBlockOperation { $0.finish() }
        try outsider.addCondition(condition)
        OperationQueue().addOperation(outsider)
        waitFinished(outsider, timeout: testTimeout)
        XCTAssertEqual(
            outsider.outcome?.isSuccess, true,
            "the outsider failed because the group's child needed the condition first: \(String(describing: outsider.outcome))")
        XCTAssertEqual(child.outcome?.isSuccess, true, "the child: \(String(describing: child.outcome))")
    }
}
