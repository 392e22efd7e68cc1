import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Stop 45 (the two reviews of the barrier fix left it untested): barriers added from inside a group's
/// children onto the group's own queue, nested groups (up to three levels) whose children claim
/// categories their claiming ancestors lend them, launched by Baton on a queue of width 1 to 3 among
/// outside claimants and behind a barrier there. Everything finishes and nothing stays held.
final class CompositeBarrierHammerTests: BatonTestCase {
    func testBarrierFromInsideAChildAmongClaimingSiblings() throws {
        let trials = ProcessInfo.processInfo.environment["BATON_TRIALS"].flatMap(Int.init) ?? 200
        var random = SplitMix(state: UInt64(ProcessInfo.processInfo.environment["BATON_SEED"].flatMap(Int.init) ?? 5))
        var failures = 0
        let barriersInChildQueues = Locked(0)
        for trial in 0..<trials {
            let scope = ExclusivityScope("explore-\(trial)")
            let x = OperationCategory("X", in: scope)
            let y = OperationCategory("Y", in: scope)
            let executions = Locked(0)
            func leaf(_ categories: [OperationCategory], barrier: Bool) throws -> AsyncBlockOperation {
                let op = AsyncBlockOperation { op in
                    executions.increment()
                    if barrier, let queue = OperationQueue.current {
                        if queue is ChildQueue { barriersInChildQueues.increment() }
                        queue.addBarrierBlock {}
                    }
                    DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(Int.random(in: 0...200))) {
                        op.finish()
                    }
                }
                if !categories.isEmpty { try op.addExclusivity(categories) }
                return op
            }
            var leaves = 0
            func group(depth: Int) throws -> GroupOperation {
                var children: [Operation] = []
                for _ in 0..<(2 + random.next(3)) {
                    if depth < 2 && random.next(3) == 0 {
                        children.append(try group(depth: depth + 1))
                    } else {
                        let claims: [OperationCategory] = random.next(2) == 0 ? [x] : (random.next(2) == 0 ? [y] : [])
                        children.append(try leaf(claims, barrier: random.next(3) == 0))
                        leaves += 1
                    }
                }
                let g = GroupOperation(operations: children)
                if depth == 0 || random.next(2) == 0 { try g.addExclusivity([x, y]) }
                return g
            }
            let groups = try (0..<3).map { _ in try group(depth: 0) }
            let outside = try (0..<4).map { _ in try leaf(random.next(2) == 0 ? [x] : [x, y], barrier: false) }
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 1 + random.next(3)
            let spins = groups.map { _ in random.next(2000) }
            let line = StartingLine()
            line.thread {
                for (g, spin) in zip(groups, spins) {
                    spinRounds(spin)
                    DispatchQueue.global().async { _ = try? g.runForOutcome(on: queue, timeout: .seconds(60)) }
                }
            }
            line.thread {
                for o in outside {
                    queue.addOperation(o)
                }
                queue.addBarrierBlock {}
            }
            XCTAssertTrue(line.release(timeout: 30))
            let all: [AsyncOperation] = groups + outside
            let done = eventually(timeout: 15) { all.allSatisfy(\.isFinished) }
            if !done {
                failures += 1
                print(
                    "trial \(trial): hang\n"
                        + all.map { "\($0): finished \($0.isFinished) \($0.gateWaitDescription() ?? "-")" }.joined(
                            separator: "\n"))
                for op in all { op.cancel() }
                _ = eventually(timeout: 10) { all.allSatisfy(\.isFinished) }
            }
            if !eventually(timeout: 5, { Gatekeeper.isIdle }) {
                failures += 1
                print("trial \(trial): not idle")
                break
            }
        }
        XCTAssertEqual(failures, 0)
        XCTAssertGreaterThan(barriersInChildQueues.value, 0, "no barrier reached a composite's own queue")
    }
}
