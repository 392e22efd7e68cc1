import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Records what it is told, with the operation's state at that moment.
private final class RecordingDelegate: AsyncOperationDelegate, @unchecked Sendable {
    let events: Locked<[String]>
    init(_ events: Locked<[String]>) { self.events = events }

    func operationDidStart(_ operation: AsyncOperation) {
        events.append("delegate start executing=\(operation.isExecuting)")
    }
    func operation(_ operation: AsyncOperation, didSucceedWith output: Any?) {
        events.append("delegate success \(output ?? "nil") finished=\(operation.isFinished)")
    }
    func operation(_ operation: AsyncOperation, didFailWith error: any Error) {
        events.append("delegate failure \(error) finished=\(operation.isFinished)")
    }
    func operationDidCancel(_ operation: AsyncOperation) {
        events.append("delegate cancel finished=\(operation.isFinished)")
    }
}

final class AsyncOperationObserverTests: BatonTestCase {
    func testObserversRunInOrderAndBeforeTheOperationIsFinished() {
        let events = Locked<[String]>([])
        let delegate = RecordingDelegate(events)
        let operation = ResultBlockOperation<Int> { operation in
            events.append("execute")
            operation.finish(with: 5)
        }
        operation.delegate = delegate
        operation.onStart { events.append("onStart") }
        // Seen as a plain AsyncOperation, the same callback gets the outcome without the output.
        let plain: AsyncOperation = operation
        plain.onFinish { [unowned operation] outcome in
            events.append("untyped onFinish \(outcome) finished=\(operation.isFinished)")
        }
        operation.onFinish { [unowned operation] outcome in
            events.append("typed onFinish \(outcome) finished=\(operation.isFinished)")
        }
        let queue = OperationQueue()
        queue.addOperation(operation)
        drain(queue)

        XCTAssertEqual(
            events.value,
            [
                "delegate start executing=true",
                "onStart",
                "execute",
                "delegate success 5 finished=false",
                "untyped onFinish succeeded(()) finished=false",
                "typed onFinish succeeded(5) finished=false",
            ])
    }

    func testTheDelegateHearsFailureAndCancellation() {
        let events = Locked<[String]>([])
        let delegate = RecordingDelegate(events)
        let failing = ImmediateOperation(.failure(TestError(code: 2)))
        failing.delegate = delegate
        failing.start()
        let cancelled = ManualOperation()
        cancelled.delegate = delegate
        cancelled.cancel()
        cancelled.start()
        XCTAssertEqual(
            events.value,
            [
                "delegate start executing=true",
                "delegate failure TestError(code: 2) finished=false",
                "delegate cancel finished=false",
            ])
    }

    func testAnObserverAddedAfterTheOutcomeIsCalledAtOnce() {
        let operation = ImmediateOperation(.success(3))
        operation.start()
        let calls = Locked(0)
        operation.onFinish { _ in calls.increment() }
        operation.onStart { calls.increment() }   // too late: never called
        XCTAssertEqual(calls.value, 1)
    }

    func testTheDelegateIsHeldWeakly() {
        let operation = ManualOperation()
        weak var weakDelegate: RecordingDelegate?
        inScope {
            let delegate = RecordingDelegate(Locked([]))
            operation.delegate = delegate
            weakDelegate = delegate
        }
        XCTAssertNil(weakDelegate)
        XCTAssertNil(operation.delegate)
    }

    func testOperationsAreFreedAfterTheQueueDrainsEvenWhenObserversCaptureThem() {
        let queue = OperationQueue()
        let count = 100
        let freed = (0..<count).map { _ in Gate() }
        let delegate = RecordingDelegate(Locked([]))
        inScope {
            for gate in freed {
                let operation = TrackedOperation(freed: gate)
                // Strong captures of the operation: released when it finishes, so no cycle remains.
                operation.onStart { _ = operation.isExecuting }
                operation.onFinish { _ in _ = operation.isFinished }
                operation.delegate = delegate
                queue.addOperation(operation)
            }
        }
        drain(queue)
        for gate in freed { gate.wait() }
    }
}
