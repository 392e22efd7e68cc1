import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Attacks on what this round changed in the gates, from many threads released by one gate: the
/// re-announced readiness (Foundation's two-step readiness cache), waits inside a holder racing the
/// claimant's own launch, timeout timers racing the finish and a rerun, and flag waits racing `set`
/// and a cancellation. Each shape fails by hanging, so every wait is bounded.
final class GateRaceAttackTests: BatonTestCase {
    private var pendingTimers: Int { Deadlines.state.withLock { $0.count } }

    /// Gated operations (a condition answered from another thread) on a serial queue that is running,
    /// suspended and resumed, while four threads each add a finished dependency to one of them: every
    /// operation runs exactly once, one at a time, and none is left behind.
    func testGatedOperationsGivenDependenciesWhileTheirSerialQueueRunsAllRunOnceOneAtATime() throws {
        for trial in 0..<300 {
            let meter = ConcurrencyMeter()
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 1
            let operations = (0..<4).map { _ in MeteredOperation(meter) }
            for operation in operations {
                try operation.addCondition(
                    Condition("later") { _, answer in DispatchQueue.global().async { answer(.satisfied) } })
            }
            // Finished dependencies: adding one makes Foundation re-read and cache the readiness. (A
            // pending one taken off again would do it twice, but Linux's Foundation then never runs
            // even a plain BlockOperation: removeDependency leaves its count of unfinished ones.)
            let finishedDependency = BlockOperation()
            finishedDependency.start()
            let go = DispatchSemaphore(value: 0)
            let added = DispatchGroup()
            for operation in operations {
                DispatchQueue.global().async(group: added) {
                    go.wait()
                    operation.addDependency(finishedDependency)
                }
            }
            if trial.isMultiple(of: 2) { queue.isSuspended = true }
            queue.addOperations(operations, waitUntilFinished: false)
            for _ in operations { go.signal() }
            XCTAssertEqual(added.wait(timeout: .now() + testTimeout), .success)
            queue.isSuspended = false
            guard eventually({ operations.allSatisfy(\.isFinished) }) else {
                return XCTFail("trial \(trial): \(operations.filter { !$0.isFinished }.count) never ran")
            }
            XCTAssertEqual(meter.total, 4, "trial \(trial)")
            XCTAssertEqual(meter.most, 1, "trial \(trial)")
        }
    }

    /// A holder's `execute()` waits (blocking, bounded) for a claimant of its category that another
    /// thread adds to a queue at the same moment the holder starts: the wait either finds the claimant
    /// finished (it got the category first) and returns its output, or is refused; it never waits
    /// (which would be a deadlock the check missed). It did, about once in 300 trials: the claimant's
    /// gate says `waiting` a step before its lanes are set, and the check read no lanes there.
    func testAWaitInsideAHolderRacingTheClaimantsLaunchEndsRefusedOrWithItsOutput() throws {
        var refused = 0
        for trial in 0..<300 {
            let x = OperationCategory("x", in: ExclusivityScope("race \(trial)"))
            let claimant = ImmediateOperation(.success(7), name: "claimant")
            try claimant.addExclusivity(x)
            let go = DispatchSemaphore(value: 0)
            let result = Locked<Result<Int, any Error>?>(nil)
            let holder = AsyncBlockOperation { operation in
                result.mutate { $0 = Result { try claimant.wait(timeout: .seconds(5)) } }
                operation.finish()
            }
            try holder.addExclusivity(x)
            let queue = OperationQueue()
            DispatchQueue.global().async {
                go.wait()
                queue.addOperation(claimant)
            }
            go.signal()
            try holder.run(timeout: .seconds(testTimeout))
            switch result.value {
            case .success(let value)?:
                XCTAssertEqual(value, 7, "trial \(trial)")
            case .failure(BatonError.wouldDeadlock)?:
                refused += 1
            default:
                return XCTFail("trial \(trial): \(String(describing: result.value))")
            }
            XCTAssertTrue(eventually { claimant.isFinished }, "trial \(trial): the claimant never ran")
        }
        XCTAssertGreaterThan(refused, 0, "the race never put the holder first")
    }

    /// Operation timeouts of 0–200 µs racing a finish from another thread (half the operations rerun
    /// once first): each ends succeeded or timed out, exactly once, and no timeout timer is left.
    func testTimeoutsRacingTheFinishAndARerunEndOnceAndLeaveNoTimer() throws {
        let before = pendingTimers
        var random = SplitMix(state: 26)
        for trial in 0..<1_500 {
            let reruns = trial.isMultiple(of: 2)
            let ends = Locked(0)
            let executions = Locked(0)
            let operation = AsyncBlockOperation { operation in
                let first = executions.increment() == 1
                if reruns && first { return operation.rerun() }
                DispatchQueue.global().async { operation.finish() }
            }
            operation.timeout = .microseconds(random.next(200))
            operation.onFinish { _ in ends.mutate { $0 += 1 } }
            let outcome = try operation.runForOutcome(timeout: .seconds(testTimeout))
            switch outcome {
            case .succeeded: break
            case .failed(BatonError.timedOut): break
            default: XCTFail("trial \(trial): \(outcome)")
            }
            XCTAssertTrue(eventually { ends.value == 1 }, "trial \(trial)")
        }
        XCTAssertTrue(eventually { self.pendingTimers <= before }, "\(pendingTimers - before) timers left")
    }

    /// Three operations wait on a flag while, released together, one thread sets it, one cancels the
    /// first operation, and one adds the third to the queue: the second and third succeed, the first
    /// succeeds or ends cancelled, and no flag wait or timer is left.
    func testAFlagSetRacingACancellationAndALateWaiterLeavesNothing() throws {
        let before = pendingTimers
        for trial in 0..<500 {
            let flag = ConditionFlag("go")
            let operations = (0..<3).map { _ in ImmediateOperation(.success(trial)) }
            for operation in operations { try operation.addCondition(.waitUntil(flag, timeout: .seconds(600))) }
            let queue = OperationQueue()
            queue.addOperations(Array(operations.prefix(2)), waitUntilFinished: false)
            let go = DispatchSemaphore(value: 0)
            let done = DispatchGroup()
            let actions: [@Sendable () -> Void] = [
                { flag.set() }, { operations[0].cancel() }, { queue.addOperation(operations[2]) },
            ]
            for action in actions {
                DispatchQueue.global().async(group: done) {
                    go.wait()
                    action()
                }
            }
            for _ in 0..<3 { go.signal() }
            XCTAssertEqual(done.wait(timeout: .now() + testTimeout), .success)
            guard eventually({ operations.allSatisfy(\.isFinished) }) else {
                return XCTFail("trial \(trial): \(operations.map(\.isFinished))")
            }
            XCTAssertTrue(operations[0].outcome?.isSuccess == true || operations[0].outcome?.isCancelled == true)
            XCTAssertEqual(operations[1].output, trial)
            XCTAssertEqual(operations[2].output, trial)
        }
        XCTAssertTrue(eventually { self.pendingTimers <= before }, "\(pendingTimers - before) timers left")
    }
}
