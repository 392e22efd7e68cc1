import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Issue #22: `runForOutcome` returns the operation's (or chain's) own result as an `Outcome` and
/// throws only for the wait itself; an operation's own `timeout` fails it with `timedOut`; a chain's
/// run and a retry's delay hold nothing they have finished with.
final class OutcomeWaitTests: BatonTestCase {
    // MARK: - Blocking, on operations

    func testTheBlockingFormReturnsSuccessFailureAndCancellationAsOutcomes() throws {
        XCTAssertEqual(describe(try JitterOperation(6).runForOutcome(timeout: .seconds(testTimeout))), "succeeded(6)")
        let failing = ImmediateOperation(.failure(TestError(code: 3)))
        guard case .failed(let error) = try failing.runForOutcome(timeout: .seconds(testTimeout)) else {
            return XCTFail("expected a failure")
        }
        XCTAssertEqual(error as? TestError, TestError(code: 3))
        let cancelled = ImmediateOperation(.success(1))
        cancelled.cancel()
        XCTAssertEqual(describe(try cancelled.runForOutcome(timeout: .seconds(testTimeout))), "cancelled")
        // An untyped operation: Outcome<Void>.
        let plain: Outcome<Void> = try AsyncBlockOperation { $0.finish() }.runForOutcome(timeout: .seconds(testTimeout))
        XCTAssertTrue(plain.isSuccess)
    }

    func testTheBlockingFormThrowsOnlyForTheWaitItself() {
        let stuck = ManualOperation(name: "stuck", finishesOnCancel: true)
        XCTAssertThrowsError(try stuck.runForOutcome(timeout: .milliseconds(50))) { error in
            guard case BatonError.timedOut("stuck", .milliseconds(50)) = error else { return XCTFail("\(error)") }
        }
        // The run's timeout cancelled the operation (it was the caller's).
        waitFinished(stuck)
        XCTAssertTrue(stuck.outcome?.isCancelled == true)

        XCTAssertThrowsError(try JitterOperation(1).runForOutcome(timeout: .seconds(-1))) { error in
            guard case BatonError.invalidArgument = error else { return XCTFail("\(error)") }
        }
        let first = ManualOperation(name: "first")
        let held = ImmediateOperation(.success(1), name: "held")
        XCTAssertNoThrow(try OperationQueue().addChain([first, held]))
        XCTAssertThrowsError(try held.runForOutcome(timeout: .seconds(testTimeout))) { error in
            guard case BatonError.alreadyEnqueued("held") = error else { return XCTFail("\(error)") }
        }
        first.started.wait()
        first.finish(with: 0)
    }

    func testTheBlockingFormRefusesToDeadlockWithAnError() {
        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        let refusal = Locked<(any Error)?>(nil)
        let outer = AsyncBlockOperation { operation in
            do {
                try JitterOperation(1).runForOutcome(on: serial, timeout: .seconds(testTimeout))
            } catch {
                refusal.mutate { $0 = error }
            }
            operation.finish()
        }
        XCTAssertNoThrow(try outer.runForOutcome(on: serial, timeout: .seconds(testTimeout)))
        guard case BatonError.wouldDeadlock? = refusal.value else { return XCTFail("\(String(describing: refusal.value))") }
    }

    // MARK: - async, on operations

    func testTheAsyncFormReturnsOutcomes() async throws {
        let succeeded = try await JitterOperation(4).runForOutcome()
        XCTAssertEqual(describe(succeeded), "succeeded(4)")
        let failed = try await ImmediateOperation(.failure(TestError(code: 5))).runForOutcome()
        XCTAssertEqual(failed.error as? TestError, TestError(code: 5))
        let cancelled = ImmediateOperation(.success(1))
        cancelled.cancel()
        let outcome = try await cancelled.runForOutcome()
        XCTAssertTrue(outcome.isCancelled)
    }

    func testCancellingTheAwaitingTaskThrowsCancellationErrorAndCancelsTheOperation() async throws {
        let stuck = ManualOperation(name: "stuck", finishesOnCancel: true)
        let task = Task { try await stuck.runForOutcome() }
        stuck.started.wait()
        task.cancel()
        do {
            let outcome = try await task.value
            XCTFail("the wait was cancelled, yet it returned \(outcome)")
        } catch {
            XCTAssertTrue(error is CancellationError, "\(error)")
        }
        XCTAssertTrue(stuck.isCancelled)
    }

    // MARK: - Chains

    func testAChainRunsToItsOutcome() throws {
        let blocking = try Chain(JitterOperation(2)).map { $0 * 10 }.runForOutcome(timeout: .seconds(testTimeout))
        XCTAssertEqual(describe(blocking), "succeeded(20)")
        let failing = try Chain(ImmediateOperation(.failure(TestError(code: 7)))).map { $0 + 1 }
            .runForOutcome(timeout: .seconds(testTimeout))
        XCTAssertEqual(failing.error as? TestError, TestError(code: 7))
        let first = ImmediateOperation(.success(1))
        first.cancel()
        XCTAssertTrue(try Chain(first).map { $0 }.runForOutcome(timeout: .seconds(testTimeout)).isCancelled)
    }

    func testAChainAwaitsItsOutcome() async throws {
        let awaited = try await Chain(JitterOperation(3)).map { "\($0)" }.runForOutcome()
        XCTAssertEqual(describe(awaited), "succeeded(3)")
    }

    func testAChainsBlockingFormTimesOutAndCancelsTheChain() {
        let stuck = ManualOperation(name: "stuck", finishesOnCancel: true)
        XCTAssertThrowsError(try Chain(stuck).map { $0 }.runForOutcome(timeout: .milliseconds(50))) { error in
            guard case BatonError.timedOut("stuck", _) = error else { return XCTFail("\(error)") }
        }
        waitFinished(stuck)
        XCTAssertTrue(stuck.outcome?.isCancelled == true)
    }

    func testCancellingTheTaskThatAwaitsAChainThrowsCancellationError() async {
        let stuck = ManualOperation(name: "stuck", finishesOnCancel: true)
        let chain = Chain(stuck).map { $0 }
        let task = Task { try await chain.runForOutcome() }
        stuck.started.wait()
        task.cancel()
        do {
            _ = try await task.value
            XCTFail("the wait was cancelled")
        } catch {
            XCTAssertTrue(error is CancellationError, "\(error)")
        }
        XCTAssertTrue(stuck.isCancelled)
    }

    // MARK: - An operation's own timeout

    func testAnOperationsTimeoutFailsItWithTimedOutNamingIt() throws {
        let stuck = ManualOperation(name: "slow", finishesOnCancel: true)
        stuck.timeout = .milliseconds(20)
        let outcome = try stuck.runForOutcome(timeout: .seconds(testTimeout))
        guard case .failed(BatonError.timedOut("slow", .milliseconds(20))) = outcome else {
            return XCTFail("expected timedOut, got \(describe(outcome))")
        }
        XCTAssertFalse(stuck.isCancelled, "a timed-out operation is not a cancelled one")
    }

    func testATimedOutStepFailsItsChainAndIsRetried() throws {
        let step = ManualOperation(name: "step", finishesOnCancel: true)
        step.timeout = .milliseconds(20)
        let chained = try Chain(step).map { $0 + 1 }.runForOutcome(timeout: .seconds(testTimeout))
        guard case .failed(BatonError.timedOut("step", _)) = chained else { return XCTFail(describe(chained)) }

        // A retry sees a failure, so it tries again: the second attempt is quick.
        let retry = RetryOperation<Int>(maximumAttempts: 2) { attempt in
            guard attempt == 1 else { return ImmediateOperation(.success(attempt)) }
            let slow = ManualOperation(name: "attempt 1", finishesOnCancel: true)
            slow.timeout = .milliseconds(20)
            return slow
        }
        XCTAssertEqual(describe(try retry.runForOutcome(timeout: .seconds(testTimeout))), "succeeded(2)")
    }

    // MARK: - Memory

    func testARunningChainHoldsNoOperationItHasHandedOn() throws {
        let freed = Gate()
        let gate = Gate()
        let chain = inScope {
            Chain(ReleasedResult(freed: freed)).then(
                TransformBlockOperation<Int, Int> { value in
                    gate.wait()
                    return value + 1
                })
        }
        let result = Locked<Outcome<Int>?>(nil)
        let waiter = DispatchQueue(label: "waiter")
        waiter.async {
            result.mutate { $0 = try? chain.runForOutcome(timeout: .seconds(testTimeout)) }
        }
        // The chain value the waiter holds let go of its operations when it was enqueued: the first
        // one is freed once the chain has moved past it, while the wait goes on.
        XCTAssertTrue(freed.wait(timeout: testTimeout), "the first operation was kept alive during the wait")
        XCTAssertTrue(chain.operations.isEmpty)
        gate.open()
        waiter.sync {}
        XCTAssertEqual(describe(result.value), "succeeded(2)")
        // Enqueued once: a second run is refused, naming the first operation.
        XCTAssertThrowsError(try chain.runForOutcome(timeout: .seconds(testTimeout))) { error in
            guard case BatonError.alreadyEnqueued("ReleasedResult") = error else { return XCTFail("\(error)") }
        }
    }

    func testAChainThatCouldNotBeEnqueuedKeepsItsOperations() throws {
        let shared = ImmediateOperation(.success(1), name: "shared")
        let chain = Chain(shared).map { $0 }
        try OperationQueue().addChain([shared, ImmediateOperation(.success(2))]).wait(timeout: .seconds(testTimeout))
        XCTAssertThrowsError(try chain.runForOutcome(timeout: .seconds(testTimeout))) { error in
            guard case BatonError.alreadyFinished("shared") = error else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(chain.operations.count, 2, "refused, nothing enqueued: the chain still describes its steps")
    }

    func testARetryLetsGoOfItsFailedAttemptDuringTheDelay() {
        let freed = Gate()
        let second = Locked(false)
        let retry = RetryOperation<Int>(maximumAttempts: 2, delay: .fixed(.seconds(testTimeout))) { attempt in
            if attempt == 1 { return ReleasedResult(freed: freed, failing: true) }
            second.mutate { $0 = true }
            return ImmediateOperation(.success(2))
        }
        OperationQueue().addOperation(retry)
        XCTAssertTrue(freed.wait(timeout: testTimeout), "the failed attempt was held during the delay")
        XCTAssertFalse(second.value)
        retry.cancel()
        waitFinished(retry)
        XCTAssertTrue(retry.outcome?.isCancelled == true)
    }
}

/// Succeeds with 1 (or fails) at once, and opens `freed` when it is freed.
final class ReleasedResult: ResultOperation<Int>, @unchecked Sendable {
    private let freed: Gate
    private let failing: Bool

    init(freed: Gate, failing: Bool = false) {
        self.freed = freed
        self.failing = failing
        super.init()
    }

    deinit { freed.open() }

    override func execute() {
        if failing { finish(throwing: TestError(code: 1)) } else { finish(with: 1) }
    }
}

private func describe<Output>(_ outcome: Outcome<Output>?) -> String {
    outcome.map { "\($0)" } ?? "nil"
}
