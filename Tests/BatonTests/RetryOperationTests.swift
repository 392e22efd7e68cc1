import Dispatch
import Foundation
import XCTest

@testable import Baton

final class RetryOperationTests: BatonTestCase {
    /// Fails the first `failures` attempts, then succeeds with the attempt number.
    private func flaky(failures: Int, made: Locked<Int>) -> @Sendable (Int) -> ResultOperation<Int> {
        { attempt in
            made.increment()
            return ResultBlockOperation<Int> { operation in
                if attempt <= failures {
                    operation.finish(throwing: TestError(code: attempt))
                } else {
                    operation.finish(with: attempt)
                }
            }
        }
    }

    func testAttemptsIsTheTotalNumberOfAttempts() {
        let made = Locked(0)
        let retry = finished(RetryOperation(maximumAttempts: 3, makeAttempt: flaky(failures: 10, made: made)))
        XCTAssertEqual(made.value, 3)
        XCTAssertEqual(retry.attemptCount, 3)
        XCTAssertEqual(retry.outcome?.error as? TestError, TestError(code: 3), "the final error is the last attempt's")
    }

    func testItStopsAtTheFirstSuccess() {
        let made = Locked(0)
        let retry = finished(
            RetryOperation(maximumAttempts: 5, keepsFinishedChildren: true, makeAttempt: flaky(failures: 2, made: made)))
        XCTAssertEqual(retry.output, 3)
        XCTAssertEqual(made.value, 3)
        XCTAssertEqual(Set(retry.attemptsMade.map(ObjectIdentifier.init)).count, 3, "each attempt is a fresh operation")
    }

    func testADecisionPerFailureChoosesTheWaitFromTheErrorOrStops() {
        let made = Locked(0)
        let asked = Locked([Int]())
        // Error 1 asks for no wait, error 2 for a short one, error 3 stops the retry.
        let retry = finished(
            RetryOperation(
                maximumAttempts: 10,
                decide: { error, attempt in
                    asked.mutate { $0.append(attempt) }
                    switch (error as? TestError)?.code {
                    case 1: return .retry(after: .zero)
                    case 2: return .retry(after: .milliseconds(5))
                    default: return .stop
                    }
                }, makeAttempt: flaky(failures: 5, made: made)))
        XCTAssertEqual(made.value, 3)
        XCTAssertEqual(asked.value, [1, 2, 3])
        XCTAssertEqual(retry.outcome?.error as? TestError, TestError(code: 3))

        // The maximum caps the decisions: after the last attempt `decide` is not asked.
        let capped = Locked(0)
        let short = finished(
            RetryOperation(
                maximumAttempts: 2,
                decide: { _, _ in
                    capped.mutate { $0 += 1 }
                    return .retry(after: .zero)
                },
                makeAttempt: flaky(failures: 5, made: Locked(0))))
        XCTAssertEqual(short.attemptCount, 2)
        XCTAssertEqual(capped.value, 1)
    }

    func testOneAttemptNeverRetries() {
        let made = Locked(0)
        let retry = finished(RetryOperation(maximumAttempts: 1, makeAttempt: flaky(failures: 1, made: made)))
        XCTAssertEqual(made.value, 1)
        XCTAssertNotNil(retry.outcome?.error)
    }

    func testThePredicateCanStopEarly() {
        let made = Locked(0)
        let asked = Locked<[Int]>([])
        let retry = finished(
            RetryOperation(
                maximumAttempts: 10,
                shouldRetry: { error, attempt in
                    asked.mutate { $0.append(attempt) }
                    return (error as? TestError)?.code != 2
                }, makeAttempt: flaky(failures: 10, made: made)))
        XCTAssertEqual(made.value, 2)
        XCTAssertEqual(asked.value, [1, 2])
        XCTAssertEqual(retry.outcome?.error as? TestError, TestError(code: 2))
    }

    func testZeroAttemptsIsAClearError() {
        let made = Locked(0)
        let retry = finished(RetryOperation(maximumAttempts: 0, makeAttempt: flaky(failures: 0, made: made)))
        guard case .failed(BatonError.invalidArgument(_, let reason))? = retry.outcome else {
            return XCTFail("got \(String(describing: retry.outcome))")
        }
        XCTAssertTrue(reason.contains("at least 1"))
        XCTAssertEqual(made.value, 0)
    }

    func testDelaysGrowAsConfigured() {
        XCTAssertEqual(RetryDelay.immediate.delay(beforeAttempt: 2), .zero)
        XCTAssertEqual(RetryDelay.fixed(.seconds(1.5)).delay(beforeAttempt: 4), .seconds(1.5))
        XCTAssertEqual(RetryDelay.fixed(.seconds(-1)).delay(beforeAttempt: 2), .zero)
        let exponential = RetryDelay.exponential(initial: .milliseconds(500), multiplier: 2, maximum: .seconds(3))
        XCTAssertEqual(
            (2...6).map { exponential.delay(beforeAttempt: $0) },
            [.milliseconds(500), .seconds(1), .seconds(2), .seconds(3), .seconds(3)])
        let huge = RetryDelay.exponential(initial: .seconds(1), multiplier: 1e300, maximum: .seconds(Int64.max))
        XCTAssertEqual(huge.delay(beforeAttempt: 10), .seconds(Int64.max), "no overflow: capped at the maximum")
        let nan = RetryDelay.exponential(initial: .zero, multiplier: .infinity, maximum: .seconds(2))
        XCTAssertEqual(nan.delay(beforeAttempt: 3), .seconds(2), "0 × ∞ is not a number: the maximum, not a trap")
        XCTAssertEqual(RetryDelay.exponential(initial: .seconds(1), multiplier: 1).delay(beforeAttempt: 200_000_000), .seconds(1))
    }

    func testAWaitBetweenAttemptsIsUsed() {
        let made = Locked(0)
        let retry = finished(
            RetryOperation(maximumAttempts: 3, delay: .fixed(.seconds(0.01)), makeAttempt: flaky(failures: 2, made: made)))
        XCTAssertEqual(retry.output, 3)
    }

    func testCancellingDuringTheWaitEndsTheRetryAtOnce() {
        let firstFailed = Gate()
        let made = Locked(0)
        let retry = RetryOperation<Int>(maximumAttempts: 3, delay: .fixed(.seconds(600))) { attempt in
            made.increment()
            let operation = ResultBlockOperation<Int> { $0.finish(throwing: TestError(code: attempt)) }
            operation.onFinish { _ in firstFailed.open() }
            return operation
        }
        let done = Gate()
        retry.whenFinished { done.open() }
        OperationQueue().addOperation(retry)
        firstFailed.wait()
        retry.cancel()
        done.wait(timeout: 30)   // the wait between attempts is ten minutes: only cancellation ends it
        XCTAssertTrue(retry.outcome?.isCancelled == true)
        XCTAssertEqual(made.value, 1)
    }

    func testCancellingCancelsTheRunningAttempt() {
        let attempt = ManualOperation(name: "attempt", finishesOnCancel: true)
        let retry = RetryOperation(maximumAttempts: 3) { _ in attempt }
        let done = Gate()
        retry.whenFinished { done.open() }
        OperationQueue().addOperation(retry)
        attempt.started.wait()
        retry.cancel()
        done.wait()
        attempt.cancelled.wait()
        XCTAssertEqual(attempt.cancellations.value, 1)
        XCTAssertTrue(retry.outcome?.isCancelled == true)
        XCTAssertEqual(retry.attemptCount, 1)
    }
}
