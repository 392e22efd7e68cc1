import Dispatch
import Foundation
import XCTest

@testable import Baton

/// One test (or more) per defect of the third adversarial review (against 0.1.0), named after the
/// behaviour that must hold. Racy ones run enough trials, with a gate to widen the window, that
/// 0.1.0 fails them essentially every time.
final class ReliabilityRoundThreeTests: BatonTestCase {
    // MARK: - 1. A rerun followed by a cancel or a finish never runs the body on a decided operation

    /// Runs `decide` (a cancel or a finish) right after a `rerun()`, while the rerun's hop cannot land:
    /// the operation runs on a queue whose serial dispatch queue the test holds. Then the hop lands;
    /// the body must not run again.
    private func rerunThenDecide(_ decide: @escaping @Sendable (AsyncOperation) -> Void) -> Int {
        let lateRuns = Locked(0)
        let underlying = DispatchQueue(label: "serial underlying")
        let queue = OperationQueue()
        queue.underlyingQueue = underlying
        for _ in 0..<2_000 {
            let firstRun = Gate()
            let runs = Locked(0)
            let operation = BodyOperation { operation in
                if runs.increment() == 1 { return firstRun.open() }
                lateRuns.increment()
                operation.finish()
            } onCancel: {
                $0.finish()
            }
            DispatchQueue.global().async { _ = try? operation.runToOutcome(on: queue) }
            firstRun.wait()
            XCTAssertTrue(eventually { !operation.isInsideExecute })
            let release = Gate()
            underlying.async { release.wait() }
            operation.reexecute()
            decide(operation)
            release.open()
            waitFinished(operation)
            // The hop was queued behind the held block: once the dispatch queue drained, it landed.
            underlying.sync {}
        }
        return lateRuns.value
    }

    func testARerunThenACancelNeverRunsTheBodyOnTheCancelledOperation() {
        XCTAssertEqual(rerunThenDecide { $0.cancel() }, 0, "the body ran again on a cancelled operation")
    }

    func testARerunThenAFinishNeverRunsTheBodyOnTheFinishedOperation() {
        XCTAssertEqual(rerunThenDecide { $0.finish() }, 0, "the body ran again on a finished operation")
    }

    /// Racing from two threads: whatever the order, the body never starts on a decided operation.
    func testARerunRacingACancelNeverEntersADecidedOperation() {
        let lateRuns = Locked(0)
        for _ in 0..<2_000 {
            let firstRun = Gate()
            let runs = Locked(0)
            let operation = BodyOperation { operation in
                if runs.increment() == 1 { return firstRun.open() }
                if operation.isDecided { lateRuns.increment() }
                operation.finish()
            } onCancel: {
                $0.finish()
            }
            DispatchQueue.global().async { operation.start() }
            firstRun.wait()
            XCTAssertTrue(eventually { !operation.isInsideExecute })
            let go = DispatchSemaphore(value: 0)
            DispatchQueue.global().async {
                go.wait()
                operation.cancel()
            }
            go.signal()
            operation.reexecute()
            waitFinished(operation)
        }
        XCTAssertEqual(lateRuns.value, 0, "the body ran on an operation whose outcome was decided")
    }

    // MARK: - 2. Foundation operations with outside dependencies are never cancelled under them

    func testCancellingAChainWhoseFoundationStageDependsOnAnOutsideOperationIsSafe() throws {
        for _ in 0..<200 {
            let outside = ManualOperation()
            OperationQueue().addOperation(outside)
            outside.started.wait()
            let handle = try inScope { () -> ChainHandle<any Sendable> in
                let stage = BlockOperation {}
                stage.addDependency(outside)
                return try OperationQueue().addChain([
                    ImmediateOperation(.success(1)), stage, AsyncBlockOperation { $0.finish() },
                ])
            }
            handle.cancel()
            XCTAssertEqual(describe(try handle.waitToOutcome(timeout: testTimeout)), "cancelled")
            // The stage may be gone from the chain; the outside dependency walks its dependents now.
            outside.finish(with: 1)
            waitFinished(outside)
        }
    }

    func testCancellingAGroupWhoseFoundationChildDependsOnAnOutsideOperationIsSafe() {
        for _ in 0..<200 {
            let outside = ManualOperation()
            OperationQueue().addOperation(outside)
            outside.started.wait()
            let group = inScope { () -> GroupOperation in
                let child = BlockOperation {}
                child.addDependency(outside)
                return GroupOperation(operations: [child, ManualOperation(finishesOnCancel: true)])
            }
            OperationQueue().addOperation(group)
            group.cancel()
            waitFinished(group)
            XCTAssertEqual(describe(group.outcome), "cancelled")
            outside.finish(with: 1)
            waitFinished(outside)
        }
    }

    // MARK: - 3, 4. Operations in Foundation's queues: never a crash

    func testRunningAnOperationAddedWithFoundationsAddOperationIsRefused() throws {
        #if canImport(Darwin)
        throw XCTSkip("Apple's Foundation keeps no record Baton can read; the docs say so")
        #else
        let queue = OperationQueue()
        queue.isSuspended = true
        let baton = ImmediateOperation(.success(1), name: "added")
        let foundation = BlockOperation {}
        queue.addOperation(baton)
        queue.addOperation(foundation)
        XCTAssertThrowsError(try baton.run(timeout: .seconds(5))) { error in
            guard case BatonError.alreadyEnqueued("added")? = error as? BatonError else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try OperationQueue().addChain([foundation, AsyncBlockOperation { $0.finish() }])) { error in
            guard case BatonError.alreadyEnqueued? = error as? BatonError else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try GroupOperation(operations: []).addChild(baton))
        queue.isSuspended = false
        drain(queue)
        XCTAssertTrue(foundation.isFinished)
        XCTAssertEqual(describe(baton.outcome), "succeeded(1)")
        #endif
    }

    func testStartingByHandAnOperationWaitingInASuspendedQueueIsIgnored() throws {
        #if canImport(Darwin)
        throw XCTSkip("Apple's Foundation keeps no record Baton can read; the docs say so")
        #else
        let queue = OperationQueue()
        queue.isSuspended = true
        let runs = Locked(0)
        let operation = AsyncBlockOperation {
            runs.increment()
            $0.finish()
        }
        queue.addOperation(operation)
        operation.start()
        XCTAssertEqual(runs.value, 0, "a start by hand ran an operation its queue holds")
        XCTAssertEqual(diagnostics.kinds(for: operation), [.startedWhileInQueue])
        queue.isSuspended = false
        waitFinished(operation)
        drain(queue)
        XCTAssertEqual(runs.value, 1)
        #endif
    }

    func testStartingByHandOnTheMainThreadAStageOfAMainThreadQueueIsIgnored() throws {
        try XCTSkipUnless(Thread.isMainThread, "XCTest runs this test on the main thread")
        let queue = OperationQueue()
        queue.underlyingQueue = DispatchQueue.main
        queue.isSuspended = true
        let runs = Locked(0)
        let stage = AsyncBlockOperation {
            runs.increment()
            $0.finish()
        }
        let handle = try queue.addChain([stage])
        stage.start()   // on the main thread, while the queue is suspended
        XCTAssertEqual(runs.value, 0)
        XCTAssertEqual(diagnostics.kinds(for: stage), [.startedWhileClaimed])
        queue.isSuspended = false
        let deadline = Date().addingTimeInterval(testTimeout)
        while handle.outcome == nil && Date() < deadline {
            RunLoop.main.run(until: Date().addingTimeInterval(0.01))   // the queue's work runs here
        }
        XCTAssertEqual(describe(handle.outcome), "succeeded(())")
        XCTAssertEqual(runs.value, 1)
    }

    func testStartingByHandFromAnotherOperationOfTheQueueAStageWaitingThereIsIgnored() throws {
        #if canImport(Darwin)
        throw XCTSkip("Apple's Foundation keeps no record Baton can read; the docs say so")
        #else
        let blocker = ManualOperation()
        OperationQueue().addOperation(blocker)
        blocker.started.wait()
        let runs = Locked(0)
        let waiting = AsyncBlockOperation {
            runs.increment()
            $0.finish()
        }
        waiting.addDependency(blocker)
        let queue = OperationQueue()
        let handle = try queue.addChain([waiting])
        // From an operation of the same queue, `OperationQueue.current` is that queue, yet the queue is
        // not the one starting it: Foundation's own record says it still waits.
        let intruded = Gate()
        queue.addOperation(
            BlockOperation {
                waiting.start()
                intruded.open()
            })
        intruded.wait()
        XCTAssertEqual(runs.value, 0, "a start by hand ran a stage its queue holds")
        XCTAssertEqual(diagnostics.kinds(for: waiting), [.startedWhileClaimed])
        blocker.finish(with: 1)
        XCTAssertEqual(describe(try handle.waitToOutcome()), "succeeded(())")
        XCTAssertEqual(runs.value, 1)
        #endif
    }

    /// Two Baton observers installed at once on one Foundation operation (a chain and a keep-alive,
    /// two groups cancelling children that share a dependency) must both be called.
    func testCompletionObserversInstalledAtOnceOnAFoundationOperationAreAllCalled() {
        var lost = 0
        for _ in 0..<5_000 {
            let operation = BlockOperation {}
            let calls = Locked(0)
            let go = DispatchSemaphore(value: 0)
            let installed = DispatchGroup()
            for _ in 0..<2 {
                installed.enter()
                DispatchQueue.global().async {
                    go.wait()
                    operation.observeCompletion { calls.increment() }
                    installed.leave()
                }
            }
            go.signal()
            go.signal()
            installed.wait()
            let done = Gate()
            operation.observeCompletion { done.open() }
            operation.start()
            done.wait()
            // The observers run in one wrapper chain, inner ones first: when `done` opened, both ran.
            if calls.value != 2 { lost += 1 }
        }
        XCTAssertEqual(lost, 0, "an observer installed at the same time as another was never called")
    }

    // MARK: - 5, 6. One deadlock guard for every wait

    func testAnAsyncRunFromATaskOnASerialQueueForWorkOnThatQueueIsRefused() throws {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        let inner = ImmediateOperation(.success(1), name: "inner")
        let outer = AsyncTaskOperation<String> {
            do {
                _ = try await inner.run(on: queue)
                return "ran"
            } catch {
                return "\(error)"
            }
        }
        let said = try outer.runToOutcome(on: queue)
        guard case .succeeded(let text) = said else { return XCTFail("\(said)") }
        XCTAssertTrue(text.contains("serial queue"), text)
    }

    /// A task the operation's body starts and does not await is not the operation: once the operation
    /// has finished, the queue's slot is free and the run goes ahead.
    func testAnAsyncRunFromATaskThatOutlivesItsOperationOnASerialQueueRuns() throws {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        let said = Locked("not run")
        let done = Gate()
        let parentFinished = Gate()
        let parent = AsyncTaskOperation<Void> {
            Task {
                await parentFinished.waitAsync()
                do {
                    said.mutate { $0 = "running" }
                    let value = try await ImmediateOperation(.success(1)).run(on: queue)
                    said.mutate { $0 = "ran \(value)" }
                } catch {
                    said.mutate { $0 = "\(error)" }
                }
                done.open()
            }
        }
        parent.completionBlock = { parentFinished.open() }
        _ = try parent.runToOutcome(on: queue)
        done.wait()
        XCTAssertEqual(said.value, "ran 1")
    }

    func testABlockingRunOnAQueueWhoseDispatchQueueIsSerialIsRefusedAtOnce() throws {
        let underlying = DispatchQueue(label: "serial underlying")
        let queue = OperationQueue()
        queue.underlyingQueue = underlying
        let (outer, said) = runningInnerWorkBlocking(on: queue)
        _ = try withExtendedLifetime(underlying) { try outer.runToOutcome(on: queue) }
        XCTAssertTrue(said.value.contains("would deadlock"), said.value)
    }

    func testABlockingRunOnAQueueThatRunsOnTheMainThreadIsRefusedOnTheMainThread() throws {
        try XCTSkipUnless(Thread.isMainThread, "XCTest runs this test on the main thread")
        let queue = OperationQueue()
        queue.underlyingQueue = DispatchQueue.main
        XCTAssertThrowsError(try ImmediateOperation(.success(1), name: "inner").run(on: queue, timeout: .seconds(60))) { error in
            guard case BatonError.wouldDeadlock("inner", _)? = error as? BatonError else { return XCTFail("\(error)") }
        }
    }

    func testAWaitInsideTheOperationsOwnOnFinishIsRefusedAtOnce() {
        let operation = ImmediateOperation(.success(1), name: "self")
        let said = Locked("not called")
        operation.onFinish { _ in
            do {
                _ = try operation.wait(timeout: .seconds(60))
                said.mutate { $0 = "returned" }
            } catch {
                said.mutate { $0 = "\(error)" }
            }
        }
        finished(operation)
        XCTAssertTrue(said.value.contains("would deadlock"), said.value)
    }

    func testABlockingWaitInsideTheOperationsOwnOnStartIsRefusedAtOnce() {
        let operation = ImmediateOperation(.success(1), name: "self")
        let said = Locked("not called")
        operation.onStart {
            do {
                _ = try operation.wait(timeout: .seconds(60))
                said.mutate { $0 = "returned" }
            } catch {
                said.mutate { $0 = "\(error)" }
            }
        }
        operation.start()
        XCTAssertTrue(said.value.contains("would deadlock"), said.value)
        XCTAssertEqual(describe(operation.outcome), "succeeded(1)")
    }

    // MARK: - 7. A wait that ends early leaves nothing behind

    func testTimedOutWaitsLeaveNoRegistrationBehind() {
        let operation = ManualOperation()
        OperationQueue().addOperation(operation)
        operation.started.wait()
        for _ in 0..<20_000 {
            XCTAssertThrowsError(try operation.wait(timeout: .zero))
        }
        XCTAssertEqual(operation.core.withLock { $0.waitCount }, 0)
        XCTAssertEqual(operation.core.withLock { $0.life.waits.isEmpty }, true)
        operation.finish(with: 1)
        waitFinished(operation)
    }

    func testCancelledValueAwaitsLeaveNoRegistrationBehind() async {
        let operation = ManualOperation()
        OperationQueue().addOperation(operation)
        await operation.started.waitAsync()
        let tasks = (0..<1_000).map { _ in Task { try await operation.value } }
        for task in tasks { task.cancel() }
        for task in tasks { _ = try? await task.value }
        XCTAssertEqual(operation.core.withLock { $0.waitCount }, 0)
        XCTAssertEqual(operation.core.withLock { $0.life.waits.isEmpty }, true)
        operation.finish(with: 1)
        await Task.yield()
    }

    func testCancelledValueAwaitsOnARunningChainLeaveNoRegistrationBehind() async throws {
        let hold = ManualOperation()
        let handle = try OperationQueue().addChain([hold])
        await hold.started.waitAsync()
        let tasks = (0..<2_000).map { _ in Task { try await handle.value } }
        for task in tasks { task.cancel() }
        for task in tasks { _ = try? await task.value }
        XCTAssertEqual(handle.registeredCallbackCount, 0)
        hold.finish(with: 1)
        let outcome = await handle.awaitOutcome()
        XCTAssertTrue(outcome.isSuccess, "\(outcome)")
    }

    func testAWaitListReleasesWhatLeavesAndKeepsTheOrderOfWhatStays() {
        var list = WaitList<Int>()
        let tokens = (0..<1_000).map { list.append($0) }
        for token in tokens where token % 3 != 0 { XCTAssertNotNil(list.remove(token)) }
        XCTAssertNil(list.remove(tokens[1]), "removed twice")
        XCTAssertEqual(list.count, 333)
        XCTAssertLessThan(list.storage, 1_000, "holes are closed as waits leave")
        XCTAssertEqual(list.takeAll().values, (0..<1_000).filter { ($0 + 1) % 3 == 0 })
        XCTAssertTrue(list.isEmpty)
    }

    // MARK: - 8. Arguments are checked before anything is enqueued

    func testAChainRunWithANegativeTimeoutEnqueuesNothing() throws {
        let step = ResultBlockOperation<Int> { $0.finish(with: 1) }
        XCTAssertThrowsError(try Chain(step).run(timeout: .seconds(-1))) { error in
            guard case BatonError.invalidArgument? = error as? BatonError else { return XCTFail("\(error)") }
        }
        // Nothing claimed it, so nothing enqueued it: it is still the caller's to run.
        XCTAssertEqual(step.core.withLock { $0.life.custody }, .unclaimed)
        XCTAssertEqual(try step.runToOutcome().output, 1)
    }

    // MARK: - 9. A child added to a group that cancelled its children after a failure is cancelled

    func testAChildAddedAfterASiblingFailedInACancellingGroupDoesNotRun() throws {
        let hold = ManualOperation(finishesOnCancel: true)
        let group = GroupOperation(
            operations: [ImmediateOperation(.failure(TestError(code: 1))), hold], failurePolicy: .cancelSiblingsOnFailure)
        OperationQueue().addOperation(group)
        XCTAssertTrue(eventually { hold.isCancelled })
        let late = ImmediateOperation(.success(2))
        do {
            try group.addChild(late)
        } catch {
            // The group may have finished in the meantime: the child was never run, as it must not be.
            XCTAssertFalse(late.isFinished)
            return
        }
        waitFinished(late)
        XCTAssertEqual(describe(late.outcome), "cancelled")
    }

    // MARK: - 10. In a cycle of tree nodes, no edge decides which node lives

    /// Builds a → b → a with the two `addChild` calls in either order, keeps only `a`, and runs it.
    private func runCycleKeepingOnlyTheRoot(addingBackEdgeFirst: Bool) -> (outcome: String, freed: Bool) {
        weak var weakA: TreeNode<Int, Int>?
        weak var weakB: TreeNode<Int, Int>?
        let outcome: String = inScope {
            let a = inScope { () -> TreeNode<Int, Int> in
                let a = TreeNode<Int, Int>("a", items: { $0 > 0 ? [$0 - 1] : [] }) { value in
                    ResultBlockOperation<Int> { $0.finish(with: value) }
                }
                let b = TreeNode<Int, Int>("b", items: { $0 > 0 ? [$0 - 1] : [] }) { value in
                    ResultBlockOperation<Int> { $0.finish(with: value) }
                }
                if addingBackEdgeFirst {
                    b.addChild(a)
                    a.addChild(b)
                } else {
                    a.addChild(b)
                    b.addChild(a)
                }
                weakA = a
                weakB = b
                return a   // `b` is no longer held by the caller
            }
            let tree = TreeOperation(root: a, input: 6)
            let outcome = describe(finished(tree).outcome)
            XCTAssertEqual(tree.progress.totalUnitCount, 6)
            return outcome
        }
        return (outcome, eventually { weakA == nil && weakB == nil })
    }

    func testACycleOfTreeNodesRunsWhicheverOrderItsEdgesWereAdded() {
        for backEdgeFirst in [true, false] {
            let (outcome, freed) = runCycleKeepingOnlyTheRoot(addingBackEdgeFirst: backEdgeFirst)
            XCTAssertEqual(outcome, "succeeded(())", "back edge added first: \(backEdgeFirst)")
            XCTAssertTrue(freed, "a cycle of tree nodes leaked (back edge added first: \(backEdgeFirst))")
        }
    }

    // MARK: - 11. An operation finishes once, whoever starts it again

    func testStartingASkippedOperationAgainFromItsOwnObserverFinishesItOnce() {
        let operation = ImmediateOperation(.success(1))
        let events = Locked<[String]>([])
        let delegate = CountingDelegate(events: events)
        operation.delegate = delegate
        operation.cancel()
        operation.onFinish { _ in operation.start() }
        let notifications = Locked(0)
        operation.installNotificationTap { if $0 == .didChange("isFinished") { notifications.increment() } }
        operation.start()
        XCTAssertEqual(events.value, ["cancel"])
        XCTAssertEqual(notifications.value, 1)
        XCTAssertEqual(diagnostics.kinds(for: operation), [.startedTwice])
    }

    func testTwoRacingStartsOfACancelledOperationFinishItOnce() {
        var twice = 0
        for _ in 0..<2_000 {
            let operation = ImmediateOperation(.success(1))
            operation.cancel()
            let told = Locked(0)
            operation.onFinish { _ in told.increment() }
            let announced = Locked(0)
            operation.installNotificationTap { if $0 == .didChange("isFinished") { announced.increment() } }
            DispatchQueue.concurrentPerform(iterations: 2) { _ in operation.start() }
            if told.value != 1 || announced.value != 1 { twice += 1 }
        }
        XCTAssertEqual(twice, 0)
    }

    // MARK: - 12. The rest of the lifecycle read against the anchors

    func testATimeoutNeverReportsAnOperationThatFinishedFirst() {
        let queue = OperationQueue()
        let operations = (0..<2_000).map { _ in
            let operation = ResultBlockOperation<Int> { operation in
                DispatchQueue.global().async { operation.finish(with: 1) }
            }
            operation.timeout = .zero
            return operation
        }
        queue.addOperations(operations, waitUntilFinished: false)
        for operation in operations { waitFinished(operation) }
        // Reported exactly when the outcome is the timeout's (issue #22: a timeout fails the operation).
        for operation in operations {
            var timedOut = false
            if case .failed(BatonError.timedOut)? = operation.outcome { timedOut = true }
            let reported = diagnostics.kinds(for: operation).contains(.timedOut)
            XCTAssertEqual(
                reported, timedOut, "timedOut reported for an operation that finished first: \(describe(operation.outcome))")
            if !timedOut { XCTAssertEqual(operation.outcome?.output, 1) }
        }
    }

    func testACancelThenARerunFromOutsideExecuteReportsNoSecondFinish() {
        let cancelled = Gate()
        let release = Gate()
        let runs = Locked(0)
        let operation = BodyOperation { _ in
            runs.increment()
        } onCancel: { operation in
            cancelled.open()
            release.wait()
            operation.finish()
        }
        operation.start()
        DispatchQueue.global().async { operation.cancel() }
        cancelled.wait()
        operation.reexecute()
        release.open()
        waitFinished(operation)
        XCTAssertEqual(runs.value, 1)
        XCTAssertEqual(describe(operation.outcome), "cancelled")
        XCTAssertEqual(diagnostics.kinds(for: operation), [])
    }

    func testARerunRunsOnTheDispatchQueueOfTheQueueThatRunsTheOperation() throws {
        let underlying = DispatchQueue(label: "underlying", attributes: .concurrent)
        let key = DispatchSpecificKey<String>()
        underlying.setSpecific(key: key, value: "underlying")
        let queue = OperationQueue()
        queue.underlyingQueue = underlying
        let places = Locked<[String]>([])
        let operation = ResultBlockOperation<Int> { operation in
            places.append(DispatchQueue.getSpecific(key: key) ?? "elsewhere")
            if places.value.count < 3 { operation.rerun() } else { operation.finish(with: 3) }
        }
        XCTAssertEqual(try operation.runToOutcome(on: queue).output, 3)
        XCTAssertEqual(places.value, ["underlying", "underlying", "underlying"])
    }

    func testSettingsAfterStartAreReported() {
        let operation = ManualOperation()
        operation.start()
        operation.timeout = .seconds(1)
        operation.dependencyPolicy = .runRegardless
        XCTAssertNil(operation.timeout)
        XCTAssertEqual(operation.dependencyPolicy, .skipOnFailureOrCancellation)
        XCTAssertEqual(diagnostics.kinds(for: operation), [.settingAfterStart, .settingAfterStart])
        operation.finish(with: 1)
    }

    // MARK: - 13. Exports escape what their format interprets

    func testMermaidEscapesEntityCodesInNames() throws {
        let recorder = try FlightRecorder(capacity: 10)
        let operation = ImmediateOperation(.success(1), name: "love #9829; & <b>")
        recorder.attach(to: operation)
        finished(operation)
        let mermaid = recorder.export(.mermaid)
        XCTAssertFalse(mermaid.contains("#9829;"), mermaid)
        XCTAssertFalse(mermaid.contains("<b>"), mermaid)
        XCTAssertTrue(mermaid.contains("love #35;9829; #amp; #lt;b#gt;"), mermaid)
        let dot = recorder.export(.graphviz)
        XCTAssertTrue(dot.contains("love #9829; &amp; <b>"), dot)
    }
}

// MARK: - Doubles

/// An operation whose `execute()` and `didCancel()` run the given closures.
private final class BodyOperation: AsyncOperation, @unchecked Sendable {
    private let body: @Sendable (BodyOperation) -> Void
    private let onCancel: @Sendable (BodyOperation) -> Void
    init(_ body: @escaping @Sendable (BodyOperation) -> Void, onCancel: @escaping @Sendable (BodyOperation) -> Void) {
        self.body = body
        self.onCancel = onCancel
    }
    override func execute() { body(self) }
    override func didCancel() { onCancel(self) }

    var isDecided: Bool {
        core.withLock { $0.life.isDecided }
    }

    var isInsideExecute: Bool {
        core.withLock { state in
            if case .executing(.inside) = state.life.phase { return true }
            return false
        }
    }
}

private final class CountingDelegate: AsyncOperationDelegate, @unchecked Sendable {
    let events: Locked<[String]>
    init(events: Locked<[String]>) { self.events = events }
    func operationDidCancel(_ operation: AsyncOperation) { events.append("cancel") }
    func operation(_ operation: AsyncOperation, didFailWith error: any Error) { events.append("fail") }
    func operation(_ operation: AsyncOperation, didSucceedWith output: (any Sendable)?) { events.append("succeed") }
}

private func describe<Output>(_ outcome: Outcome<Output>?) -> String {
    outcome.map { "\($0)" } ?? "nil"
}
