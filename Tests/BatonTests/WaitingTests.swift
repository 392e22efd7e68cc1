import Dispatch
import Foundation
import XCTest

@testable import Baton

/// The wait family: `run(on:timeout:)` and `wait(timeout:)` block with a deadline; `run(on:)` and
/// `value` suspend until the task is cancelled. `run` runs the operation (claiming it), `wait` and
/// `value` wait for someone else's run. The same names on a plain operation (`Void`), a typed one
/// (`Output`) and a chain.
final class WaitingTests: BatonTestCase {
    // MARK: - Blocking run

    func testRunReturnsTheOutputOrThrowsTheOperationsError() throws {
        XCTAssertEqual(try JitterOperation(6).run(timeout: .seconds(testTimeout)), 6)
        XCTAssertThrowsError(try ImmediateOperation(.failure(TestError(code: 2))).run(timeout: .seconds(testTimeout))) {
            XCTAssertEqual($0 as? TestError, TestError(code: 2))
        }
        let plain = AsyncBlockOperation { $0.finish() }
        try plain.run(timeout: .seconds(testTimeout))
        XCTAssertTrue(plain.outcome?.isSuccess == true)
    }

    func testRunOfACancelledOperationThrowsCancellationError() {
        let operation = ImmediateOperation(.success(1))
        operation.cancel()
        XCTAssertThrowsError(try operation.run(timeout: .seconds(testTimeout))) {
            XCTAssertTrue($0 is CancellationError, "\($0)")
        }
        XCTAssertEqual(operation.executions.value, 0)
        XCTAssertTrue(operation.outcome?.isCancelled == true)
    }

    func testRunUsesTheGivenQueue() throws {
        let queue = OperationQueue()
        queue.name = "given"
        let seen = Locked<String?>(nil)
        let operation = ResultBlockOperation<Int> { operation in
            seen.mutate { $0 = OperationQueue.current?.name }
            operation.finish(with: 1)
        }
        XCTAssertEqual(try operation.run(on: queue, timeout: .seconds(testTimeout)), 1)
        XCTAssertEqual(seen.value, "given")
    }

    func testWithoutAQueueRunUsesItsOwnAndNeverHangs() throws {
        // Nothing else runs the operation: the default is a queue of run's own, not "someone else".
        XCTAssertEqual(try JitterOperation(3).run(timeout: .seconds(testTimeout)), 3)
    }

    func testARunThatTimesOutThrowsNamingTheOperationAndCancelsIt() {
        let operation = ManualOperation(name: "stuck", finishesOnCancel: true)
        XCTAssertThrowsError(try operation.run(timeout: .milliseconds(50))) { error in
            guard case BatonError.timedOut(let culprit, let after)? = error as? BatonError else { return XCTFail("\(error)") }
            XCTAssertTrue(culprit.operation === operation)
            XCTAssertEqual(after, .milliseconds(50))
        }
        waitFinished(operation)
        XCTAssertTrue(operation.outcome?.isCancelled == true)
    }

    func testRunRefusesAnOperationSomeoneElseHolds() throws {
        let gate = ManualOperation()
        let held = ImmediateOperation(.success(1))
        let handle = try OperationQueue().addChain([gate, held])
        XCTAssertThrowsError(try held.run(timeout: .seconds(testTimeout))) { error in
            guard case BatonError.alreadyEnqueued(let culprit)? = error as? BatonError else { return XCTFail("\(error)") }
            XCTAssertTrue(culprit.operation === held)
        }
        gate.finish(with: 0)
        XCTAssertTrue(try handle.waitToOutcome().isSuccess)
        XCTAssertEqual(held.executions.value, 1, "the refused run did not run it a second time")
    }

    func testRunningOnTheSerialQueueThatMustRunItIsRefused() {
        XCTAssertEqual(
            verdictOnASerialQueue { serial in try JitterOperation(1).run(on: serial, timeout: .seconds(5)) },
            "called from the serial queue that must run it")
    }

    // MARK: - Blocking wait for someone else's run

    func testWaitReturnsTheOutputOfSomeoneElsesRun() throws {
        let operation = JitterOperation(3)
        OperationQueue().addOperation(operation)
        XCTAssertEqual(try operation.wait(timeout: .seconds(testTimeout)), 3)
    }

    func testWaitingForAnOperationNobodyRunsTimesOutAndLeavesItAlone() {
        let never = ManualOperation(name: "never")
        XCTAssertThrowsError(try never.wait(timeout: .milliseconds(10))) { error in
            guard case BatonError.timedOut(let culprit, _)? = error as? BatonError else { return XCTFail("\(error)") }
            XCTAssertTrue(culprit.operation === never)
        }
        XCTAssertFalse(never.isCancelled, "wait does not own the operation")
        XCTAssertNil(never.outcome)
        // Still free to be run.
        never.cancel()
        XCTAssertTrue(try never.runToOutcome().isCancelled)
    }

    // MARK: - Async

    func testAsyncRunReturnsTheOutputWithItsOwnQueueByDefault() async throws {
        let output = try await JitterOperation(8).run()
        XCTAssertEqual(output, 8)
        try await AsyncBlockOperation { $0.finish() }.run()
    }

    func testAwaitingValueOfAnOperationNobodyRunsEndsWhenTheTaskIsCancelled() async {
        let never = ManualOperation()
        let task = Task { try await never.value }
        task.cancel()
        let result = await task.result
        XCTAssertThrowsError(try result.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        XCTAssertFalse(never.isCancelled, "the operation is someone else's: only the wait ends")
    }

    func testCancellingOneAwaiterLeavesTheOthersAndTheOperationAlone() async throws {
        let operation = ManualOperation()
        let first = Task { try await operation.value }
        let second = Task { try await operation.value }
        first.cancel()
        let firstResult = await first.result
        XCTAssertThrowsError(try firstResult.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        OperationQueue().addOperation(operation)
        await operation.started.waitAsync()
        operation.finish(with: 7)
        let seven = try await second.value
        XCTAssertEqual(seven, 7)
        XCTAssertTrue(operation.outcome?.isSuccess == true)
    }

    func testAnAsyncRunCancelsItsOperationWithItsTask() async {
        let operation = ManualOperation(finishesOnCancel: true)
        let task = Task { try await operation.run() }
        await operation.started.waitAsync()
        task.cancel()
        let result = await task.result
        XCTAssertThrowsError(try result.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        await operation.cancelled.waitAsync()
        XCTAssertTrue(operation.isCancelled, "run owns the operation")
    }

    func testANegativeWaitTimeoutIsRefused() {
        for wait in [
            { try JitterOperation(1).run(timeout: .seconds(-1)) }, { try JitterOperation(1).wait(timeout: .milliseconds(-5)) },
        ] {
            XCTAssertThrowsError(try wait()) { error in
                guard case BatonError.invalidArgument(_, let reason)? = error as? BatonError else { return XCTFail("\(error)") }
                XCTAssertTrue(reason.contains("negative"), reason)
            }
        }
    }

    func testValueOfAPlainOperation() async throws {
        let plain = AsyncBlockOperation { $0.finish() }
        OperationQueue().addOperation(plain)
        try await plain.value
        XCTAssertTrue(plain.outcome?.isSuccess == true)
    }

    // MARK: - Chains use the same names

    func testAChainRunsAndWaitsWithTheSameNames() async throws {
        let two = try await Chain(JitterOperation(1)).map { $0 + 1 }.run()
        XCTAssertEqual(two, 2)
        let handle = try OperationQueue().addChain(
            Chain(JitterOperation(5)).then(TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! + 1) }))
        let output: Int = try await handle.value
        XCTAssertEqual(output, 6)
    }

    func testABlockingChainWaitThatTimesOutNamesTheOperationStillRunning() throws {
        let first = ImmediateOperation(.success(1), name: "first")
        let stuck = ManualOperation(name: "stuck", finishesOnCancel: true)
        let handle = try OperationQueue().addChain([first, stuck])
        XCTAssertThrowsError(try handle.wait(timeout: .milliseconds(50))) { error in
            guard case BatonError.timedOut(let culprit, _)? = error as? BatonError else { return XCTFail("\(error)") }
            XCTAssertTrue(culprit.operation === stuck)
        }
        XCTAssertFalse(stuck.isCancelled, "a handle's wait leaves the chain running")
        handle.cancel()
        XCTAssertTrue(try handle.waitToOutcome().isCancelled)
    }

    func testABlockingChainRunThatTimesOutCancelsTheChain() {
        let stuck = ManualOperation(name: "stuck", finishesOnCancel: true)
        XCTAssertThrowsError(try Chain(stuck).run(timeout: .milliseconds(50))) { error in
            guard case BatonError.timedOut? = error as? BatonError else { return XCTFail("\(error)") }
        }
        waitFinished(stuck)
        XCTAssertTrue(stuck.outcome?.isCancelled == true)
    }

    func testAwaitingAChainEndsWhenTheTaskIsCancelledEvenIfAnOperationIgnoresIt() async {
        // An operation that ignores cancellation: only the wait can end.
        let stubborn = ManualOperation(name: "stubborn")
        let handle = try? OperationQueue().addChain(Chain(stubborn).map { $0 + 1 })
        let waiting = Task { try await handle?.value }
        await stubborn.started.waitAsync()
        waiting.cancel()
        let result = await waiting.result
        XCTAssertThrowsError(try result.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        XCTAssertFalse(stubborn.isCancelled, "a handle's value leaves the chain running")

        let owned = ManualOperation(name: "owned")
        let running = Task { try await Chain(owned).map { $0 + 1 }.run() }
        await owned.started.waitAsync()
        running.cancel()
        let ran = await running.result
        XCTAssertThrowsError(try ran.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        await owned.cancelled.waitAsync()
        XCTAssertTrue(owned.isCancelled, "Chain.run owns its chain")
        stubborn.finish(with: 0)
        owned.finish(with: 0)
    }

    func testABlockingChainRunOnItsOwnSerialQueueIsRefused() {
        XCTAssertEqual(
            verdictOnASerialQueue { serial in try Chain(JitterOperation(1)).run(on: serial, timeout: .seconds(5)) },
            "called from the serial queue that must run it")
    }

    func testATypedChainHandleNeedsNoCast() throws {
        let handle = try OperationQueue().addChain(Chain(JitterOperation(2)).map { "\($0) items" })
        let text: String = try handle.wait(timeout: .seconds(testTimeout))
        XCTAssertEqual(text, "2 items")
        XCTAssertEqual(handle.outcome?.output, "2 items")
    }

    /// Runs `wait` inside an operation of a serial queue, given that queue: the deadlock's reason, or
    /// what happened instead.
    private func verdictOnASerialQueue(_ wait: @escaping @Sendable (OperationQueue) throws -> Void) -> String {
        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        let verdict = Locked<String>("not run")
        let done = Gate()
        serial.addOperation {
            do {
                try wait(serial)
                verdict.mutate { $0 = "waited" }
            } catch BatonError.wouldDeadlock(_, let reason) {
                verdict.mutate { $0 = reason }
            } catch {
                verdict.mutate { $0 = "\(error)" }
            }
            done.open()
        }
        done.wait()
        return verdict.value
    }
}
