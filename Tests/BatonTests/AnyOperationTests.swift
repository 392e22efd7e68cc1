import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Issue #22: retries and tree nodes take any operation, as TWGOperations' retry and
/// DRBOperationTree's providers did; an untyped operation yields `()` (`Void`, or `any Sendable`).
final class AnyOperationTests: BatonTestCase {
    func testARetryOfAPlainBlockOperation() throws {
        let runs = Locked(0)
        let retry = RetryOperation<Void>(maximumAttempts: 3) { _ in
            BlockOperation { runs.increment() }
        }
        let outcome = try retry.runForOutcome(timeout: .seconds(testTimeout))
        XCTAssertEqual(String(describing: outcome), "succeeded(())")
        XCTAssertEqual(runs.value, 1, "a Foundation operation cannot fail: one attempt")
        XCTAssertEqual(retry.attemptCount, 1)
    }

    func testARetryOfPlainAsyncOperationsRetriesTheirFailures() throws {
        let retry = RetryOperation<Void>(maximumAttempts: 3) { attempt in
            AsyncBlockOperation { operation in
                if attempt < 3 { operation.finish(throwing: TestError(code: attempt)) } else { operation.finish() }
            }
        }
        XCTAssertTrue(try retry.runForOutcome(timeout: .seconds(testTimeout)).isSuccess)
        XCTAssertEqual(retry.attemptCount, 3)
    }

    func testARetryTypedAnySendablePassesTheAttemptsOutputOrUnit() throws {
        let valued = RetryOperation<any Sendable>(maximumAttempts: 2) { _ in
            ResultBlockOperation<Int> { $0.finish(with: 5) }
        }
        let output = try valued.run(timeout: .seconds(testTimeout))
        XCTAssertEqual(String(describing: output), "5")
        XCTAssertEqual(String(describing: valued.outcome!), "succeeded(5)")
        let plain = RetryOperation<any Sendable>(maximumAttempts: 2) { _ in BlockOperation {} }
        XCTAssertEqual(String(describing: try plain.run(timeout: .seconds(testTimeout))), "()")
    }

    func testATypedFactoryStillPicksTheTypedRetry() throws {
        // A factory returning `ResultOperation<Void>` and one returning any operation, both for
        // `RetryOperation<Void>`: the typed init is chosen and the outcome is the same.
        let typed = RetryOperation<Void>(maximumAttempts: 1) { _ in ResultBlockOperation<Void> { $0.finish(with: ()) } }
        XCTAssertTrue(try typed.runForOutcome(timeout: .seconds(testTimeout)).isSuccess)
    }

    func testCancellingARetryCancelsItsFoundationAttempt() {
        let started = Gate()
        let release = Gate()
        let sawCancel = Locked(false)
        let retry = RetryOperation<Void>(maximumAttempts: 3) { _ in
            let block = BlockOperation()
            block.addExecutionBlock { [unowned block] in
                started.open()
                release.wait()
                sawCancel.mutate { $0 = block.isCancelled }
            }
            return block
        }
        OperationQueue().addOperation(retry)
        started.wait()
        let attempt = retry.attemptsMade.first
        retry.cancel()
        // Delivered once the retry's execute() has returned (it may still be returning).
        XCTAssertTrue(eventually { attempt?.isCancelled == true }, "the running Foundation attempt was not cancelled")
        release.open()
        waitFinished(retry)
        XCTAssertTrue(sawCancel.value, "the running Foundation attempt was not cancelled")
        XCTAssertTrue(retry.outcome?.isCancelled == true)
        XCTAssertEqual(retry.attemptCount, 1)
    }
}
