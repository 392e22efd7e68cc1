import Dispatch
import Foundation
import XCTest

@testable import Baton

/// A retry's delay and a slow-wait watch are cancellable timers (``Deadlines``), cancelled when the
/// wait they time ends: a long delay or threshold keeps nothing alive once its retry or waiter has
/// finished. Before, each was a `DispatchQueue.asyncAfter` block that stayed in libdispatch's timer
/// list, with what it captured, until its deadline.
final class LongTimerTests: BatonTestCase {
    private var pendingTimers: Int { Deadlines.state.withLock { $0.count } }

    func testARetryCancelledDuringAnHourLongDelayLeavesNoTimer() {
        let before = pendingTimers
        let made = Locked(0)
        let retries = (0..<50).map { _ in
            RetryOperation<Int>(maximumAttempts: 2, delay: .fixed(.seconds(3_600))) { attempt in
                made.increment()
                return ResultBlockOperation<Int> { $0.finish(throwing: TestError(code: attempt)) }
            }
        }
        let queue = OperationQueue()
        queue.addOperations(retries, waitUntilFinished: false)
        XCTAssertTrue(eventually { self.pendingTimers >= before + retries.count }, "each delay is a pending timer")
        for retry in retries { retry.cancel() }
        for retry in retries {
            waitFinished(retry)
            XCTAssertTrue(retry.isCancelled)
            XCTAssertEqual(retry.attemptCount, 1)
        }
        XCTAssertEqual(made.value, retries.count, "no second attempt")
        XCTAssertTrue(eventually { self.pendingTimers <= before }, "\(pendingTimers - before) timers left")
    }

    /// Cancels racing short delays (0–200 µs, a spin of 0–300 µs or 0–5 ms before the cancel): each retry ends
    /// once, cancelled or with its second attempt's output, makes at most two attempts, and no delay
    /// timer is left. Both outcomes occur.
    func testCancelsRacingShortDelaysEndEachRetryOnceAndLeaveNoTimer() {
        let before = pendingTimers
        var random = SplitMix(state: 27)
        let outcomes = Locked<[String: Int]>([:])
        for trial in 0..<600 {
            let made = Locked(0)
            let ends = Locked(0)
            let retry = RetryOperation<Int>(
                maximumAttempts: 2, delay: .fixed(.microseconds(random.next(200)))
            ) { attempt in
                made.increment()
                return ResultBlockOperation<Int> { operation in
                    if attempt == 1 {
                        operation.finish(throwing: TestError(code: attempt))
                    } else {
                        operation.finish(with: attempt)
                    }
                }
            }
            retry.onFinish { _ in ends.increment() }
            OperationQueue().addOperation(retry)
            // Half the spins within the delays' range, half up to 5 ms: a slow build (ThreadSanitizer)
            // takes longer than 300 µs to reach the second attempt.
            let microseconds = trial.isMultiple(of: 2) ? random.next(300) : random.next(5_000)
            let spin = DispatchTime.now().uptimeNanoseconds + UInt64(microseconds) * 1_000
            while DispatchTime.now().uptimeNanoseconds < spin {}
            retry.cancel()
            waitFinished(retry)
            XCTAssertTrue(eventually { ends.value >= 1 }, "trial \(trial)")
            XCTAssertEqual(ends.value, 1, "trial \(trial)")
            XCTAssertLessThanOrEqual(made.value, 2, "trial \(trial)")
            switch retry.outcome {
            case .cancelled?: outcomes.mutate { $0["cancelled", default: 0] += 1 }
            case .succeeded(2)?: outcomes.mutate { $0["succeeded", default: 0] += 1 }
            default: XCTFail("trial \(trial): \(String(describing: retry.outcome))")
            }
        }
        XCTAssertGreaterThan(outcomes.value["cancelled", default: 0], 0)
        XCTAssertGreaterThan(outcomes.value["succeeded", default: 0], 0)
        XCTAssertTrue(eventually { self.pendingTimers <= before }, "\(pendingTimers - before) timers left")
    }

    func testAWaiterCancelledBeforeAnHourLongSlowWaitThresholdLeavesNoTimer() throws {
        let before = pendingTimers
        let scope = ExclusivityScope("long watch")
        scope.slowWaitThreshold = .seconds(3_600)
        let x = OperationCategory("x", in: scope)
        let queue = OperationQueue()
        let holder = try holding(x, on: queue)
        let waiters = try (0..<50).map { _ in
            let waiter = MeteredOperation(ConcurrencyMeter())
            try waiter.addExclusivity(x)
            return waiter
        }
        queue.addOperations(waiters, waitUntilFinished: false)
        XCTAssertTrue(eventually { self.pendingTimers >= before + waiters.count }, "each wait is watched")
        for waiter in waiters { waiter.cancel() }
        for waiter in waiters { waitFinished(waiter) }
        XCTAssertTrue(eventually { self.pendingTimers <= before }, "\(pendingTimers - before) timers left")
        holder.finish(with: 0)
        waitFinished(holder)
        XCTAssertFalse(diagnostics.allKinds.contains(.waitedLongForCategory))
    }
}
