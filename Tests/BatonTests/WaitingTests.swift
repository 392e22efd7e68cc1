import Dispatch
import Foundation
import XCTest
@testable import Baton

final class WaitingTests: BatonTestCase {
    func testRunAndWaitReturnsTheOutcome() throws {
        let operation = JitterOperation(5)
        XCTAssertTrue(try operation.runAndWait(timeout: testTimeout).isSucceeded)
        XCTAssertEqual(try JitterOperation(6).runAndWaitForOutput(timeout: testTimeout), 6)
        XCTAssertThrowsError(try ImmediateOperation(.failure(TestError(code: 2))).runAndWaitForOutput(timeout: testTimeout)) {
            XCTAssertEqual($0 as? TestError, TestError(code: 2))
        }
    }

    func testRunAndWaitOnAGivenQueue() throws {
        let queue = OperationQueue()
        XCTAssertEqual(try JitterOperation(1).runAndWaitForOutput(on: queue, timeout: testTimeout), 1)
    }

    func testATimeoutThrowsAndCancels() {
        let operation = ManualOperation(finishesOnCancel: true)
        XCTAssertThrowsError(try operation.runAndWait(timeout: 0.05)) { error in
            guard case BatonError.timedOut = error else { return XCTFail("unexpected \(error)") }
        }
        waitFinished(operation)
        XCTAssertTrue(operation.result?.isCancelled == true)
    }

    func testWaitingOnTheSerialQueueThatMustRunTheOperationIsRefused() {
        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        let verdict = Locked<String>("not run")
        let done = Gate()
        serial.addOperation {
            do {
                _ = try JitterOperation(1).runAndWait(on: serial, timeout: 5)
                verdict.mutate { $0 = "waited" }
            } catch BatonError.wouldDeadlock(_, let reason) {
                verdict.mutate { $0 = reason }
            } catch {
                verdict.mutate { $0 = "\(error)" }
            }
            done.open()
        }
        done.wait()
        XCTAssertEqual(verdict.value, "called from the serial queue that must run it")
    }

    func testWaitingForAnOperationRunElsewhere() throws {
        let operation = JitterOperation(3)
        OperationQueue().addOperation(operation)
        XCTAssertTrue(try operation.wait(timeout: testTimeout).isSucceeded)
        let never = ManualOperation()
        XCTAssertThrowsError(try never.wait(timeout: 0.01))
    }
}
