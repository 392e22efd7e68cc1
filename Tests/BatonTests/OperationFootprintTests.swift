import Foundation
import XCTest

@testable import Baton

/// An operation keeps what few operations use (a timeout, a delegate, observers, waits) out of line,
/// made on first use: one that uses none of it never pays for it, however it runs.
final class OperationFootprintTests: BatonTestCase {
    private func hasExtras(_ operation: AsyncOperation) -> Bool {
        operation.core.withLock { $0.hasExtras }
    }

    func testAnOperationThatUsesNoneOfItRunsWithoutTheOutOfLinePart() throws {
        let alone = AsyncBlockOperation { $0.finish() }
        let child = AsyncBlockOperation { $0.finish() }
        let first = ResultBlockOperation<Int> { $0.finish(with: 1) }
        let second = TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! + 1) }
        // Setting nothing is not a use.
        alone.timeout = nil
        let queue = OperationQueue()
        queue.addOperation(alone)
        try GroupOperation(operations: [child]).run(timeout: .seconds(20))
        XCTAssertEqual(try queue.addChain([first, second]).wait(timeout: .seconds(20)) as? Int, 2)
        waitFinished(alone)
        for operation in [alone, child, first, second] {
            XCTAssertTrue(operation.isFinished)
            XCTAssertFalse(hasExtras(operation), "\(operation) made the out-of-line part without using it")
        }
    }

    func testEachUseMakesItAndWorks() throws {
        // Ends only when its own timeout cancels it (well before the wait's 20 s).
        let timed = AsyncBlockOperation({ _ in }, onCancel: { $0.finish() })
        timed.timeout = .milliseconds(50)
        XCTAssertTrue(hasExtras(timed))
        XCTAssertThrowsError(try timed.run(timeout: .seconds(20))) { error in
            guard case BatonError.timedOut(let operation, let after) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(operation.operation === timed)
            XCTAssertEqual(after, .milliseconds(50), "its own timeout ended it, not the wait's")
        }

        let started = Locked(false)
        let observed = AsyncBlockOperation { $0.finish() }
        observed.onStart { started.mutate { $0 = true } }
        XCTAssertTrue(hasExtras(observed))
        let finished = Locked(false)
        observed.onFinish { _ in finished.mutate { $0 = true } }
        try observed.run(timeout: .seconds(20))
        XCTAssertTrue(started.value)
        XCTAssertTrue(finished.value)

        let gate = DispatchSemaphore(value: 0)
        let waited = AsyncBlockOperation { operation in
            DispatchQueue.global().async {
                gate.wait()
                operation.finish()
            }
        }
        OperationQueue().addOperation(waited)
        let waiter = Thread { _ = try? waited.wait(timeout: .seconds(20)) }
        waiter.start()
        XCTAssertTrue(eventually { self.hasExtras(waited) && waited.core.withLock { $0.waitCount } == 1 })
        gate.signal()
        waitFinished(waited)
        XCTAssertTrue(eventually { waited.core.withLock { $0.waitCount } == 0 })
    }
}
