import Dispatch
import Foundation
import XCTest

@testable import Baton

/// One test per row of the state table in Docs/Lifecycle.md that no other test pins: the phases an
/// operation goes through, what each event does in each phase, and the custody transitions.
final class LifecycleTests: BatonTestCase {
    // MARK: - Phases

    func testCancelBeforeStartTellsNobodyAndStartFinishesItWithoutExecuting() {
        let operation = ManualOperation()
        let notifications = Locked<[AsyncOperation.Notification]>([])
        operation.installNotificationTap { notification in notifications.mutate { $0.append(notification) } }
        operation.cancel()
        XCTAssertTrue(operation.isCancelled)
        XCTAssertFalse(operation.isFinished)
        XCTAssertEqual(notifications.value, [])
        operation.start()
        XCTAssertEqual(notifications.value, [.willChange("isFinished"), .didChange("isFinished")])
        XCTAssertEqual(operation.executions.value, 0)
        XCTAssertEqual(operation.cancellations.value, 0)
        XCTAssertTrue(operation.outcome?.isCancelled == true)
    }

    func testStartAnnouncesExecutingBeforeTheStartObserversAndEntersExecuteAfterThem() {
        let operation = ManualOperation()
        let seen = Locked<[String]>([])
        operation.onStart { seen.append("observer executing=\(operation.isExecuting) executions=\(operation.executions.value)") }
        operation.start()
        XCTAssertEqual(seen.value, ["observer executing=true executions=0"])
        XCTAssertEqual(operation.executions.value, 1)
        operation.finish(with: 1)
    }

    func testACancelWhileExecuteRunsIsDeliveredToDidCancelWhenItReturns() {
        let order = Locked<[String]>([])
        let operation = ScriptedOperation { operation in
            operation.cancel()
            order.append("execute returns, cancelled=\(operation.isCancelled)")
        } onCancel: { operation in
            order.append("didCancel")
            operation.finish()
        }
        operation.start()
        XCTAssertEqual(order.value, ["execute returns, cancelled=true", "didCancel"])
        XCTAssertTrue(operation.outcome?.isCancelled == true)
    }

    func testACancelFromAnotherThreadWhileExecuteRunsWaitsForExecuteToReturn() {
        let inside = Gate()
        let cancelled = Gate()
        let overlapped = Locked(false)
        let executing = Locked(false)
        let operation = ScriptedOperation { _ in
            executing.mutate { $0 = true }
            inside.open()
            cancelled.wait()
            executing.mutate { $0 = false }
        } onCancel: { operation in
            if executing.value { overlapped.mutate { $0 = true } }
            operation.finish()
        }
        DispatchQueue.global().async {
            inside.wait()
            operation.cancel()
            cancelled.open()
        }
        operation.start()
        waitFinished(operation)
        XCTAssertFalse(overlapped.value, "didCancel() ran while execute() was running")
        XCTAssertTrue(operation.outcome?.isCancelled == true)
    }

    func testARerunRequestedInsideExecuteRunsAfterItReturns() {
        let runs = Locked(0)
        let overlapping = Locked(0)
        let inside = Locked(false)
        let operation = AsyncBlockOperation { operation in
            let wasInside = inside.mutate { inside -> Bool in
                defer { inside = true }
                return inside
            }
            if wasInside { overlapping.increment() }
            let run = runs.increment()
            operation.rerun()   // requested while execute() runs
            inside.mutate { $0 = false }
            if run == 3 { operation.finish() }
        }
        OperationQueue().addOperation(operation)
        waitFinished(operation)
        XCTAssertEqual(runs.value, 3)
        XCTAssertEqual(overlapping.value, 0)
    }

    func testARerunAndACancelInsideExecuteFinishCancelledWithoutRunningAgain() {
        let runs = Locked(0)
        let operation = AsyncBlockOperation { operation in
            runs.increment()
            operation.rerun()
            operation.cancel()
        }
        operation.start()
        waitFinished(operation)
        XCTAssertEqual(runs.value, 1)
        XCTAssertTrue(operation.outcome?.isCancelled == true)
    }

    func testFinishedOperationsIgnoreEveryEvent() {
        let operation = ImmediateOperation(.success(1))
        operation.start()
        operation.cancel()
        operation.finish(with: 2)
        operation.start()
        XCTAssertEqual(describeOutcome(operation.outcome), "succeeded(1)")
        XCTAssertFalse(operation.isCancelled)
        XCTAssertEqual(diagnostics.kinds(for: operation), [.finishedTwice, .startedTwice])
    }

    func testACompositeFinishedWithoutExecutingFinishesAfterTheChildrenItRetires() {
        let order = Locked<[String]>([])
        let inner = GroupOperation(operations: [AsyncBlockOperation { $0.finish() }])
        let innerSequence = SequenceOperation<Void>(operations: [AsyncBlockOperation { $0.finish() }])
        let outer = GroupOperation(operations: [inner, innerSequence])
        inner.onFinish { _ in order.append("inner group") }
        innerSequence.onFinish { _ in order.append("inner sequence") }
        outer.onFinish { _ in order.append("outer") }
        outer.cancel()
        outer.start()
        waitFinished(outer)
        XCTAssertEqual(order.value.last, "outer")
        XCTAssertEqual(Set(order.value.dropLast()), ["inner group", "inner sequence"])
    }

    // MARK: - Custody

    func testAClaimTakesAnUnclaimedPendingOperationOnce() throws {
        let operation = ImmediateOperation(.success(1), name: "taken")
        XCTAssertEqual(operation.core.withLock { $0.life.custody }, .unclaimed)
        try operation.claim()
        XCTAssertEqual(operation.core.withLock { $0.life.custody }, .claimed)
        XCTAssertThrowsError(try operation.claim()) { error in
            guard case BatonError.alreadyEnqueued("taken")? = error as? BatonError else { return XCTFail("\(error)") }
        }
        operation.retire()
    }

    func testClaimingAFinishedOrExecutingOperationIsRefused() {
        let finished = ImmediateOperation(.success(1), name: "done")
        finished.start()
        XCTAssertThrowsError(try finished.claim()) { error in
            guard case BatonError.alreadyFinished("done")? = error as? BatonError else { return XCTFail("\(error)") }
        }
        let executing = ManualOperation(name: "busy")
        executing.start()
        XCTAssertThrowsError(try executing.claim()) { error in
            guard case BatonError.alreadyExecuting("busy")? = error as? BatonError else { return XCTFail("\(error)") }
        }
        executing.finish(with: 0)
    }

    func testAClaimedFoundationOperationIsHeldUntilItFinishes() throws {
        let block = BlockOperation {}
        block.name = "block"
        let done = Gate()
        block.completionBlock = { done.open() }
        try block.claim()
        XCTAssertThrowsError(try block.claim())
        OperationQueue().launch([block])
        done.wait()
        XCTAssertThrowsError(try block.claim()) { error in
            guard case BatonError.alreadyFinished("block")? = error as? BatonError else { return XCTFail("\(error)") }
        }
    }

    func testLaunchingPutsTheOperationInTheQueuesCustody() throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let operation = ImmediateOperation(.success(1))
        try operation.claim()
        queue.launch([operation])
        XCTAssertEqual(
            operation.core.withLock { $0.life.custody }, .enqueued(.init(queue: ObjectIdentifier(queue), onMainThread: false)))
        queue.isSuspended = false
        waitFinished(operation)
        XCTAssertEqual(operation.executions.value, 1)
    }

    func testLaunchingACancelledOperationStartsItHereInsteadOfEnqueuingIt() throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let operation = ImmediateOperation(.success(1))
        try operation.claim()
        operation.cancel()
        queue.launch([operation])
        XCTAssertEqual(operation.core.withLock { $0.life.custody }, .direct)
        XCTAssertTrue(operation.isFinished, "started on the launching thread, never through the suspended queue")
        XCTAssertEqual(queue.operationCount, 0)
    }

    /// A sequence's relay (`Relay`): the claimant takes the operation to start on its own thread, from
    /// its claim, or from the custody of a queue that was never given it (its gate passed at launch);
    /// given to the queue after all, only that queue may start it.
    func testARelayTakesAClaimedOrNotYetAddedOperationAndCanGiveItToTheQueue() {
        typealias Machine = Lifecycle<Outcome<Int>>
        let key = Machine.QueueKey(queue: ObjectIdentifier(self), onMainThread: false)
        let other = Machine.QueueKey(queue: ObjectIdentifier(Machine.self as Any.Type), onMainThread: false)
        var unclaimed = Machine()
        XCTAssertFalse(unclaimed.launchHere(insteadOf: nil), "nobody claimed it")
        var claimed = Machine()
        XCTAssertNil(claimed.claim())
        XCTAssertFalse(claimed.launchHere(insteadOf: key), "no queue has it")
        XCTAssertTrue(claimed.launchHere(insteadOf: nil))
        XCTAssertEqual(claimed.custody, .handedOn)
        XCTAssertFalse(claimed.launchHere(insteadOf: nil), "taken once")
        XCTAssertTrue(claimed.enqueueInstead(on: key))
        XCTAssertEqual(claimed.custody, .enqueued(key))
        var launched = Machine()
        XCTAssertNil(launched.claim())
        XCTAssertEqual(launched.launch(on: key), .enqueue)
        XCTAssertFalse(launched.launchHere(insteadOf: other), "another queue's custody")
        XCTAssertTrue(launched.launchHere(insteadOf: key))
        XCTAssertEqual(launched.custody, .handedOn)
        // A cancel starts it at once; its holder then finds it taken.
        XCTAssertEqual(launched.cancel(), .startHere)
        XCTAssertEqual(launched.custody, .direct)
        XCTAssertFalse(launched.takeHandedOn())
        var started = Machine()
        XCTAssertNil(started.claim())
        XCTAssertTrue(started.launchHere(insteadOf: nil))
        XCTAssertTrue(started.takeHandedOn())
        let facts = Machine.StartFacts(caller: .init(queue: nil, isMainThread: false, foundation: nil), skip: nil, ready: true)
        XCTAssertEqual(started.start(facts), .announce(notReady: false))
        XCTAssertFalse(started.enqueueInstead(on: key), "started: no queue may have it")
    }

    func testRetiringAClaimedOperationFinishesItCancelledWithoutExecuting() throws {
        let operation = ImmediateOperation(.success(1))
        try operation.claim()
        operation.retire()
        XCTAssertTrue(operation.outcome?.isCancelled == true)
        XCTAssertEqual(operation.executions.value, 0)
    }

    func testStartingAClaimedOperationByHandIsRefused() throws {
        let operation = ImmediateOperation(.success(1))
        try operation.claim()
        operation.start()
        XCTAssertFalse(operation.isFinished)
        XCTAssertEqual(diagnostics.kinds(for: operation), [.startedWhileClaimed])
        operation.retire()
    }
}

/// An operation whose `execute()` and `didCancel()` run the given closures.
private final class ScriptedOperation: AsyncOperation, @unchecked Sendable {
    private let onExecute: @Sendable (ScriptedOperation) -> Void
    private let onCancel: @Sendable (ScriptedOperation) -> Void
    init(
        _ onExecute: @escaping @Sendable (ScriptedOperation) -> Void,
        onCancel: @escaping @Sendable (ScriptedOperation) -> Void
    ) {
        self.onExecute = onExecute
        self.onCancel = onCancel
    }
    override func execute() { onExecute(self) }
    override func didCancel() { onCancel(self) }
}

private func describeOutcome<Output>(_ outcome: Outcome<Output>?) -> String {
    outcome.map { "\($0)" } ?? "nil"
}
