import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Cancelling a composite reaches its children before `cancel()` returns, even while the composite's
/// own `execute()` is still launching them. Before, the cancellation waited for `execute()` to return
/// (the rule for a subclass's `execute()`), and a child launched meanwhile could enter its own
/// `execute()` after the composite's `cancel()` had returned: about 3 groups in 1,000 when the cancel
/// was sent from inside the first child.
final class CompositeCancelTests: BatonTestCase {
    /// A Baton child that counts the times it entered `execute()` after `late` was set.
    final class Child: AsyncOperation, @unchecked Sendable {
        let executed = Locked(0)
        let enteredLate = Locked(0)
        let late = Locked(false)
        private let onRun = Locked<(@Sendable () -> Void)?>(nil)

        func whenRun(_ body: @escaping @Sendable () -> Void) { onRun.mutate { $0 = body } }

        override func execute() {
            executed.increment()
            if late.value { enteredLate.increment() }
            onRun.value?()
            finish()
        }
    }

    /// Runs `body` from inside whichever of `children` runs first, on its thread; the others run
    /// nothing extra.
    private static func whenTheFirstRuns(of children: [Child], _ body: @escaping @Sendable () -> Void) {
        let first = Locked(true)
        for child in children {
            child.whenRun {
                let isFirst = first.mutate { first -> Bool in
                    defer { first = false }
                    return first
                }
                if isFirst { body() }
            }
        }
    }

    /// The children that neither read as cancelled or finished nor have run: read in this order, a
    /// child whose success is decided but not yet announced reads neither, and has run already.
    private static func untouched(_ children: [Child]) -> [Child] {
        children.filter { !$0.isCancelled && !$0.isFinished && $0.executed.value == 0 }
    }

    /// A Foundation child that holds the thread reading its `name` once it is armed: a recorded
    /// composite reads it as it launches its children, from inside its own `execute()`, so the test
    /// can cancel the composite exactly while it launches.
    final class Launching: Operation, @unchecked Sendable {
        let reached = Gate()
        let proceed = Gate()
        let armed = Locked(false)
        let ran = Locked(false)

        override var name: String? {
            get {
                let hold = armed.mutate { armed -> Bool in
                    defer { armed = false }
                    return armed
                }
                if hold {
                    reached.open()
                    proceed.wait()
                }
                return "launching"
            }
            set {}
        }

        override func main() { ran.mutate { $0 = true } }
    }

    /// Runs `composite` recorded, holds it inside its `execute()` at `launching`'s record, cancels it
    /// there, and checks that every child is cancelled when `cancel()` returns and none executes.
    private func cancelWhileLaunching(
        _ composite: AsyncOperation, launching: Launching, children: [Child], file: StaticString = #filePath,
        line: UInt = #line
    ) {
        let recorder = FlightRecorder()
        recorder.attach(to: composite)
        launching.armed.mutate { $0 = true }
        let queue = OperationQueue()
        queue.addOperation(composite)
        guard launching.reached.wait(file: file, line: line) else { return }
        composite.cancel()
        XCTAssertTrue(launching.isCancelled, "the child being launched was not cancelled by cancel()", file: file, line: line)
        for child in children {
            XCTAssertTrue(child.isCancelled, "a child was not cancelled by cancel()", file: file, line: line)
        }
        launching.proceed.open()
        waitFinished(composite, file: file, line: line)
        XCTAssertTrue(composite.isCancelled, file: file, line: line)
        XCTAssertFalse(launching.ran.value, "a cancelled Foundation child ran", file: file, line: line)
        for child in children {
            XCTAssertEqual(child.executed.value, 0, "a child of a cancelled composite executed", file: file, line: line)
        }
    }

    func testAGroupCancelledWhileItLaunchesCancelsEveryChildBeforeCancelReturns() {
        let launching = Launching()
        let children = [Child(), Child()]
        let group = GroupOperation(operations: [children[0], launching, children[1]])
        cancelWhileLaunching(group, launching: launching, children: children)
    }

    func testASequenceCancelledWhileItLaunchesItsFirstStepRunsNoStep() {
        let launching = Launching()
        let later = [Child(), Child()]
        let sequence = SequenceOperation<Void>(operations: [launching] + later)
        cancelWhileLaunching(sequence, launching: launching, children: [])
        for step in later { XCTAssertEqual(step.executed.value, 0) }
    }

    /// A second `cancel()` that lands while the first is still cancelling the children (held here
    /// in the first child's `didCancel()`, which the group's cancellation runs) returns with every
    /// child cancelled too: it cancels them itself rather than find the flag set and return.
    func testASecondCancelReturnsWithEveryChildCancelledWhileTheFirstIsStillCancellingThem() {
        final class Idle: AsyncOperation, @unchecked Sendable {
            let executed = Gate()
            let inDidCancel = Gate()
            let proceed = Gate()
            override func execute() { executed.open() }
            override func didCancel() {
                inDidCancel.open()
                proceed.wait()
                finish()
            }
        }
        let idle = Idle()
        let later = [Child(), Child()]
        let group = GroupOperation(operations: [idle] + later, maxConcurrentOperationCount: 1)
        OperationQueue().addOperation(group)
        guard idle.executed.wait() else { return }
        let firstReturned = Gate()
        DispatchQueue.global().async {
            group.cancel()
            firstReturned.open()
        }
        guard idle.inDidCancel.wait() else { return }
        group.cancel()
        for child in later { XCTAssertTrue(child.isCancelled, "the second cancel() returned before the children were") }
        idle.proceed.open()
        firstReturned.wait()
        waitFinished(group)
        XCTAssertTrue(group.isCancelled)
        for child in later { XCTAssertEqual(child.executed.value, 0) }
    }

    /// The composite's timeout marks it cancelled under its lock, reports the timeout, then cancels
    /// the children: a user's `cancel()` in between (held here in the diagnostics handler) returns
    /// with every child cancelled, while the composite is still launching them. Found by an
    /// adversarial round: before, that `cancel()` found the flag set and returned at once, and every
    /// child executed after it.
    func testACancelWhileTheTimeoutIsCancellingTheCompositeReturnsWithEveryChildCancelled() {
        let launching = Launching()
        let children = (0..<4).map { _ in Child() }
        let group = GroupOperation(operations: [launching] + children)
        group.timeout = .milliseconds(50)
        let recorder = FlightRecorder()
        recorder.attach(to: group)
        let reported = Gate()
        let release = Gate()
        let previous = Diagnostics.handler
        Diagnostics.handler = { diagnostic in
            if diagnostic.kind == .timedOut, diagnostic.operation.operation === group {
                reported.open()
                release.wait()
            }
            previous(diagnostic)
        }
        defer { Diagnostics.handler = previous }
        launching.armed.mutate { $0 = true }
        OperationQueue().addOperation(group)
        guard launching.reached.wait(), reported.wait() else { return }
        group.cancel()
        XCTAssertTrue(launching.isCancelled)
        for child in children { XCTAssertTrue(child.isCancelled, "cancel() returned before the children were cancelled") }
        launching.proceed.open()
        release.open()
        waitFinished(group)
        XCTAssertFalse(launching.ran.value)
        for child in children { XCTAssertEqual(child.executed.value, 0) }
        guard case .failed(BatonError.timedOut)? = group.outcome else {
            return XCTFail("the timeout decided first: \(String(describing: group.outcome))")
        }
    }

    /// A plain subclass keeps the rule that `didCancel()` never overlaps `execute()`: a cancel that
    /// arrives while `execute()` runs reaches `didCancel()` when it returns.
    func testAPlainOperationIsStillToldOfACancelOnlyAfterExecuteReturns() {
        final class Slow: AsyncOperation, @unchecked Sendable {
            let inside = Gate()
            let proceed = Gate()
            let events = Locked<[String]>([])
            override func execute() {
                inside.open()
                proceed.wait()
                events.append("execute returns")
            }
            override func didCancel() {
                events.append("didCancel")
                finish()
            }
        }
        let slow = Slow()
        OperationQueue().addOperation(slow)
        guard slow.inside.wait() else { return }
        slow.cancel()
        XCTAssertEqual(slow.events.value, [])
        slow.proceed.open()
        waitFinished(slow)
        XCTAssertEqual(slow.events.value, ["execute returns", "didCancel"])
    }

    /// The race as users meet it: the cancel is sent from inside the first child (on its thread or
    /// from another), while the composite may still be launching the others. When the composite's
    /// `cancel()` returns, every child of a group is cancelled, finished or has executed already; a
    /// child that was none of these (a sequence's later steps) never executes. Exact, with no window:
    /// a child executing when `cancel()` returned reads as cancelled, one that executed and is
    /// finishing has counted its run, so only a child entered later can fail the check.
    func testNoChildEntersExecuteAfterItsCompositeCancelReturned() {
        let trials = 3000
        let uncancelledGroupChildren = Locked(0)
        let lateEntries = Locked(0)
        let unfinished = Locked(0)
        DispatchQueue.concurrentPerform(iterations: trials) { trial in
            let isGroup = trial.isMultiple(of: 2)
            // Many children: a group launching them is still inside its `execute()` when the first runs.
            let children = (0..<(isGroup ? 40 : 6)).map { _ in Child() }
            let composite: AsyncOperation =
                isGroup ? GroupOperation(operations: children) : SequenceOperation<Void>(operations: children)
            let cancelled = DispatchSemaphore(value: 0)
            let untouched = Locked<[Child]>([])
            // From inside the first child to run: the composite has begun launching.
            Self.whenTheFirstRuns(of: children) {
                // Half from the child's own thread, half from another.
                let cancel: @Sendable () -> Void = {
                    composite.cancel()
                    untouched.mutate { $0 = Self.untouched(children) }
                    cancelled.signal()
                }
                if trial % 4 < 2 { cancel() } else { DispatchQueue.global().async(execute: cancel) }
            }
            let queue = OperationQueue()
            queue.addOperation(composite)
            let finished = DispatchSemaphore(value: 0)
            composite.observeCompletionForTests { finished.signal() }
            if cancelled.wait(timeout: .now() + testTimeout) == .timedOut
                || finished.wait(timeout: .now() + testTimeout) == .timedOut
            {
                unfinished.increment()
                return
            }
            let left = untouched.value
            if isGroup && !left.isEmpty { uncancelledGroupChildren.increment() }
            if left.contains(where: { $0.executed.value > 0 }) { lateEntries.increment() }
        }
        XCTAssertEqual(unfinished.value, 0, "composites not cancelled or not finished in time")
        XCTAssertEqual(uncancelledGroupChildren.value, 0, "groups with a child neither cancelled nor finished after cancel()")
        XCTAssertEqual(lateEntries.value, 0, "composites with a child that entered execute() after cancel() returned")
    }

    /// Composites nested 100 deep (groups and sequences alternating, beyond the trampoline's 64
    /// nested steps), cancelled at the top from inside a leaf at the bottom, on the leaf's thread, while
    /// the innermost group may still be launching: when the top's `cancel()` returns, every other leaf
    /// is cancelled, finished or has run already, and none runs later. Every level finishes cancelled.
    func testACancelFromTheBottomOfAHundredLevelsReachesEveryLeafBeforeItReturns() {
        let trials = 60
        let late = Locked(0)
        let unfinished = Locked(0)
        DispatchQueue.concurrentPerform(iterations: trials) { _ in
            let leaves = (0..<8).map { _ in Child() }
            var levels: [AsyncOperation] = [GroupOperation(operations: leaves)]
            for depth in 1..<100 {
                let inner = levels[levels.count - 1]
                levels.append(
                    depth.isMultiple(of: 2)
                        ? GroupOperation(operations: [inner]) : SequenceOperation<Void>(operations: [inner]))
            }
            let top = levels[levels.count - 1]
            let untouched = Locked<[Child]?>(nil)
            Self.whenTheFirstRuns(of: leaves) {
                top.cancel()
                untouched.mutate { $0 = Self.untouched(leaves) }
            }
            let finished = DispatchSemaphore(value: 0)
            top.observeCompletionForTests { finished.signal() }
            OperationQueue().addOperation(top)
            guard finished.wait(timeout: .now() + testTimeout) == .success else {
                unfinished.increment()
                return
            }
            if untouched.value?.isEmpty != true || !levels.allSatisfy({ $0.isFinished && $0.isCancelled }) {
                late.increment()
            }
        }
        XCTAssertEqual(unfinished.value, 0, "nests not finished in time")
        XCTAssertEqual(late.value, 0, "nests with a leaf left uncancelled by cancel(), or a level not cancelled")
    }

    // MARK: - Callbacks that cancel the composite from inside its own `execute()`, on its thread

    /// A tree's item factory runs inside the tree's `execute()` for the root's items: cancelling the
    /// tree from there runs its `didCancel()` nested on that thread. It must not take a lock the
    /// launch holds, and no item made afterwards executes.
    func testATreeCancelledFromItsItemFactoryInsideExecuteFinishesCancelled() {
        let tree = Locked<TreeOperation<Int>?>(nil)
        let executed = Locked(0)
        let root = TreeNode<Int, Int>("root", items: { _ in Array(0..<5) }) { value in
            if value == 1 { tree.value?.cancel() }
            return ResultBlockOperation {
                executed.increment()
                $0.finish(with: value)
            }
        }
        let operation = TreeOperation(root: root, input: 0)
        tree.mutate { $0 = operation }
        OperationQueue().addOperation(operation)
        waitFinished(operation)
        XCTAssertTrue(operation.isCancelled)
        XCTAssertLessThanOrEqual(executed.value, 1, "only the item made before the cancel may have run")
        tree.mutate { $0 = nil }
    }

    /// A retry's attempt factory runs inside the retry's `execute()` for the first attempt.
    func testARetryCancelledFromItsAttemptFactoryInsideExecuteFinishesCancelled() {
        let retry = Locked<RetryOperation<Int>?>(nil)
        let executed = Locked(0)
        let operation = RetryOperation<Int>(maximumAttempts: 3) { _ in
            retry.value?.cancel()
            return ResultBlockOperation {
                executed.increment()
                $0.finish(with: 1)
            }
        }
        retry.mutate { $0 = operation }
        OperationQueue().addOperation(operation)
        waitFinished(operation)
        XCTAssertTrue(operation.isCancelled)
        XCTAssertEqual(executed.value, 0)
        XCTAssertEqual(operation.attemptCount, 1)
        retry.mutate { $0 = nil }
    }

    /// A group's `childDidFinish(_:)` runs inside the group's `execute()` for a child that was
    /// cancelled before the group started (it finishes as it is launched, on that thread).
    func testAGroupCancelledFromChildDidFinishInsideExecuteFinishesCancelled() {
        final class Cancelling: GroupOperation, @unchecked Sendable {
            override func childDidFinish(_ child: Operation) { cancel() }
        }
        let early = Child()
        early.cancel()
        let later = (0..<5).map { _ in Child() }
        let group = Cancelling(operations: [early] + later, maxConcurrentOperationCount: 1)
        OperationQueue().addOperation(group)
        waitFinished(group)
        XCTAssertTrue(group.isCancelled)
        for child in later { XCTAssertEqual(child.executed.value, 0) }
    }
}
