import Dispatch
import Foundation
import XCTest

@testable import Baton

final class ConcurrencyTests: BatonTestCase {
    func testAwaitingAnOperationsOutput() async throws {
        let value = try await JitterOperation(8).run(on: OperationQueue())
        XCTAssertEqual(value, 8)
        let enqueued = JitterOperation(9)
        OperationQueue().addOperation(enqueued)
        let again = try await enqueued.value
        XCTAssertEqual(again, 9)
        let outcome = await enqueued.awaitOutcome()
        XCTAssertTrue(outcome.isSuccess)
    }

    func testAwaitingAFailureThrowsIt() async {
        do {
            _ = try await ImmediateOperation(.failure(TestError(code: 4))).run(on: OperationQueue())
            XCTFail("expected an error")
        } catch {
            XCTAssertEqual(error as? TestError, TestError(code: 4))
        }
    }

    func testCancellingTheAwaitingTaskCancelsTheOperation() async {
        let operation = ManualOperation(finishesOnCancel: true)
        let task = Task { try await operation.run(on: OperationQueue()) }
        await operation.started.waitAsync()
        task.cancel()
        let result = await task.result
        XCTAssertThrowsError(try result.get()) { XCTAssertTrue($0 is CancellationError) }
        await operation.cancelled.waitAsync()
        XCTAssertEqual(operation.cancellations.value, 1)
    }

    func testAnAsyncClosureOperation() async throws {
        let operation = AsyncTaskOperation { () async throws -> Int in
            await Task.yield()
            return 21 * 2
        }
        let value = try await operation.run(on: OperationQueue())
        XCTAssertEqual(value, 42)
    }

    func testCancellingTheOperationCancelsItsTask() async {
        let entered = Gate()
        let operation = AsyncTaskOperation { () async throws -> Int in
            entered.open()
            try await Task.sleep(nanoseconds: 600_000_000_000)   // ten minutes: only cancellation ends it
            return 0
        }
        OperationQueue().addOperation(operation)
        await entered.waitAsync()
        operation.cancel()
        let outcome = await operation.awaitOutcome()
        XCTAssertTrue(outcome.isCancelled)
    }

    func testTheTasksCancellationCancelsTheOperation() async {
        let operation = AsyncTaskOperation { () async throws -> Int in
            throw CancellationError()
        }
        let outcome = await AsyncTaskOperationWaiter.run(operation)
        XCTAssertTrue(outcome.isCancelled)
        XCTAssertTrue(operation.isCancelled)
    }

    func testAnAsyncClosureThatThrowsFailsTheOperation() async {
        let operation = AsyncTaskOperation<Int> { throw TestError(code: 12) }
        let outcome = await AsyncTaskOperationWaiter.run(operation)
        XCTAssertEqual(outcome.error as? TestError, TestError(code: 12))
    }
}

private enum AsyncTaskOperationWaiter {
    static func run(_ operation: AsyncTaskOperation<Int>) async -> Outcome<Void> {
        OperationQueue().addOperation(operation)
        return await operation.awaitOutcome()
    }
}
