import Dispatch
import Foundation
import XCTest

@testable import Baton

/// A blocking wait inside a callback of an operation that holds a category, for an operation that
/// claims that category (found by stop 54's review). The holder gives its categories back only after
/// its start's observers, its outcome's observers and delegate, and a `didCancel()` delivered after
/// `execute()` returned: each such wait waits for itself. Inside `execute()` it was refused with
/// `BatonError.wouldDeadlock`; in these callbacks it ran out its whole timeout.
final class WaitInsideHolderCallbackTests: BatonTestCase {
    /// Runs, inside the callback `install` gives `body` to, a wait for an operation claiming the
    /// holder's category; returns what the wait threw.
    private func waitInside(
        _ install: (AsyncBlockOperation, @escaping @Sendable () -> Void) -> Void, finishElsewhere: Bool = true
    ) throws -> (any Error)? {
        let category = OperationCategory("x", in: ExclusivityScope("wait-inside-callback-\(UUID())"))
        let thrown = Locked<(any Error)??>(nil)
        let holder = AsyncBlockOperation { operation in
            if finishElsewhere { DispatchQueue.global().async { operation.finish() } } else { operation.finish() }
        }
        holder.name = "holder"
        try holder.addExclusivity(category)
        install(holder) {
            let waiter = AsyncBlockOperation { $0.finish() }
            waiter.name = "waiter"
            try? waiter.addExclusivity(category)
            do {
                try waiter.run(timeout: .seconds(testTimeout))
                thrown.mutate { $0 = .some(nil) }
            } catch {
                thrown.mutate { $0 = .some(error) }
            }
        }
        OperationQueue().addOperation(holder)
        waitFinished(holder)
        return try XCTUnwrap(thrown.value, "the callback never ran")
    }

    private func assertRefused(_ error: (any Error)?, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let error = error as? BatonError, case .wouldDeadlock = error else {
            return XCTFail("\(what): expected wouldDeadlock, got \(String(describing: error))", file: file, line: line)
        }
    }

    func testAWaitInsideAHoldersStartObserverIsRefused() throws {
        assertRefused(try waitInside { holder, body in holder.onStart { body() } }, "onStart")
    }

    func testAWaitInsideAHoldersOutcomeObserverIsRefused() throws {
        assertRefused(try waitInside { holder, body in holder.onFinish { _ in body() } }, "onFinish")
        assertRefused(
            try waitInside({ holder, body in holder.onFinish { _ in body() } }, finishElsewhere: false),
            "onFinish, finished inside execute()")
    }

    func testAWaitInsideAHoldersDelegateIsRefused() throws {
        final class Delegate: AsyncOperationDelegate, @unchecked Sendable {
            let body: @Sendable () -> Void
            init(_ body: @escaping @Sendable () -> Void) { self.body = body }
            func operation(_ operation: AsyncOperation, didSucceedWith output: Any?) { body() }
        }
        let delegates = Locked<[Delegate]>([])
        let error = try waitInside { holder, body in
            let delegate = Delegate(body)
            delegates.mutate { $0.append(delegate) }
            holder.delegate = delegate
        }
        assertRefused(error, "the delegate")
    }

    /// `didCancel()` delivered on the cancelling thread, once `execute()` has returned.
    func testAWaitInsideAHoldersDidCancelAfterExecuteReturnedIsRefused() throws {
        let category = OperationCategory("x", in: ExclusivityScope("wait-inside-did-cancel"))
        let thrown = Locked<(any Error)??>(nil)
        let executing = DispatchSemaphore(value: 0)
        let holder = AsyncBlockOperation(
            { _ in executing.signal() },
            onCancel: { operation in
                let waiter = AsyncBlockOperation { $0.finish() }
                try? waiter.addExclusivity(category)
                do {
                    try waiter.run(timeout: .seconds(testTimeout))
                    thrown.mutate { $0 = .some(nil) }
                } catch {
                    thrown.mutate { $0 = .some(error) }
                }
                operation.finish()
            })
        try holder.addExclusivity(category)
        OperationQueue().addOperation(holder)
        XCTAssertEqual(executing.wait(timeout: .now() + testTimeout), .success)
        XCTAssertTrue(eventually { holder.core.withLock { $0.life.phase == .executing(.idle) } }, "execute() never returned")
        holder.cancel()
        waitFinished(holder)
        assertRefused(try XCTUnwrap(thrown.value, "didCancel() never ran"), "didCancel")
    }

    /// Without a category in common, the same waits go ahead.
    func testAWaitInsideAHoldersObserverForAnUnrelatedOperationGoesAhead() throws {
        let error = try waitInside { holder, body in
            holder.onFinish { _ in
                let other = AsyncBlockOperation { $0.finish() }
                do { try other.run(timeout: .seconds(testTimeout)) } catch { XCTFail("\(error)") }
                body()
            }
        }
        // The observer's own wait for an operation claiming the category is still refused.
        assertRefused(error, "onFinish after an unrelated wait")
    }
}
