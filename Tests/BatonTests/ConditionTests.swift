import Dispatch
import Foundation
import XCTest

@testable import Baton

private struct Refused: Error, Equatable {}

/// Counts its executions and succeeds.
private final class CountingOperation: AsyncOperation, @unchecked Sendable {
    let executions = Locked(0)
    override func execute() {
        executions.increment()
        finish()
    }
}

final class ConditionTests: BatonTestCase {
    private func answering(_ result: ConditionResult, name: String = "fixed") -> Condition {
        Condition(name) { (_: ConditionContext, answer: @escaping @Sendable (ConditionResult) -> Void) in answer(result) }
    }

    /// A condition that never answers (within the test).
    private func silentForever(name: String = "never", timeout: Duration = .seconds(60)) -> Condition {
        Condition(name, timeout: timeout) { (_: ConditionContext, _: @escaping @Sendable (ConditionResult) -> Void) in }
    }

    private func outcome(of conditions: [Condition], on queue: OperationQueue = OperationQueue()) throws -> (Outcome<Void>, Int) {
        let operation = CountingOperation()
        for condition in conditions { try operation.addCondition(condition) }
        queue.addOperation(operation)
        waitFinished(operation)
        return (operation.outcome!, operation.executions.value)
    }

    // MARK: - Results

    func testASatisfiedConditionLetsTheOperationExecute() throws {
        let (outcome, executions) = try outcome(of: [answering(.satisfied)])
        XCTAssertTrue(outcome.isSuccess)
        XCTAssertEqual(executions, 1)
    }

    func testAFailedConditionFailsTheOperationUnexecutedNamingTheCondition() throws {
        let operation = CountingOperation()
        operation.name = "fetch"
        try operation.addCondition(answering(.failed(Refused()), name: "logged in"))
        XCTAssertThrowsError(try operation.run(timeout: .seconds(testTimeout))) { error in
            guard case BatonError.conditionFailed(let culprit, let condition, let underlying) = error else {
                return XCTFail("\(error)")
            }
            XCTAssertEqual(culprit.name, "fetch")
            XCTAssertEqual(condition, "logged in")
            XCTAssertEqual(underlying as? Refused, Refused())
        }
        XCTAssertEqual(operation.executions.value, 0)
    }

    func testAnUnsatisfiedConditionCancelsTheOperationSilently() throws {
        let (outcome, executions) = try outcome(of: [answering(.notSatisfied)])
        XCTAssertTrue(outcome.isCancelled)
        XCTAssertEqual(executions, 0)
    }

    func testAnAsyncConditionDecides() throws {
        let condition = Condition("async") { (_: ConditionContext) async -> ConditionResult in
            await Task.yield()
            return .satisfied
        }
        XCTAssertTrue(try outcome(of: [condition]).0.isSuccess)
    }

    func testTheFirstConditionThatFailsDecidesAtOnce() throws {
        let (outcome, executions) = try outcome(of: [silentForever(), answering(.failed(Refused()))])
        guard case .failed(BatonError.conditionFailed(_, "fixed", _)) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(executions, 0)
    }

    func testAConditionThatNeverAnswersTimesOut() throws {
        let (outcome, _) = try outcome(of: [silentForever(name: "slow", timeout: .milliseconds(30))])
        guard case .failed(BatonError.conditionFailed(_, "slow", BatonError.conditionTimedOut("slow", let after))) = outcome
        else { return XCTFail("\(outcome)") }
        XCTAssertEqual(after, .milliseconds(30))
    }

    func testCancellingWhileConditionsEvaluateEndsTheOperationAtOnce() throws {
        let operation = CountingOperation()
        try operation.addCondition(silentForever())
        let started = Gate()
        let probe = Condition("probe") { (_: ConditionContext, _: @escaping @Sendable (ConditionResult) -> Void) in started.open()
        }
        try operation.addCondition(probe)
        OperationQueue().addOperation(operation)
        started.wait()
        operation.cancel()
        waitFinished(operation)
        XCTAssertEqual(operation.outcome?.isCancelled, true)
        XCTAssertEqual(operation.executions.value, 0)
    }

    /// A condition that never answers is timed out after a minute; an operation cancelled meanwhile
    /// must not leave that timeout holding the condition (and what its answer captured) for the minute.
    func testAnAbandonedEvaluationLeavesItsTimeoutsHoldingNothing() throws {
        weak var weakCondition: Condition?
        weak var weakOperation: CountingOperation?
        try inScope {
            let started = Gate()
            let condition = Condition("never", timeout: .seconds(60)) {
                (_: ConditionContext, _: @escaping @Sendable (ConditionResult) -> Void) in started.open()
            }
            let operation = CountingOperation()
            try operation.addCondition(condition)
            weakCondition = condition
            weakOperation = operation
            OperationQueue().addOperation(operation)
            started.wait()
            operation.cancel()
            waitFinished(operation)
            XCTAssertEqual(operation.outcome?.isCancelled, true)
        }
        XCTAssertTrue(eventually { weakOperation == nil }, "the operation was not freed")
        XCTAssertTrue(eventually { weakCondition == nil }, "the pending timeout still holds the condition")
    }

    func testAConditionAnsweringTwiceCountsOnce() throws {
        let twice = Condition("twice") { (_: ConditionContext, answer: @escaping @Sendable (ConditionResult) -> Void) in
            answer(.satisfied)
            answer(.failed(Refused()))
        }
        let (outcome, executions) = try outcome(of: [twice])
        XCTAssertTrue(outcome.isSuccess)
        XCTAssertEqual(executions, 1)
    }

    // MARK: - Composition

    func testConditionsCompose() throws {
        let yes = answering(.satisfied, name: "yes")
        let no = answering(.notSatisfied, name: "no")
        let bad = answering(.failed(Refused()), name: "bad")
        XCTAssertTrue(try outcome(of: [.all([yes, yes])]).0.isSuccess)
        XCTAssertTrue(try outcome(of: [.all([yes, no])]).0.isCancelled)
        XCTAssertNotNil(try outcome(of: [.all([yes, bad])]).0.error)
        XCTAssertTrue(try outcome(of: [.any([no, bad, yes])]).0.isSuccess)
        XCTAssertNotNil(try outcome(of: [.any([no, bad])]).0.error, "no condition passed; one failed")
        XCTAssertTrue(try outcome(of: [.any([no, no])]).0.isCancelled)
        XCTAssertTrue(try outcome(of: [.not(no)]).0.isSuccess)
        XCTAssertTrue(try outcome(of: [.not(yes)]).0.isCancelled)
        XCTAssertNotNil(try outcome(of: [.not(yes, failingWith: Refused())]).0.error)
        XCTAssertTrue(try outcome(of: [.silent(bad)]).0.isCancelled)
        XCTAssertTrue(try outcome(of: [.block("true") { true }]).0.isSuccess)
        XCTAssertTrue(try outcome(of: [.block("false") { false }]).0.isCancelled)
        XCTAssertNotNil(try outcome(of: [.block("throws") { throw Refused() }]).0.error)
        XCTAssertEqual(Condition.all([yes, no]).name, "yes and no")
        XCTAssertEqual(Condition.any([yes, no]).name, "yes or no")
    }

    func testDependencyConditionsSeeTheOutcomesOfDependencies() throws {
        let failed = ImmediateOperation(.failure(TestError(code: 7)), name: "failed")
        let operation = CountingOperation()
        operation.dependencyPolicy = .runRegardless
        operation.addDependency(failed)
        try operation.addCondition(.noFailedDependencies)
        let queue = OperationQueue()
        queue.addOperations([operation, failed], waitUntilFinished: false)
        waitFinished(operation)
        guard case .failed(BatonError.conditionFailed(_, _, BatonError.dependencyFailed(let dependency, _)))? = operation.outcome
        else { return XCTFail("\(String(describing: operation.outcome))") }
        XCTAssertEqual(dependency.name, "failed")

        let cancelled = CountingOperation()
        cancelled.cancel()
        let after = CountingOperation()
        after.dependencyPolicy = .runRegardless
        after.addDependency(cancelled)
        try after.addCondition(.noCancelledDependencies)
        queue.addOperations([after, cancelled], waitUntilFinished: false)
        waitFinished(after)
        XCTAssertEqual(after.outcome?.isCancelled, true)
        XCTAssertEqual(after.executions.value, 0)
    }

    func testAFlagConditionPassesWhenTheFlagIsSetAndTimesOutOtherwise() throws {
        let flag = ConditionFlag("configured")
        let waiting = CountingOperation()
        try waiting.addCondition(.waitUntil(flag, timeout: .seconds(testTimeout)))
        let queue = OperationQueue()
        queue.addOperation(waiting)
        XCTAssertFalse(waiting.isFinished)
        flag.set()
        waitFinished(waiting)
        XCTAssertEqual(waiting.outcome?.isSuccess, true)

        let unset = ConditionFlag("never set")
        let late = CountingOperation()
        try late.addCondition(.waitUntil(unset, timeout: .milliseconds(20)))
        queue.addOperation(late)
        waitFinished(late)
        guard case .failed(BatonError.conditionFailed(_, "never set", BatonError.conditionTimedOut))? = late.outcome else {
            return XCTFail("\(String(describing: late.outcome))")
        }
    }

    // MARK: - Produced dependencies

    func testAProducedDependencySharedByAThousandOperationsRunsOnce() throws {
        let runs = Locked(0)
        let release = Gate()
        let loggedIn = Condition(
            "logged in",
            producing: { _ in
                AsyncBlockOperation { operation in
                    runs.increment()
                    // A thread of its own: on the global queue, this block waited about 20 s for a
                    // worker under ThreadSanitizer in CI's `swift test` (after the classes before this
                    // one; the gates' work for the 1,000 operations goes to that queue too), and the
                    // first wait below ran out.
                    Thread {
                        release.wait()
                        operation.finish()
                    }.start()
                }
            },
            evaluate: { (_: ConditionContext, answer: @escaping @Sendable (ConditionResult) -> Void) in answer(.satisfied) })
        let operations = (0..<1_000).map { _ in CountingOperation() }
        for operation in operations { try operation.addCondition(loggedIn) }
        let queue = OperationQueue()
        queue.addOperations(operations, waitUntilFinished: false)
        release.open()
        for operation in operations { waitFinished(operation) }
        XCTAssertEqual(runs.value, 1)
        XCTAssertTrue(operations.allSatisfy { $0.executions.value == 1 })
    }

    func testWhenTheProducedDependencyFailsEveryWaiterFailsWithItsError() throws {
        let shared = Condition(
            "prepared", producing: { _ in ImmediateOperation(.failure(TestError(code: 3)), name: "prepare") },
            evaluate: { (_: ConditionContext, answer: @escaping @Sendable (ConditionResult) -> Void) in answer(.satisfied) })
        let children = (0..<20).map { _ in CountingOperation() }
        for child in children { try child.addCondition(shared) }
        let group = GroupOperation(operations: children)
        XCTAssertThrowsError(try group.run(timeout: .seconds(testTimeout)))
        for child in children {
            guard case .failed(BatonError.conditionFailed(_, "prepared", let underlying))? = child.outcome else {
                return XCTFail("\(String(describing: child.outcome))")
            }
            XCTAssertEqual(underlying as? TestError, TestError(code: 3))
            XCTAssertEqual(child.executions.value, 0)
        }
    }

    func testTheProducedDependencyIsCancelledWhenItsLastWaiterLeaves() throws {
        let produced = ManualOperation(name: "log in", finishesOnCancel: true)
        let condition = Condition(
            "logged in", producing: { _ in produced },
            evaluate: { (_: ConditionContext, answer: @escaping @Sendable (ConditionResult) -> Void) in answer(.satisfied) })
        let operation = CountingOperation()
        try operation.addCondition(condition)
        try operation.addCondition(answering(.failed(Refused()), name: "later"))
        let queue = OperationQueue()
        // The failing condition may decide before the producer starts; either way it must end.
        queue.addOperation(operation)
        waitFinished(operation)
        XCTAssertNotNil(operation.outcome?.error)
        if produced.isExecuting || produced.executions.value > 0 { waitFinished(produced) }
        XCTAssertTrue(eventually { produced.isFinished || produced.executions.value == 0 })
    }

    // MARK: - Starts and bad input

    func testAnOperationStartedByHandPassesItsGateFirst() throws {
        let flag = ConditionFlag("go")
        let operation = CountingOperation()
        try operation.addCondition(.waitUntil(flag, timeout: .seconds(testTimeout)))
        operation.start()
        XCTAssertFalse(operation.isExecuting)
        XCTAssertEqual(operation.executions.value, 0)
        flag.set()
        waitFinished(operation)
        XCTAssertEqual(operation.executions.value, 1)
    }

    func testBadConditionsAreRefused() throws {
        let operation = CountingOperation()
        operation.name = "job"
        let condition = answering(.satisfied)
        try operation.addCondition(condition)
        XCTAssertThrowsError(try operation.addCondition(condition)) { error in
            guard case BatonError.invalidArgument(let culprit, let reason) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(culprit.name, "job")
            XCTAssertTrue(reason.contains("twice"), reason)
        }
        try operation.run(timeout: .seconds(testTimeout))
        XCTAssertThrowsError(try operation.addCondition(answering(.satisfied))) { error in
            guard case BatonError.invalidArgument(_, let reason) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("before the operation starts"), reason)
        }
    }

    func testConditionsAndCategoriesTogetherInAChain() throws {
        let scope = ExclusivityScope("chain")
        let first = ResultBlockOperation<Int> { $0.finish(with: 20) }
        let second = TransformBlockOperation<Int, Int> { (value: Int) in value + 1 }
        try second.addCondition(.block("always") { true })
        try second.addExclusivity(OperationCategory("x", in: scope))
        let chain = try OperationQueue().addChain([first, second])
        XCTAssertEqual(try chain.wait(timeout: .seconds(testTimeout)) as? Int, 21)
    }

    /// A gated operation in a suspended queue, given a dependency (already finished) from another
    /// thread, then resumed: it runs. `addDependency` makes Linux's queue read and cache the readiness
    /// in two steps; read while the condition was evaluated, its `false` could be stored after the
    /// gate's announced `true`, and the queue then never scheduled the operation (an adversarial
    /// review's reproducer: about 1 trial in 800 hung before).
    func testAGatedOperationGivenADependencyInASuspendedQueueRunsWhenResumed() {
        for trial in 0..<3_000 {
            let finishedDependency = ImmediateOperation(.success(0))
            finished(finishedDependency)
            let queue = OperationQueue()
            queue.isSuspended = true
            let operation = ImmediateOperation(.success(1))
            try? operation.addCondition(Condition("ok") { _, answer in answer(.satisfied) })
            queue.addOperation(operation)
            let added = Gate()
            DispatchQueue.global().async {
                operation.addDependency(finishedDependency)
                added.open()
            }
            added.wait()
            queue.isSuspended = false
            let done = Gate()
            operation.whenFinished { done.open() }
            guard done.wait() else { return XCTFail("trial \(trial): never started") }
            XCTAssertEqual(operation.executions.value, 1, "trial \(trial)")
        }
    }
}
