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
                if attempt <= failures { operation.finish(throwing: TestError(code: attempt)) } else { operation.finish(with: attempt) }
            }
        }
    }

    func testAttemptsIsTheTotalNumberOfAttempts() {
        let made = Locked(0)
        let retry = finished(RetryOperation(attempts: 3, makeAttempt: flaky(failures: 10, made: made)))
        XCTAssertEqual(made.value, 3)
        XCTAssertEqual(retry.attemptCount, 3)
        XCTAssertEqual(retry.result?.error as? TestError, TestError(code: 3), "the final error is the last attempt's")
    }

    func testItStopsAtTheFirstSuccess() {
        let made = Locked(0)
        let retry = finished(RetryOperation(attempts: 5, makeAttempt: flaky(failures: 2, made: made)))
        XCTAssertEqual(retry.output, 3)
        XCTAssertEqual(made.value, 3)
        XCTAssertEqual(Set(retry.attemptOperations.map(ObjectIdentifier.init)).count, 3, "each attempt is a fresh operation")
    }

    func testOneAttemptNeverRetries() {
        let made = Locked(0)
        let retry = finished(RetryOperation(attempts: 1, makeAttempt: flaky(failures: 1, made: made)))
        XCTAssertEqual(made.value, 1)
        XCTAssertNotNil(retry.result?.error)
    }

    func testThePredicateCanStopEarly() {
        let made = Locked(0)
        let asked = Locked<[Int]>([])
        let retry = finished(RetryOperation(attempts: 10, shouldRetry: { error, attempt in
            asked.mutate { $0.append(attempt) }
            return (error as? TestError)?.code != 2
        }, makeAttempt: flaky(failures: 10, made: made)))
        XCTAssertEqual(made.value, 2)
        XCTAssertEqual(asked.value, [1, 2])
        XCTAssertEqual(retry.result?.error as? TestError, TestError(code: 2))
    }

    func testZeroAttemptsIsAClearError() {
        let made = Locked(0)
        let retry = finished(RetryOperation(attempts: 0, makeAttempt: flaky(failures: 0, made: made)))
        guard case .failed(BatonError.invalidArgument(_, let reason))? = retry.result else {
            return XCTFail("got \(String(describing: retry.result))")
        }
        XCTAssertTrue(reason.contains("at least 1"))
        XCTAssertEqual(made.value, 0)
    }

    func testDelaysGrowAsConfigured() {
        XCTAssertEqual(RetryDelay.none.seconds(beforeAttempt: 2), 0)
        XCTAssertEqual(RetryDelay.fixed(seconds: 1.5).seconds(beforeAttempt: 4), 1.5)
        let exponential = RetryDelay.exponential(initial: 0.5, multiplier: 2, maximum: 3)
        XCTAssertEqual((2...6).map { exponential.seconds(beforeAttempt: $0) }, [0.5, 1, 2, 3, 3])
    }

    func testAWaitBetweenAttemptsIsUsed() {
        let made = Locked(0)
        let retry = finished(RetryOperation(attempts: 3, delay: .fixed(seconds: 0.01), makeAttempt: flaky(failures: 2, made: made)))
        XCTAssertEqual(retry.output, 3)
    }

    func testCancellingDuringTheWaitEndsTheRetryAtOnce() {
        let firstFailed = Gate()
        let made = Locked(0)
        let retry = RetryOperation<Int>(attempts: 3, delay: .fixed(seconds: 600)) { attempt in
            made.increment()
            let operation = ResultBlockOperation<Int> { $0.finish(throwing: TestError(code: attempt)) }
            operation.onResult { _ in firstFailed.open() }
            return operation
        }
        let done = Gate()
        retry.whenFinished { done.open() }
        OperationQueue().addOperation(retry)
        firstFailed.wait()
        retry.cancel()
        done.wait(timeout: 30)   // the wait between attempts is ten minutes: only cancellation ends it
        XCTAssertTrue(retry.result?.isCancelled == true)
        XCTAssertEqual(made.value, 1)
    }

    func testCancellingCancelsTheRunningAttempt() {
        let attempt = ManualOperation(name: "attempt", finishesOnCancel: true)
        let retry = RetryOperation(attempts: 3) { _ in attempt }
        let done = Gate()
        retry.whenFinished { done.open() }
        OperationQueue().addOperation(retry)
        attempt.started.wait()
        retry.cancel()
        done.wait()
        attempt.cancelled.wait()
        XCTAssertEqual(attempt.cancellations.value, 1)
        XCTAssertTrue(retry.result?.isCancelled == true)
        XCTAssertEqual(retry.attemptCount, 1)
    }
}
