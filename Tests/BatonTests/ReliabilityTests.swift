import Dispatch
import Foundation
import XCTest

@testable import Baton

/// One test (or more) per defect of the reliability review: each failed (crashed, hung or asserted)
/// on the code before the lifecycle redesign. Racy ones run enough trials, or widen the window with
/// a gate, so that the old code fails them essentially every time.
final class ReliabilityTests: BatonTestCase {
    // MARK: - 1. No dangling dependency edge when an operation finishes without executing

    /// A cancelled operation is started (and finishes, and may be freed) only once its dependencies
    /// have finished, so no dependency is left pointing at a freed dependent.
    func testACancelledOperationWhoseDependencyRunsIsFreedOnlyAfterIt() {
        for _ in 0..<50 {
            let dependency = ManualOperation()
            OperationQueue().addOperation(dependency)
            dependency.started.wait()
            // A serial queue: if the cancelled dependent were made ready, it would run (and finish)
            // before the probe behind it; the probe running first proves it still waits.
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 1
            let freed = Gate()
            let probed = Gate()
            inScope {
                let dependent = TrackedOperation(freed: freed)
                dependent.addDependency(dependency)
                queue.addOperation(dependent)
                dependent.cancel()
                queue.addOperation(BlockOperation { probed.open() })
                probed.wait()
                XCTAssertTrue(dependent.isCancelled)
                XCTAssertFalse(dependent.isFinished, "the cancelled dependent finished while its dependency ran")
            }
            dependency.finish(with: 1)   // Linux Foundation walks the dependents of `dependency` here
            freed.wait()
            drain(queue)
        }
    }

    /// The same behind a barrier, which `dependencies` does not even list on Linux: the cancelled chain
    /// finishes once the barrier has run, and nothing touches it after it is freed.
    func testAChainCancelledBehindAPendingBarrierIsFreedSafely() throws {
        for _ in 0..<50 {
            let (queue, running) = queueWithPendingBarrier()
            let freed = Gate()
            let outcome = Locked<String?>(nil)
            try inScope {
                let handle = try queue.addChain([TrackedOperation(freed: freed), AsyncBlockOperation { $0.finish() }])
                handle.onFinish { finished in outcome.mutate { $0 = "\(finished)" } }
                handle.cancel()
            }
            running.finish(with: 0)   // the barrier runs and finishes: its dependents are walked
            freed.wait()
            drain(queue)
            XCTAssertEqual(outcome.value, "cancelled")
        }
    }

    // MARK: - 2. A cancellation racing a launch never puts a cancelled operation in a queue

    func testCancellingAChainWhileItLaunchesBehindABarrierNeverDeadlocks() throws {
        // The chain advances on the queue's threads (its cancelled first stage finishes) while
        // `cancel()` is still marking the later stages: each launch races a cancellation.
        for _ in 0..<100 {
            let (queue, running) = queueWithPendingBarrier()
            let handle = try queue.addChain((0..<40).map { _ in AsyncBlockOperation { $0.finish() } })
            handle.cancel()
            running.finish(with: 0)
            // A deadlocked queue never finishes the chain: the bounded wait throws `timedOut`.
            XCTAssertEqual(describe(try handle.waitToOutcome(timeout: testTimeout)), "cancelled")
            drain(queue)
        }
    }

    /// The window made deterministic: a stage whose `isCancelled` read (the launch check) cancels it,
    /// launched while a barrier is pending. Linux's `addOperation` holds the queue's lock while it
    /// makes the new operation depend on the barrier, and for an operation Foundation sees cancelled
    /// that path takes the same lock again: the queue deadlocks for good.
    func testACancellationBetweenTheLaunchCheckAndTheAddNeverDeadlocksTheQueue() throws {
        let queue = OperationQueue()
        let first = ManualOperation()
        let second = CancelledWhenChecked {}
        let handle = try queue.addChain([first, second])
        first.started.wait()
        let running = ManualOperation()
        queue.addOperation(running)
        running.started.wait()
        queue.addBarrierBlock {}   // pending: it waits for `first` and `running`
        DispatchQueue.global().async { first.finish(with: 1) }   // the chain launches `second` now
        DispatchQueue.global().async { running.finish(with: 0) }
        // A deadlocked queue never finishes the chain: the bounded wait throws `timedOut`.
        XCTAssertNoThrow(try handle.waitToOutcome(timeout: testTimeout))
    }

    // MARK: - 3. Nesting costs no stack

    private func nestedGroups(depth: Int, leaf: Operation) -> GroupOperation {
        var inner: Operation = leaf
        for _ in 0..<depth { inner = GroupOperation(operations: [inner]) }
        return inner as! GroupOperation
    }

    private func nestedSequences(depth: Int, leaf: Operation) -> SequenceOperation<Void> {
        var inner: Operation = leaf
        for _ in 0..<depth { inner = SequenceOperation<Void>(operations: [inner]) }
        return inner as! SequenceOperation<Void>
    }

    func testOneHundredThousandNestedGroupsRunCancelAndFree() {
        runCancelAndFree { nestedGroups(depth: nestingDepth, leaf: $0) }
    }

    func testOneHundredThousandNestedSequencesRunCancelAndFree() {
        runCancelAndFree { nestedSequences(depth: nestingDepth, leaf: $0) }
    }

    func testCancellingARunningNestOfOneHundredThousandGroupsReachesTheLeaf() {
        let leaf = ManualOperation(finishesOnCancel: true)
        let outer = nestedGroups(depth: nestingDepth, leaf: leaf)
        let queue = OperationQueue()
        queue.addOperation(outer)
        leaf.started.wait(timeout: bulkTimeout)
        outer.cancel()
        waitFinished(outer, timeout: bulkTimeout)
        XCTAssertEqual(describe(outer.outcome), "cancelled")
        XCTAssertEqual(describe(leaf.outcome), "cancelled")
    }

    // MARK: - 4. cancel() racing start(): execute() never runs on a decided operation

    func testACancelDuringTheStartAnnouncementFinishesWithoutExecuting() {
        let operation = ManualOperation(finishesOnCancel: true)
        let events = Locked<[String]>([])
        let delegate = RecordingDelegate(events: events)
        operation.delegate = delegate
        let cancelled = Gate()
        operation.onStart {
            // The start is announced; a cancel from another thread lands before execute() is entered.
            DispatchQueue.global().async {
                operation.cancel()
                cancelled.open()
            }
            cancelled.wait()
        }
        let notifications = Locked<[AsyncOperation.Notification]>([])
        operation.installNotificationTap { notification in notifications.mutate { $0.append(notification) } }
        operation.start()
        XCTAssertEqual(operation.executions.value, 0, "execute() ran on a cancelled operation")
        XCTAssertEqual(operation.cancellations.value, 0, "didCancel() ran before execute()")
        XCTAssertEqual(describe(operation.outcome), "cancelled")
        XCTAssertEqual(events.value, ["start", "cancel"])
        XCTAssertEqual(
            notifications.value,
            [
                .willChange("isExecuting"), .didChange("isExecuting"),
                .willChange("isExecuting"), .willChange("isFinished"), .didChange("isExecuting"), .didChange("isFinished"),
            ])
    }

    func testAFinishDuringTheStartAnnouncementFinishesWithoutExecuting() {
        let operation = ManualOperation()
        operation.onStart { operation.finish(with: 7) }
        operation.start()
        XCTAssertEqual(operation.executions.value, 0)
        XCTAssertEqual(describe(operation.outcome), "succeeded(7)")
    }

    func testCancelsRacingStartsNeverExecuteAFinishedOperation() {
        let lateExecutions = Locked(0)
        let queue = OperationQueue()
        let all = (0..<20_000).map { _ in
            AsyncBlockOperation { operation in
                if operation.isFinished || operation.outcome != nil { lateExecutions.increment() }
                operation.finish()
            }
        }
        let cancellers = DispatchQueue(label: "cancellers", attributes: .concurrent)
        for operation in all {
            queue.addOperation(operation)
            cancellers.async { operation.cancel() }
        }
        for operation in all { waitFinished(operation) }
        XCTAssertEqual(lateExecutions.value, 0)
    }

    // MARK: - 5. A sequence never loses a step

    func testASequenceCancelledWhileItMakesItsNextStepRetiresThatStep() throws {
        // The generator runs in the window between taking a step and launching it: cancelling the
        // sequence from there is the race, made deterministic.
        let made = Locked<AsyncOperation?>(nil)
        let holder = Locked<SequenceOperation<Void>?>(nil)
        let sequence = SequenceOperation<Void>(first: AsyncBlockOperation { $0.finish() }) { [made, holder] _ in
            holder.value?.cancel()
            let next = AsyncBlockOperation { $0.finish() }
            made.mutate { $0 = next }
            return next
        }
        holder.mutate { $0 = sequence }
        XCTAssertEqual(describe(finished(sequence).outcome), "cancelled")
        let step = try XCTUnwrap(made.value)
        waitFinished(step)
        XCTAssertEqual(describe(step.outcome), "cancelled", "the step taken while the sequence was cancelled must finish")
        holder.mutate { $0 = nil }
    }

    func testSequencesCancelledFromOtherThreadsFinishEveryStep() {
        let queue = OperationQueue()
        var steps = [Operation]()
        var sequences = [SequenceOperation<Void>]()
        for _ in 0..<500 {
            let mine = (0..<4).map { _ in AsyncBlockOperation { $0.finish() } }
            steps += mine
            sequences.append(SequenceOperation<Void>(operations: mine))
        }
        let cancellers = DispatchQueue(label: "cancellers", attributes: .concurrent)
        for sequence in sequences {
            queue.addOperation(sequence)
            cancellers.async { sequence.cancel() }
        }
        for operation in sequences + steps { waitFinished(operation) }
    }

    // MARK: - 6. Custody: nothing is handed to a queue twice

    func testTwoRunAndWaitsOnOneOperationRunItOnce() throws {
        let held = OperationQueue()
        held.isSuspended = true
        let operation = EnqueueSignallingOperation()
        let firstDone = Gate()
        DispatchQueue.global().async {
            XCTAssertEqual(describe(try? operation.runToOutcome(on: held, timeout: testTimeout)), "succeeded(1)")
            firstDone.open()
        }
        operation.enqueued.wait()   // the first call has claimed it and is adding it to its queue
        XCTAssertThrowsError(try operation.runToOutcome(timeout: testTimeout)) { error in
            guard case BatonError.alreadyEnqueued(let name)? = error as? BatonError else { return XCTFail("\(error)") }
            XCTAssertTrue(name.operation === operation)
        }
        held.isSuspended = false
        firstDone.wait()
        XCTAssertEqual(operation.executions.value, 1)
    }

    func testAnOperationInAGroupCannotJoinAChain() throws {
        let shared = ImmediateOperation(.success(1), name: "shared")
        let group = GroupOperation(operations: [shared])
        XCTAssertThrowsError(try OperationQueue().addChain([ImmediateOperation(.success(0)), shared])) { error in
            guard case BatonError.alreadyEnqueued("shared")? = error as? BatonError else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(describe(finished(group).outcome), "succeeded(())")
        XCTAssertEqual(shared.executions.value, 1)
    }

    func testARetryFactoryThatReturnsTheSameOperationTwiceFailsTheRetry() {
        let reused = ImmediateOperation(.failure(TestError(code: 1)), name: "reused")
        let retry = RetryOperation<Int>(maximumAttempts: 3) { _ in reused }
        XCTAssertEqual(
            finished(retry).outcome?.error.flatMap { $0 as? BatonError }.map { "\($0)" },
            "\(BatonError.alreadyFinished(operation: OperationReference(reused)))")
        XCTAssertEqual(reused.executions.value, 1)
    }

    func testStartingByHandAnOperationThatBatonEnqueuedIsIgnored() throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let operation = EnqueueSignallingOperation()
        let done = Gate()
        DispatchQueue.global().async {
            XCTAssertEqual(describe(try? operation.runToOutcome(on: queue, timeout: testTimeout)), "succeeded(1)")
            done.open()
        }
        operation.enqueued.wait()
        operation.start()
        XCTAssertEqual(operation.executions.value, 0)
        XCTAssertEqual(diagnostics.kinds(for: operation), [.startedWhileClaimed])
        queue.isSuspended = false
        done.wait()
        XCTAssertEqual(operation.executions.value, 1)
    }

    func testValueOnAnOperationThatAChainHoldsIsRefused() async throws {
        let queue = OperationQueue()
        let gate = ManualOperation()
        let later = ImmediateOperation(.success(5), name: "later")
        let handle = try queue.addChain([gate, later])
        do {
            _ = try await later.run(on: queue)
            XCTFail("value(on:) ran an operation a chain holds")
        } catch BatonError.alreadyEnqueued(let name) {
            XCTAssertTrue(name.operation === later)
        }
        gate.finish(with: 0)
        let outcome = await handle.awaitOutcome()
        XCTAssertEqual(outcome.output as? Int, 5)
    }

    // MARK: - 7. A completion block that captures its operation does not leak it

    func testCompletionBlocksThatCaptureTheirOperationDoNotLeak() {
        let live = DispatchGroup()
        let queue = OperationQueue()
        inScope {
            for _ in 0..<1_000 {
                let operation = CountedOperation(live: live)
                operation.completionBlock = { _ = operation.name }
                queue.addOperation(operation)
            }
        }
        XCTAssertEqual(live.wait(timeout: .now() + testTimeout), .success, "operations captured by their completion block leaked")
    }

    // MARK: - 8. A suspended group that is cancelled finishes

    func testCancellingASuspendedGroupFinishesItAndItsChildren() {
        let children = (0..<5).map { _ in ImmediateOperation(.success(1)) }
        let group = GroupOperation(operations: children)
        group.suspend()
        group.start()   // executing: its children wait in its suspended queue
        XCTAssertTrue(group.isExecuting)
        group.cancel()
        waitFinished(group)
        XCTAssertEqual(describe(group.outcome), "cancelled")
        for child in children {
            XCTAssertEqual(describe(child.outcome), "cancelled")
            XCTAssertEqual(child.executions.value, 0)
        }
    }

    func testCancellingASuspendedResultGroupFinishesIt() {
        let children = (0..<5).map { _ in ImmediateOperation(.success(1)) }
        let group = ResultGroupOperation(operations: children)
        group.suspend()
        group.start()
        XCTAssertTrue(group.isExecuting)
        group.cancel()
        waitFinished(group)
        XCTAssertEqual(describe(group.outcome), "cancelled")
    }

    // MARK: - 9. Progress readers see a consistent, monotonic view

    func testProgressReadFromOtherThreadsNeverGoesBackwards() {
        // Composite children: a live `Progress` tree updates a parent in several steps per child.
        let children = (0..<400).map { _ in
            GroupOperation(operations: (0..<5).map { _ in AsyncBlockOperation { $0.finish() } })
        }
        let group = GroupOperation(operations: children, maxConcurrentOperationCount: 2)
        let backwards = Locked(0)
        let reads = Locked(0)
        let stop = Locked(false)
        let readersDone = DispatchGroup()
        for _ in 0..<2 {
            readersDone.enter()
            Thread.detachNewThread {
                var last = 0.0
                var count = 0
                while !stop.value {
                    let fraction = group.progress.fractionCompleted
                    if fraction < last { backwards.increment() }
                    last = max(last, fraction)
                    count += 1
                }
                reads.mutate { $0 += count }
                readersDone.leave()
            }
        }
        finished(group)
        stop.mutate { $0 = true }
        XCTAssertEqual(readersDone.wait(timeout: .now() + testTimeout), .success)
        XCTAssertGreaterThan(reads.value, 0)
        XCTAssertEqual(backwards.value, 0, "fractionCompleted went backwards in \(backwards.value) of \(reads.value) reads")
        XCTAssertEqual(group.progress.fractionCompleted, 1)
    }

    // MARK: - 10. Hostile arguments get a clear error

    func testAGroupWithNoConcurrencyFailsWithAnErrorNamingTheArgument() {
        for count in [0, -2, Int.min] {
            let child = ImmediateOperation(.success(1))
            let group = GroupOperation(operations: [child], maxConcurrentOperationCount: count)
            guard case .failed(BatonError.invalidArgument(_, let reason))? = finished(group).outcome else {
                return XCTFail("\(count): \(String(describing: group.outcome))")
            }
            XCTAssertTrue(reason.contains("maxConcurrentOperationCount"), reason)
            XCTAssertEqual(describe(child.outcome), "cancelled")
        }
    }

    func testATreeWithNoConcurrencyFailsWithAnErrorNamingTheArgument() {
        let root = TreeNode<Int, Int>("root") { value in ResultBlockOperation<Int> { $0.finish(with: value) } }
        let tree = TreeOperation(root: root, input: 1, maxConcurrentOperationCount: 0)
        guard case .failed(BatonError.invalidArgument(_, let reason))? = finished(tree).outcome else {
            return XCTFail(String(describing: tree.outcome))
        }
        XCTAssertTrue(reason.contains("maxConcurrentOperationCount"), reason)
    }

    func testANegativeTimeoutFailsWithAnErrorNamingIt() {
        for timeout in [Duration.seconds(-1), .nanoseconds(-1)] {
            let operation = ImmediateOperation(.success(1))
            operation.timeout = timeout
            guard case .failed(BatonError.invalidArgument(_, let reason))? = finished(operation).outcome else {
                return XCTFail("\(timeout): \(String(describing: operation.outcome))")
            }
            XCTAssertTrue(reason.contains("timeout"), reason)
            XCTAssertEqual(operation.executions.value, 0)
        }
        let unlimited = ImmediateOperation(.success(1))
        unlimited.timeout = .seconds(Int64.max)
        XCTAssertEqual(describe(finished(unlimited).outcome), "succeeded(1)")
    }

    // MARK: - 11. Cancelling a tree cancels its running item mappings

    func testCancellingATreeCancelsAnItemMappingThatIsRunning() {
        let mappingStarted = Gate()
        let root = TreeNode<Int, Int>(
            "root",
            asyncItems: { (_: Int) async throws -> [Int] in
                mappingStarted.open()
                try await waitForCancellation()
                return [1]
            }
        ) { value in ResultBlockOperation<Int> { $0.finish(with: value) } }
        let tree = TreeOperation(root: root, input: 0)
        OperationQueue().addOperation(tree)
        mappingStarted.wait()
        tree.cancel()
        waitFinished(tree)
        XCTAssertEqual(describe(tree.outcome), "cancelled")
        XCTAssertEqual(tree.failures.count, 0)
    }

    // MARK: - 12. A child added to a cancelled group does not execute

    func testAChildAddedToACancelledRunningGroupFinishesCancelledWithoutExecuting() throws {
        let running = ManualOperation()   // keeps the group running after it is cancelled
        let group = GroupOperation(operations: [running])
        OperationQueue().addOperation(group)
        running.started.wait()
        group.cancel()
        let late = ImmediateOperation(.success(1))
        try group.addChild(late)
        waitFinished(late)
        XCTAssertEqual(describe(late.outcome), "cancelled")
        XCTAssertEqual(late.executions.value, 0)
        running.finish(with: 0)
        waitFinished(group)
        XCTAssertEqual(describe(group.outcome), "cancelled")
    }

    func testAChildAddedFromChildDidFinishOfACancelledGroupDoesNotExecute() {
        let late = ImmediateOperation(.success(1))
        let group = AddingGroup(late: late)
        OperationQueue().addOperation(group)
        group.first.started.wait()
        group.cancel()
        group.first.finish(with: 0)
        waitFinished(group)
        waitFinished(late)
        XCTAssertEqual(describe(late.outcome), "cancelled")
        XCTAssertEqual(late.executions.value, 0)
    }

    // MARK: - 13. Cycles of tree nodes are freed

    func testMutuallyRecursiveTreeNodesAreFreedWithTheTree() {
        weak var weakA: TreeNode<Int, Int>?
        weak var weakB: TreeNode<Int, Int>?
        inScope {
            let a = TreeNode<Int, Int>("a", items: { $0 > 0 ? [$0 - 1] : [] }) { value in
                ResultBlockOperation<Int> { $0.finish(with: value) }
            }
            let b = TreeNode<Int, Int>("b", items: { $0 > 0 ? [$0 - 1] : [] }) { value in
                ResultBlockOperation<Int> { $0.finish(with: value) }
            }
            a.addChild(b)
            b.addChild(a)
            weakA = a
            weakB = b
            let tree = TreeOperation(root: a, input: 6)
            XCTAssertEqual(describe(finished(tree).outcome), "succeeded(())")
            XCTAssertEqual(tree.progress.totalUnitCount, 6)   // a(6) → 5, b → 4, a → 3, b → 2, a → 1, b → 0
        }
        // The tree's item mappings run in tasks, whose captures are released as each task ends (just
        // after the tree finishes): a leak keeps them forever, so a bounded wait tells the two apart.
        XCTAssertTrue(eventually { weakA == nil && weakB == nil }, "a cycle of tree nodes leaked")
    }

    // MARK: - 14. Awaiting an operation nobody runs ends when the awaiting task is cancelled

    func testCancellingTheTaskThatAwaitsAnUnrunOperationEndsTheWait() async {
        let operation = ImmediateOperation(.success(1))
        let waiting = Task { try await operation.value }
        waiting.cancel()
        let result = await waiting.result
        XCTAssertThrowsError(try result.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        XCTAssertFalse(operation.isCancelled, "value waits for someone else's run: ending the wait leaves the operation alone")
    }

    func testCancellingTheTaskThatWaitsForAnUnrunOutcomeEndsTheWait() async {
        let operation = ImmediateOperation(.success(1))
        let started = Gate()
        let waiting = Task { () -> Outcome<Void> in
            started.open()
            return await operation.awaitOutcome()
        }
        await started.waitAsync()
        waiting.cancel()
        let outcome = await waiting.value
        XCTAssertEqual(describe(outcome), "cancelled")
    }

    // MARK: - Found by the adversarial review of the redesign

    func testCompositesFreedWithoutRunningGiveTheirChildrenBack() throws {
        for _ in 0..<200 { inScope { _ = GroupOperation(operations: [BlockOperation {}]) } }
        for _ in 0..<200 { inScope { _ = SequenceOperation<Void>(operations: [BlockOperation {}]) } }
        let queue = OperationQueue()
        for _ in 0..<200 {
            XCTAssertEqual(describe(try queue.addChain([BlockOperation {}]).waitToOutcome(timeout: testTimeout)), "succeeded(())")
        }
        let child = ImmediateOperation(.success(1))
        inScope { _ = GroupOperation(operations: [child]) }
        XCTAssertEqual(describe(try child.runToOutcome(timeout: testTimeout)), "succeeded(1)")
    }

    func testWaitingForAnotherOperationInsideDidCancelWorks() {
        let helper = WaitsForCancel()
        let outer = CancelsAndWaitsForHelper(helper: helper)
        OperationQueue().addOperation(outer)
        outer.started.wait()
        outer.cancel()
        waitFinished(outer)
        XCTAssertTrue(outer.waitResult.value.hasPrefix("helper finished"), outer.waitResult.value)
    }

    func testRunAndWaitInsideAnObserverOfASkippedOperationWorks() {
        let first = ManualOperation()
        first.cancel()
        let second = ImmediateOperation(.success(1))
        second.cancel()
        let result = Locked("not called")
        first.onFinish { _ in
            do {
                let outcome = try second.runToOutcome(timeout: testTimeout)
                result.mutate { $0 = "ok: \(outcome)" }
            } catch {
                result.mutate { $0 = "failed: \(error)" }
            }
        }
        finished(first)
        XCTAssertEqual(result.value, "ok: cancelled")
    }

    func testASequenceCancelledWhileItsGeneratorRunsFinishesAfterTheGeneratedStep() throws {
        let first = ImmediateOperation(.success(1))
        let inGenerator = Gate()
        let release = Gate()
        let made = Locked<ImmediateOperation?>(nil)
        let sequence = SequenceOperation<Int>(first: first) { previous in
            guard previous === first else { return nil }
            inGenerator.open()
            release.wait()
            let next = ImmediateOperation(.success(2))
            made.mutate { $0 = next }
            return next
        }
        let order = Locked<[String]>([])
        sequence.onFinish { _ in order.append("sequence \(made.value?.isFinished == true ? "after" : "before") its step") }
        OperationQueue().addOperation(sequence)
        inGenerator.wait()
        sequence.cancel()
        XCTAssertFalse(sequence.isFinished, "the sequence finished while its generator ran")
        release.open()
        waitFinished(sequence)
        XCTAssertEqual(order.value, ["sequence after its step"])
        let step = try XCTUnwrap(made.value)
        XCTAssertEqual(describe(step.outcome), "cancelled")
        XCTAssertEqual(step.executions.value, 0)
    }

    func testCancellingARetryWhileShouldRetryRunsEndsItWithoutServingTheDelay() {
        let inShouldRetry = Gate()
        let release = Gate()
        let retry = RetryOperation<Int>(
            maximumAttempts: 3, delay: .fixed(.seconds(3_600)),
            shouldRetry: { _, _ in
                inShouldRetry.open()
                release.wait()
                return true
            }
        ) { _ in ImmediateOperation(.failure(TestError(code: 1))) }
        OperationQueue().addOperation(retry)
        inShouldRetry.wait()
        retry.cancel()
        release.open()
        waitFinished(retry)   // an hour's delay would trip the bounded wait
        XCTAssertEqual(describe(retry.outcome), "cancelled")
        XCTAssertEqual(retry.attemptCount, 1)
    }

    func testAChainOnAQueueThatRunsOnTheMainThreadRuns() throws {
        let queue = OperationQueue()
        queue.underlyingQueue = DispatchQueue.main
        let operation = ImmediateOperation(.success(1))
        let handle = try queue.addChain([operation])
        let deadline = Date().addingTimeInterval(testTimeout)
        while handle.outcome == nil && Date() < deadline {
            RunLoop.main.run(until: Date().addingTimeInterval(0.01))   // the queue's work runs here
        }
        XCTAssertEqual(describe(handle.outcome), "succeeded(1)")
        XCTAssertEqual(diagnostics.kinds(for: operation), [])
    }

    func testAFoundationStageCancelledBehindAPendingBarrierIsFreedSafely() throws {
        for _ in 0..<100 {
            let (queue, running) = queueWithPendingBarrier()
            let ran = Locked(false)
            let outcome = Locked<String?>(nil)
            try inScope {
                let handle = try queue.addChain([BlockOperation { ran.mutate { $0 = true } }])
                handle.onFinish { finished in outcome.mutate { $0 = "\(finished)" } }
                handle.cancel()
            }
            running.finish(with: 0)   // the barrier runs and finishes: nothing it points at was freed
            drain(queue)   // the runner finishes after the chain has reported its outcome
            XCTAssertEqual(outcome.value, "cancelled")
            XCTAssertFalse(ran.value)
        }
    }

    // MARK: - Found by the second review

    func testAFoundationStageWithAnOutsideDependencyStartsOnlyOnceItIsReady() throws {
        for _ in 0..<300 {
            let trigger = BlockOperation {}
            let stage = BlockOperation {}
            stage.addDependency(trigger)
            let handle = try OperationQueue().addChain([stage])
            DispatchQueue.global().async { trigger.start() }
            XCTAssertEqual(describe(try handle.waitToOutcome(timeout: testTimeout)), "succeeded(())")
        }
    }

    func testAFoundationStageWaitsForADependencyAddedAfterChaining() throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let stage = BlockOperation {}
        let outside = ManualOperation()
        let handle = try queue.addChain([stage, ImmediateOperation(.success(1))])
        stage.addDependency(outside)
        queue.isSuspended = false
        OperationQueue().addOperation(outside)
        outside.started.wait()
        XCTAssertFalse(stage.isFinished, "the stage ran before its dependency finished")
        outside.finish(with: 0)
        XCTAssertEqual(describe(try handle.waitToOutcome(timeout: testTimeout)), "succeeded(1)")
    }

    func testCancellingAllOperationsOfTheChainsQueueEndsAChainWithAFoundationStage() throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let block = BlockOperation {}
        let handle = try queue.addChain([block, ImmediateOperation(.success(1))])
        queue.cancelAllOperations()
        queue.isSuspended = false
        XCTAssertEqual(describe(try handle.waitToOutcome(timeout: testTimeout)), "cancelled")
        XCTAssertTrue(block.isFinished)
        XCTAssertTrue(block.isCancelled)
    }

    func testACancelledGroupWhoseFoundationChildAlreadyFinishedStillFinishes() {
        let block = BlockOperation {}
        let group = GroupOperation(operations: [block])
        block.start()   // misuse Baton cannot refuse for a Foundation operation
        group.cancel()
        XCTAssertEqual(describe(finished(group).outcome), "cancelled")
    }

    func testRunAndWaitInAnObserverOfADeepNestOfCancelledGroupsWorks() {
        for levels in [1, 7, 16, 24] {
            let leaf = ManualOperation(finishesOnCancel: true)
            var top = GroupOperation(operations: [leaf])
            for _ in 1..<levels { top = GroupOperation(operations: [top]) }
            let result = Locked("not called")
            top.onFinish { _ in
                let probe = ImmediateOperation(.success(1))
                probe.cancel()
                do {
                    let outcome = try probe.runToOutcome(timeout: testTimeout)
                    result.mutate { $0 = "ok: \(outcome)" }
                } catch {
                    result.mutate { $0 = "failed: \(error)" }
                }
            }
            OperationQueue().addOperation(top)
            leaf.started.wait()
            top.cancel()
            waitFinished(top)
            XCTAssertEqual(result.value, "ok: cancelled", "\(levels) nested groups")
        }
    }
}

// MARK: - Doubles

/// A Foundation operation that cancels itself the first time its `isCancelled` is read.
private final class CancelledWhenChecked: BlockOperation, @unchecked Sendable {
    private let checked = Locked(false)
    convenience init(_ block: @escaping @Sendable () -> Void) {
        self.init()
        addExecutionBlock(block)
    }
    override var isCancelled: Bool {
        let first = checked.mutate { checked -> Bool in
            defer { checked = true }
            return !checked
        }
        if first {
            cancel()
            return false
        }
        return super.isCancelled
    }
}

/// Finishes when cancelled.
private final class WaitsForCancel: AsyncOperation, @unchecked Sendable {
    let started = Gate()
    override func execute() { started.open() }
    override func didCancel() { finish() }
}

/// Runs `helper` on a queue of its own; when cancelled, cancels it and waits for it synchronously.
private final class CancelsAndWaitsForHelper: AsyncOperation, @unchecked Sendable {
    let helper: WaitsForCancel
    let helperQueue = OperationQueue()
    let waitResult = Locked("not called")
    let started = Gate()
    init(helper: WaitsForCancel) { self.helper = helper }
    override func execute() {
        helperQueue.addOperation(helper)
        helper.started.wait()
        started.open()
    }
    override func didCancel() {
        helper.cancel()
        do {
            let outcome = try helper.waitToOutcome(timeout: testTimeout)
            waitResult.mutate { $0 = "helper finished: \(outcome)" }
        } catch {
            waitResult.mutate { $0 = "helper wait failed: \(error)" }
        }
        finish()
    }
}

/// Opens `enqueued` the first time Foundation reads `isReady`, which Linux's `OperationQueue` does
/// inside `addOperation`: a test then knows, without polling, that the operation is being enqueued.
private final class EnqueueSignallingOperation: ResultOperation<Int>, @unchecked Sendable {
    let enqueued = Gate()
    let executions = Locked(0)
    private let signalled = Locked(false)
    override var isReady: Bool {
        let first = signalled.mutate { signalled -> Bool in
            defer { signalled = true }
            return !signalled
        }
        if first { enqueued.open() }
        return super.isReady
    }
    override func execute() {
        executions.increment()
        finish(with: 1)
    }
}

/// Enters `live` while it exists.
private final class CountedOperation: AsyncOperation, @unchecked Sendable {
    let live: DispatchGroup
    init(live: DispatchGroup) {
        self.live = live
        live.enter()
    }
    deinit { live.leave() }
    override func execute() { finish() }
}

/// A group that adds `late` from `childDidFinish`, after it was cancelled.
private final class AddingGroup: GroupOperation, @unchecked Sendable {
    let first = ManualOperation()
    let late: ImmediateOperation
    init(late: ImmediateOperation) {
        self.late = late
        super.init(operations: [])
        try? addChild(first)
    }
    override func childDidFinish(_ child: Operation) {
        if child === first { try? addChild(late) }
    }
}

/// Records the delegate's callbacks by name.
private final class RecordingDelegate: AsyncOperationDelegate, @unchecked Sendable {
    let events: Locked<[String]>
    init(events: Locked<[String]>) { self.events = events }
    func operationDidStart(_ operation: AsyncOperation) { events.append("start") }
    func operationDidCancel(_ operation: AsyncOperation) { events.append("cancel") }
    func operation(_ operation: AsyncOperation, didSucceedWith output: Any?) { events.append("success") }
    func operation(_ operation: AsyncOperation, didFailWith error: any Error) { events.append("failure") }
}

/// Suspends until the current task is cancelled, then throws `CancellationError`.
private func waitForCancellation() async throws {
    let signal = CancellationSignal()
    await withTaskCancellationHandler {
        await withCheckedContinuation { continuation in signal.install(continuation) }
    } onCancel: {
        signal.fire()
    }
    throw CancellationError()
}

private final class CancellationSignal: Sendable {
    private let state = Locked<(fired: Bool, continuation: CheckedContinuation<Void, Never>?)>((false, nil))
    func install(_ continuation: CheckedContinuation<Void, Never>) {
        let resumeNow = state.mutate { state -> Bool in
            if state.fired { return true }
            state.continuation = continuation
            return false
        }
        if resumeNow { continuation.resume() }
    }
    func fire() {
        let continuation = state.mutate { state -> CheckedContinuation<Void, Never>? in
            state.fired = true
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume()
    }
}

/// An outcome as text, to compare outcomes (which are not `Equatable`: errors are not).
private func describe<Output>(_ outcome: Outcome<Output>?) -> String {
    outcome.map { "\($0)" } ?? "nil"
}

/// Whether `condition` becomes true within `timeout` seconds, checked as other threads make progress
/// (for releases that happen on another thread just after the event a test can wait on).

/// A queue running `running`, with a barrier added after it: the barrier is pending until `running`
/// finishes, and everything added to the queue meanwhile depends on it.
private func queueWithPendingBarrier() -> (OperationQueue, ManualOperation) {
    let queue = OperationQueue()
    let running = ManualOperation()
    queue.addOperation(running)
    running.started.wait()
    queue.addBarrierBlock {}
    return (queue, running)
}
