import Dispatch
import Foundation
import XCTest

@testable import Baton

/// The attack round on this stop's gate changes, along the surfaces they touch: Foundation's own
/// queue controls (`underlyingQueue` held and released, barriers, suspension, a width of 1,
/// `cancelAllOperations`) used together with claims and late dependencies, and lenders (composites
/// holding a category their children and a produced operation claim under them) cancelled at random
/// moments from threads released together. Each trial ends, nothing executes twice or after a
/// `cancel()` that returned first, the category never has more than one holder executing, and
/// nothing stays held.
final class GateLendingAttackTests: BatonTestCase {
    private func trials(_ fallback: Int) -> Int {
        Int(ProcessInfo.processInfo.environment["GATE_ATTACK_TRIALS"] ?? "") ?? fallback
    }

    /// Claimants of X in a plain queue whose underlying dispatch queue is held at first (so that the
    /// queue dispatches operations it cannot start yet), with a barrier between them; dependencies,
    /// half of them claiming X too, are added late to every other claimant from one thread while
    /// others release the
    /// dispatch queue, toggle the queue's suspension, finish the holder and cancel.
    func testClaimantsOnAHeldUnderlyingQueueWithBarriersAndLateDependencies() throws {
        for trial in 0..<trials(150) {
            let x = OperationCategory("X", in: ExclusivityScope("attack-underlying-\(trial)"))
            let meter = ConcurrencyMeter()
            let violations = Locked<[String]>([])
            let holder = try holding(x)
            let workers = DispatchQueue(label: "attack workers \(trial)")
            workers.suspend()
            let queue = OperationQueue()
            queue.underlyingQueue = workers
            if trial % 2 == 0 { queue.maxConcurrentOperationCount = 1 }
            let claimants = try (0..<8).map { index -> HammeredClaimant in
                let claimant = HammeredClaimant([meter], violations: violations, name: "c\(index)")
                try claimant.addExclusivity(x)
                if index % 3 == 1 { try claimant.addCondition(.block("ok") { true }) }
                return claimant
            }
            queue.addOperations(Array(claimants[..<4]), waitUntilFinished: false)
            queue.addBarrierBlock {}
            queue.addOperations(Array(claimants[4...]), waitUntilFinished: false)
            let dependencies = try (0..<4).map { index -> HammeredClaimant in
                let dependency = HammeredClaimant(index % 2 == 0 ? [meter] : [], violations: violations, name: "d\(index)")
                if index % 2 == 0 { try dependency.addExclusivity(x) }
                return dependency
            }
            let line = StartingLine()
            line.thread {
                // Every other claimant: the ones between can be granted while the others give X back.
                for (index, dependency) in dependencies.enumerated() { claimants[index * 2].addDependency(dependency) }
                OperationQueue().addOperations(dependencies, waitUntilFinished: false)
            }
            line.thread { workers.resume() }
            line.thread { holder.finish(with: 0) }
            line.thread {
                for _ in 0..<4 {
                    queue.isSuspended = true
                    queue.isSuspended = false
                }
            }
            line.thread {
                var random = SplitMix(state: UInt64(trial))
                for _ in 0..<2 { claimants[random.next(8)].cancelChecked() }
                if trial % 7 == 3 { queue.cancelAllOperations() }
            }
            XCTAssertTrue(line.release(timeout: 10), "trial \(trial): a thread never returned")
            guard eventually(timeout: testTimeout, { (claimants + dependencies).allSatisfy(\.isFinished) }) else {
                XCTFail("trial \(trial): never finished\n" + (claimants + dependencies).map(\.gateDump).joined(separator: "\n"))
                break
            }
            XCTAssertTrue(
                eventually(timeout: testTimeout) { (claimants + dependencies).allSatisfy { $0.finishes.value == 1 } },
                "trial \(trial)")
            XCTAssertTrue((claimants + dependencies).allSatisfy { $0.executions.value <= 1 }, "trial \(trial)")
            XCTAssertEqual(violations.value, [], "trial \(trial)")
            XCTAssertLessThanOrEqual(meter.most, 1, "trial \(trial): X had two holders executing")
            XCTAssertTrue(eventually(timeout: testTimeout) { Gatekeeper.isIdle }, "trial \(trial): something stays held")
            if !violations.value.isEmpty || meter.most > 1 { break }
        }
    }

    /// Two levels of lenders: an outer group holds X and lends it to a child and to an inner group,
    /// which lends it to its own child and to a condition's produced operation made for another of
    /// its children; an outsider at the top shares the condition, and two holders of X at the top ask
    /// (one at once, one as the outer group finishes). The condition's child, the inner group, the
    /// outsider and the outer group are cancelled from threads released together, each in some
    /// trials. Every leaf claiming X is metered: at most one executes at a time, whichever lender
    /// finished first.
    func testNestedLendersCancelledAtRandomNeverLetTwoHoldersExecute() throws {
        for trial in 0..<trials(200) {
            let x = OperationCategory("X", in: ExclusivityScope("attack-nested-lenders-\(trial)"))
            let meter = ConcurrencyMeter()
            let leaf = { (name: String) throws -> MeteredOperation in
                let operation = MeteredOperation(meter, name: name, lingers: 0...150)
                try operation.addExclusivity(x)
                return operation
            }
            let condition = needsProduced {
                let produced = MeteredOperation(meter, name: "produced", lingers: 0...150)
                try? produced.addExclusivity(x)
                return produced
            }
            let waiter = AsyncBlockOperation { $0.finish() }
            try waiter.addCondition(condition)
            let inner = GroupOperation(operations: [waiter, try leaf("inner child")])
            try inner.addExclusivity(x)
            let outer = GroupOperation(operations: [inner, try leaf("outer child")])
            try outer.addExclusivity(x)
            let outsider = AsyncBlockOperation { $0.finish() }
            try outsider.addCondition(condition)
            let early = try leaf("early holder")
            let late = try leaf("late holder")
            let queue = OperationQueue()
            outer.completionBlock = { queue.addOperation(late) }
            queue.addOperation(outer)
            queue.addOperation(outsider)
            queue.addOperation(early)
            var random = SplitMix(state: UInt64(trial &* 7 &+ 1))
            let cancels = (
                waiter: random.next(2) == 0, inner: random.next(4) == 0, outsider: random.next(4) == 0, outer: random.next(8) == 0
            )
            let spins = (0..<4).map { _ in random.next(20_000) }
            let line = StartingLine()
            let cancelled: [(Bool, Operation)] = [
                (cancels.waiter, waiter), (cancels.inner, inner), (cancels.outsider, outsider), (cancels.outer, outer),
            ]
            for (index, (cancel, operation)) in cancelled.enumerated() {
                line.thread {
                    spinRounds(spins[index])
                    if cancel { operation.cancel() }
                }
            }
            XCTAssertTrue(line.release(timeout: 10), "trial \(trial): a thread never returned")
            let everything: [Operation] = [outer, inner, waiter, outsider, early, late]
            let ended = eventually(timeout: testTimeout) { everything.allSatisfy(\.isFinished) }
            XCTAssertTrue(
                ended,
                "trial \(trial) \(cancels): never ended: "
                    + everything.map { "\($0.name ?? "\(type(of: $0))") finished \($0.isFinished)" }.joined(separator: ", "))
            XCTAssertLessThanOrEqual(meter.most, 1, "trial \(trial) \(cancels): X had two holders executing")
            XCTAssertTrue(eventually(timeout: testTimeout) { Gatekeeper.isIdle }, "trial \(trial): something stays held")
            if !ended || meter.most > 1 { break }
        }
    }
}
