import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Stop 62's adversarial round on claims taken at the start in a plain `OperationQueue` (stop 61): a
/// claimant whose start returned, waiting for its category, attacked along the shapes that start,
/// finish, cancel or drop it from elsewhere. (An extension: it shares `PlainQueueClaimTests`' helpers.)
extension PlainQueueClaimTests {
    /// Finished by hand while it waits at its start: as for any operation not started yet, the finish
    /// is kept until its start (`cancel()` is what ends a waiting operation at once). Its grant then
    /// finishes it with that result, once, without executing it, and hands the category on.
    func testAClaimantFinishedByHandWhileItWaitsAtItsStartFinishesAtItsGrantWithoutExecuting() throws {
        let x = OperationCategory("x", in: scope())
        let holder = try holding(x)
        let queue = OperationQueue()
        let first = ManualOperation(name: "first")
        let second = ManualOperation(name: "second")
        try first.addExclusivity(x)
        try second.addExclusivity(x)
        let finishes = Locked(0)
        first.observeCompletionForTests { finishes.increment() }
        queue.addOperation(first)
        waitingAtItsStart(first)
        queue.addOperation(second)
        waitingAtItsStart(second)
        first.finish(with: 7)
        XCTAssertFalse(first.isFinished, "finished before its start")
        holder.finish(with: 0)
        waitFinished(first)
        XCTAssertEqual(first.outcome?.output, 7)
        XCTAssertTrue(second.started.wait(), "the next claimant never got x")
        second.finish(with: 1)
        waitFinished(second)
        XCTAssertTrue(eventually { finishes.value > 0 })
        XCTAssertEqual(finishes.value, 1, "finished twice")
        XCTAssertEqual(first.executions.value, 0, "it executed after it had finished")
        XCTAssertTrue(eventually { queue.operationCount == 0 }, "its queue still lists one")
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// `cancelAllOperations()` on a queue whose claimants wait at their starts: every one ends
    /// cancelled, unexecuted, and leaves the line; a claimant elsewhere gets the category next.
    func testCancellingAllOfAPlainQueueEndsItsWaitingClaimants() throws {
        let x = OperationCategory("x", in: scope())
        let holder = try holding(x)
        let queue = OperationQueue()
        let waiters = try (0..<20).map { index -> ManualOperation in
            let waiter = ManualOperation(name: "w\(index)")
            try waiter.addExclusivity(x)
            queue.addOperation(waiter)
            return waiter
        }
        for waiter in waiters { waitingAtItsStart(waiter) }
        let elsewhere = ManualOperation(name: "elsewhere")
        try elsewhere.addExclusivity(x)
        OperationQueue().addOperation(elsewhere)
        XCTAssertTrue(eventually { elsewhere.gateWaitDescription() != nil })
        queue.cancelAllOperations()
        for waiter in waiters { waitFinished(waiter) }
        XCTAssertTrue(waiters.allSatisfy { $0.isCancelled && $0.executions.value == 0 })
        holder.finish(with: 0)
        XCTAssertTrue(elsewhere.started.wait(), "the claimant elsewhere never got x")
        elsewhere.finish(with: 1)
        waitFinished(elsewhere)
        XCTAssertTrue(eventually { queue.operationCount == 0 }, "its queue still lists one")
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// A plain queue nobody references any more while its claimant waits at its start: the grant
    /// still executes the claimant, which finishes and is freed.
    func testAClaimantOfAQueueNobodyHoldsIsExecutedByItsGrantAndFreed() throws {
        let x = OperationCategory("x", in: scope())
        let holder = try holding(x)
        weak var weakClaimant: ManualOperation?
        weak var weakQueue: OperationQueue?
        let started = Gate()
        do {
            let claimant = ManualOperation(name: "claimant")
            try claimant.addExclusivity(x)
            claimant.observeCompletionForTests {}
            let queue = OperationQueue()
            queue.addOperation(claimant)
            waitingAtItsStart(claimant)
            weakClaimant = claimant
            weakQueue = queue
            DispatchQueue.global().async {
                if claimant.started.wait() { started.open() }
                claimant.finish(with: 1)
            }
        }
        holder.finish(with: 0)
        XCTAssertTrue(started.wait(), "the grant never executed it")
        XCTAssertTrue(eventually { weakClaimant == nil }, "the claimant is never freed")
        XCTAssertTrue(eventually { weakQueue == nil }, "its queue is never freed")
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// `waitUntilAllOperationsAreFinished()` on a plain queue whose claimant waits at its start
    /// returns once the grant has executed it and it has finished.
    func testWaitingForAllOfAPlainQueueReturnsOnceItsWaitingClaimantIsGranted() throws {
        let x = OperationCategory("x", in: scope())
        let holder = try holding(x)
        let queue = OperationQueue()
        let claimant = ManualOperation(name: "claimant")
        try claimant.addExclusivity(x)
        queue.addOperation(claimant)
        waitingAtItsStart(claimant)
        let returned = Gate()
        DispatchQueue.global().async {
            queue.waitUntilAllOperationsAreFinished()
            returned.open()
        }
        holder.finish(with: 0)
        XCTAssertTrue(claimant.started.wait(), "the grant never executed it")
        claimant.finish(with: 1)
        XCTAssertTrue(returned.wait(), "waitUntilAllOperationsAreFinished never returned")
    }

    /// A barrier added behind claimants that wait at their starts runs after them (they are started:
    /// it waits for them to finish), and a claimant added after the barrier waits for it.
    func testABarrierBehindWaitingClaimantsRunsAfterThem() throws {
        let x = OperationCategory("x", in: scope())
        let holder = try holding(x)
        let queue = OperationQueue()
        let order = Locked<[String]>([])
        let before = try (0..<3).map { index -> AsyncBlockOperation in
            let operation = AsyncBlockOperation { operation in
                order.append("b\(index)")
                operation.finish()
            }
            try operation.addExclusivity(x)
            queue.addOperation(operation)
            // The order they ask in: a queue's starts of operations added together race.
            waitingAtItsStart(operation)
            return operation
        }
        queue.addBarrierBlock { order.append("barrier") }
        let after = AsyncBlockOperation { operation in
            order.append("after")
            operation.finish()
        }
        try after.addExclusivity(x)
        queue.addOperation(after)
        holder.finish(with: 0)
        waitFinished(after)
        for operation in before { waitFinished(operation) }
        XCTAssertEqual(order.value, ["b0", "b1", "b2", "barrier", "after"])
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// A limit of 2 over claimants waiting at their starts in two plain queues, some cancelled from
    /// another thread as the holders finish: never more than two execute at once, every one ends
    /// once, nothing stays held.
    func testALimitOfTwoOverClaimantsWaitingAtTheirStartsHammer() throws {
        let trials = Int(ProcessInfo.processInfo.environment["GATE_ATTACK_TRIALS"] ?? "") ?? 100
        for trial in 0..<trials {
            let scope = self.scope()
            try scope.setLimit(2, for: "x")
            let x = OperationCategory("x", in: scope)
            let meter = ConcurrencyMeter()
            let violations = Locked<[String]>([])
            let holders = try [holding(x), holding(x)]
            let queues = [OperationQueue(), OperationQueue()]
            let claimants = try (0..<12).map { index -> HammeredClaimant in
                let claimant = HammeredClaimant([meter], violations: violations, name: "c\(index)")
                try claimant.addExclusivity(x)
                queues[index % 2].addOperation(claimant)
                return claimant
            }
            let line = StartingLine()
            line.thread { holders[0].finish(with: 0) }
            line.thread { holders[1].finish(with: 0) }
            line.thread { for index in stride(from: 0, to: 12, by: 5) { claimants[index].cancelChecked() } }
            XCTAssertTrue(line.release(timeout: testTimeout), "trial \(trial): a thread never returned")
            for claimant in claimants { waitFinished(claimant) }
            XCTAssertEqual(violations.value, [], "trial \(trial)")
            XCTAssertLessThanOrEqual(meter.most, 2, "trial \(trial): three holders executed at once")
            XCTAssertTrue(eventually { claimants.allSatisfy { $0.finishes.value == 1 } }, "trial \(trial): finishes")
            XCTAssertTrue(eventually { queues.allSatisfy { $0.operationCount == 0 } }, "trial \(trial): a queue still lists one")
            XCTAssertTrue(eventually { Gatekeeper.isIdle }, "trial \(trial): something stays held")
        }
    }

    /// Claimants of {a, b} and {b, a} in plain queues, waiting at their starts behind holders of each,
    /// released together: all of them execute, never two holders of a category at once (all or none:
    /// no two can wait for each other).
    func testClaimantsOfTwoCategoriesInEitherOrderWaitingAtTheirStartsNeverDeadlock() throws {
        let trials = Int(ProcessInfo.processInfo.environment["GATE_ATTACK_TRIALS"] ?? "") ?? 100
        for trial in 0..<trials {
            let scope = self.scope()
            let a = OperationCategory("a", in: scope)
            let b = OperationCategory("b", in: scope)
            let meterA = ConcurrencyMeter()
            let meterB = ConcurrencyMeter()
            let violations = Locked<[String]>([])
            let holders = try [holding(a), holding(b)]
            let queues = [OperationQueue(), OperationQueue()]
            let claimants = try (0..<10).map { index -> HammeredClaimant in
                let claimant = HammeredClaimant([meterA, meterB], violations: violations, name: "c\(index)")
                if index % 2 == 0 { try claimant.addExclusivity(a, b) } else { try claimant.addExclusivity(b, a) }
                queues[index % 2].addOperation(claimant)
                return claimant
            }
            let line = StartingLine()
            line.thread { holders[0].finish(with: 0) }
            line.thread { holders[1].finish(with: 0) }
            XCTAssertTrue(line.release(timeout: testTimeout), "trial \(trial): a thread never returned")
            for claimant in claimants { waitFinished(claimant) }
            XCTAssertEqual(violations.value, [], "trial \(trial)")
            XCTAssertLessThanOrEqual(meterA.most, 1, "trial \(trial): two holders of a executed at once")
            XCTAssertTrue(claimants.allSatisfy { $0.executions.value == 1 }, "trial \(trial): one did not execute once")
            XCTAssertTrue(eventually { Gatekeeper.isIdle }, "trial \(trial): something stays held")
        }
    }

    /// A condition that answers late, on a claimant in a plain queue whose start has begun passing
    /// it, raced by `cancel()`: it ends cancelled once, never executes, and holds nothing.
    func testCancellingAClaimantWhileItsConditionAnswersAtItsStartEndsItOnce() throws {
        let trials = Int(ProcessInfo.processInfo.environment["GATE_ATTACK_TRIALS"] ?? "") ?? 200
        for trial in 0..<trials {
            let x = OperationCategory("x", in: scope())
            let flag = ConditionFlag("go")
            let violations = Locked<[String]>([])
            let claimant = HammeredClaimant([], violations: violations, name: "claimant")
            try claimant.addExclusivity(x)
            try claimant.addCondition(.waitUntil(flag, timeout: .seconds(60)))
            let queue = OperationQueue()
            queue.addOperation(claimant)
            XCTAssertTrue(eventually { claimant.gateWaitDescription() == "waiting for conditions" }, "trial \(trial)")
            let line = StartingLine()
            line.thread { flag.set() }
            line.thread { claimant.cancelChecked() }
            XCTAssertTrue(line.release(timeout: testTimeout), "trial \(trial): a thread never returned")
            waitFinished(claimant)
            XCTAssertEqual(violations.value, [], "trial \(trial)")
            XCTAssertLessThanOrEqual(claimant.executions.value, 1, "trial \(trial)")
            XCTAssertTrue(eventually { claimant.finishes.value == 1 }, "trial \(trial): finishes \(claimant.finishes.value)")
            XCTAssertTrue(eventually { queue.operationCount == 0 }, "trial \(trial): its queue still lists it")
            XCTAssertTrue(eventually { Gatekeeper.isIdle }, "trial \(trial): something stays held")
        }
    }
}
