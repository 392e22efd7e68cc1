import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Stop 52: the facts a read of `isReady` begins a gate on must hold together. CI hung once (and
/// `QueueControlsLaunchHammerTests` under ThreadSanitizer in about 1 trial in 4,600): a read found no
/// unfinished dependency, then found the operation enqueued, and began its gate; in between, Linux's
/// queue had added the operation behind a pending barrier (a dependency it records without
/// `addDependency`). The operation was granted its category and kept it while the barrier waited for
/// operations that waited for the category. Now the queue's record is read first, and a dependency
/// added with `addDependency` during a read is counted before Foundation records it, so the read
/// that straddles it does not begin the gate.
///
/// Each trial releases the threads together; the window is a preemption between two loads, so most
/// trials miss it, and the trials are many. What is asserted holds in every trial: a category is never
/// held by an operation that waits for a dependency.
final class ReadinessReadOrderTests: BatonTestCase {
    private var trials: Int { ProcessInfo.processInfo.environment["BATON_TRIALS"].flatMap(Int.init) ?? 300 }

    /// An operation added behind a pending barrier while other threads read its `isReady`: its
    /// category stays free until the barrier has run (a probe claiming it runs meanwhile).
    func testAReadStraddlingTheAddBehindABarrierDoesNotBeginTheGate() throws {
        var random = SplitMix(state: 52)
        var failures: [String] = []
        for trial in 0..<trials {
            let x = OperationCategory("X", in: ExclusivityScope("read-order-barrier-\(trial)"))
            let queue = OperationQueue()
            // The barrier waits for the blocker, which executes until it is released.
            let release = DispatchSemaphore(value: 0)
            let blocker = BlockOperation { _ = release.wait(timeout: .now() + 30) }
            queue.addOperation(blocker)
            queue.addBarrierBlock {}
            let claimant = AsyncBlockOperation { $0.finish() }
            try claimant.addExclusivity(x)
            let spins = (0..<4).map { _ in random.next(2000) }
            let line = StartingLine()
            line.thread {
                spinRounds(spins[0])
                queue.addOperation(claimant)
            }
            for reader in 1..<4 {
                line.thread {
                    spinRounds(spins[reader])
                    for _ in 0..<200 where FoundationQueueState.of(claimant) != .waiting { _ = claimant.isReady }
                    for _ in 0..<20 { _ = claimant.isReady }
                }
            }
            XCTAssertTrue(line.release(timeout: 30))
            // The barrier is still pending: X must be free for a probe on another queue.
            let probe = AsyncBlockOperation { $0.finish() }
            try probe.addExclusivity(x)
            OperationQueue().addOperation(probe)
            if !eventually(timeout: 10, { probe.isFinished }) {
                failures.append("trial \(trial): X held behind the barrier: \(probe.gateWaitDescription() ?? "-")")
                probe.cancel()
            }
            release.signal()
            if !eventually(timeout: 10, { claimant.isFinished && probe.isFinished }) {
                failures.append("trial \(trial): claimant did not finish")
                claimant.cancel()
                _ = eventually(timeout: 10) { claimant.isFinished }
            }
            XCTAssertTrue(eventually(timeout: 5) { Gatekeeper.isIdle })
        }
        XCTAssertEqual(failures, [])
    }

    /// An operation in its queue is made to depend on an unfinished operation claiming the same
    /// category, while other threads read its `isReady`: it never holds the category while it waits,
    /// so the dependency runs and both finish (held, they would wait for each other for good).
    func testADependencyAddedDuringAReadIsSeenByTheGate() throws {
        var random = SplitMix(state: 5252)
        var failures: [String] = []
        for trial in 0..<trials {
            let x = OperationCategory("X", in: ExclusivityScope("read-order-dependency-\(trial)"))
            let queue = OperationQueue()
            let dependency = AsyncBlockOperation { $0.finish() }
            try dependency.addExclusivity(x)
            let claimant = AsyncBlockOperation { $0.finish() }
            try claimant.addExclusivity(x)
            let spins = (0..<4).map { _ in random.next(3000) }
            let line = StartingLine()
            line.thread {
                spinRounds(spins[0])
                queue.addOperation(claimant)
            }
            line.thread {
                spinRounds(spins[1])
                claimant.addDependency(dependency)
            }
            for reader in 2..<4 {
                line.thread {
                    spinRounds(spins[reader])
                    for _ in 0..<100 { _ = claimant.isReady }
                }
            }
            XCTAssertTrue(line.release(timeout: 30))
            OperationQueue().addOperation(dependency)
            if !eventually(timeout: 10, { dependency.isFinished && claimant.isFinished }) {
                failures.append(
                    "trial \(trial): dependency \(dependency.gateWaitDescription() ?? "-") finished \(dependency.isFinished); "
                        + "claimant \(claimant.gateWaitDescription() ?? "-") finished \(claimant.isFinished)")
                for operation in [dependency, claimant] { operation.cancel() }
                _ = eventually(timeout: 10) { dependency.isFinished && claimant.isFinished }
            }
            XCTAssertTrue(eventually(timeout: 5) { Gatekeeper.isIdle })
        }
        XCTAssertEqual(failures, [])
    }
}
