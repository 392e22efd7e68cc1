import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Stop 52's attack on its fix, along the lines of ATTACK-SURFACES it touches ("windows between two
/// facts", Foundation's barriers and `addOperation`, "the same operation given twice"): one claimant
/// made to depend on the same finished operation from two threads at once (each call moves the count
/// of `addDependency` calls twice, and a finished dependency makes the call announce `isReady` again),
/// while a third adds it to a queue behind a barrier that may be pending, a fourth reads `isReady`, and
/// a fifth may cancel it. Every claimant finishes, executes at most once, and nothing stays held.
final class ReadinessReadOrderAttackTests: BatonTestCase {
    func testTheSameFinishedDependencyAddedTwiceAtOnceAsTheQueueAddsAndReads() throws {
        let trials = ProcessInfo.processInfo.environment["BATON_TRIALS"].flatMap(Int.init) ?? 300
        var random = SplitMix(state: 5253)
        let finishedDependency = BlockOperation {}
        finishedDependency.start()
        var failures: [String] = []
        for trial in 0..<trials {
            let x = OperationCategory("X", in: ExclusivityScope("read-order-attack-\(trial)"))
            let queue = OperationQueue()
            let release = DispatchSemaphore(value: 0)
            let blocker = BlockOperation { _ = release.wait(timeout: .now() + 30) }
            queue.addOperation(blocker)
            let behindBarrier = random.next(2) == 0
            if behindBarrier { queue.addBarrierBlock {} }
            let executions = Locked(0)
            let claimant = AsyncBlockOperation { operation in
                executions.mutate { $0 += 1 }
                operation.finish()
            }
            try claimant.addExclusivity(x)
            let cancels = random.next(4) == 0
            raceAdding(claimant, to: queue, dependingOn: finishedDependency, cancels: cancels, &random)
            release.signal()
            if !eventually(timeout: 10, { claimant.isFinished }) {
                failures.append(
                    "trial \(trial): not finished (barrier \(behindBarrier), cancel \(cancels)) "
                        + "\(claimant.gateWaitDescription() ?? "-") \(FoundationDump.of(claimant))")
                claimant.cancel()
                _ = eventually(timeout: 10) { claimant.isFinished }
            }
            if executions.value > 1 { failures.append("trial \(trial): executed \(executions.value) times") }
            if !cancels && !claimant.isCancelled && executions.value != 1 {
                failures.append("trial \(trial): finished without executing, not cancelled")
            }
            if !eventually(timeout: 5, { Gatekeeper.isIdle }) {
                failures.append("trial \(trial): not idle")
                break
            }
        }
        XCTAssertEqual(failures, [])
    }
}
