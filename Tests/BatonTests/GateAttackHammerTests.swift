import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Counts executions, finishes, and executions entered after a `cancel()` that returned while the
/// operation was not executing (pending or finished: it must never execute then); with
/// `checksDependencies`, also an execution entered while a dependency had not finished.
final class HammeredClaimant: AsyncOperation, @unchecked Sendable {
    let meters: [ConcurrencyMeter]
    let executions = Locked(0)
    let finishes = Locked(0)
    let cancelledBeforeExecuting = Locked(false)
    let violations: Locked<[String]>
    /// Set before the operation can execute (read in `execute()` only).
    nonisolated(unsafe) var checksDependencies: Bool
    init(_ meters: [ConcurrencyMeter], violations: Locked<[String]>, name: String, checksDependencies: Bool = false) {
        self.meters = meters
        self.violations = violations
        self.checksDependencies = checksDependencies
        super.init()
        self.name = name
        observeCompletionForTests { [finishes] in finishes.increment() }
    }
    override func execute() {
        executions.increment()
        if cancelledBeforeExecuting.value { violations.append("\(name!): execute() after cancel() returned") }
        if checksDependencies, let unfinished = dependencies.first(where: { !$0.isFinished }) {
            violations.append("\(name!): executes before dependency \(unfinished.name ?? "?") finished")
        }
        for meter in meters { meter.enter() }
        DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(Int.random(in: 0...300))) {
            for meter in self.meters { meter.leave() }
            self.finish()
        }
    }
    func cancelChecked() {
        cancel()
        if !isExecuting { cancelledBeforeExecuting.mutate { $0 = true } }
    }

    /// Where it stands, for a failure's message.
    var gateDump: String {
        let gate = core.withLock { state in "\(state.gate.map { "\($0.admission)" } ?? "no gate"), \(state.life)" }
        let waits = dependencies.map { "\($0.name ?? "?") finished \($0.isFinished)" }
        return "\(name!): ready \(isReady), finished \(isFinished), executions \(executions.value), "
            + "dependencies \(waits), \(gateWaitDescription() ?? "not waiting"), \(gate)"
    }
}

extension BatonTestCase {
    /// The end of a hammer trial over claimants of one category: every one finishes, once, executes at
    /// most once and never after a `cancel()` that returned first, never two of them executed at once,
    /// none of `queues` still lists one, and nothing stays held.
    func assertClaimantHammerTrialEnded(
        _ claimants: [HammeredClaimant], meter: ConcurrencyMeter, violations: Locked<[String]>, queues: [OperationQueue] = [],
        trial: Int, file: StaticString = #filePath, line: UInt = #line
    ) {
        for claimant in claimants { waitFinished(claimant, file: file, line: line) }
        XCTAssertEqual(violations.value, [], "trial \(trial)", file: file, line: line)
        XCTAssertLessThanOrEqual(meter.most, 1, "trial \(trial): two holders executed at once", file: file, line: line)
        for claimant in claimants {
            XCTAssertLessThanOrEqual(claimant.executions.value, 1, "trial \(trial): \(claimant.name!)", file: file, line: line)
            // Its completion observers run one after the other: the count's may come after the wait's.
            XCTAssertTrue(eventually { claimant.finishes.value > 0 }, "trial \(trial): \(claimant.name!)", file: file, line: line)
            XCTAssertEqual(claimant.finishes.value, 1, "trial \(trial): \(claimant.name!) finished twice", file: file, line: line)
        }
        XCTAssertTrue(
            eventually { queues.allSatisfy { $0.operationCount == 0 } }, "trial \(trial): a queue still lists one", file: file,
            line: line)
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "trial \(trial): something stays held", file: file, line: line)
    }
}

final class GateAttackHammerTests: BatonTestCase {
    /// Gated operations in one plain queue (width 1 or unlimited) with barriers between them, a
    /// condition on some, suspension toggled, cancels from three threads and a cancelAllOperations at a
    /// random moment: each finishes once, executes at most once and never after a cancel() that
    /// returned before it executed, at most one holder of X executes at a time, nothing stays held.
    func testGatedOperationsInAQueueWithBarriersSuspensionAndCancelsFromManyThreads() throws {
        let trials = Int(ProcessInfo.processInfo.environment["GATE_ATTACK_TRIALS"] ?? "") ?? 40
        let scope = ExclusivityScope("attack-hammer")
        let x = OperationCategory("X", in: scope)
        let y = OperationCategory("Y", in: scope)
        for trial in 0..<trials {
            let meterX = ConcurrencyMeter()
            let meterY = ConcurrencyMeter()
            let violations = Locked<[String]>([])
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = trial % 2 == 0 ? 1 : 1_000
            let operations: [HammeredClaimant] = try (0..<40).map { index in
                let claimsY = index % 3 == 0
                let operation = HammeredClaimant(
                    claimsY ? [meterX, meterY] : [meterX], violations: violations, name: "op\(index)")
                try operation.addExclusivity(claimsY ? [y, x] : [x])
                if index % 4 == 1 { try operation.addCondition(.block("ok") { true }) }
                return operation
            }
            let go = DispatchSemaphore(value: 0)
            let done = DispatchGroup()
            for thread in 0..<3 {
                done.enter()
                Thread {
                    _ = go.wait(timeout: .now() + 10)
                    var random = SplitMix(state: UInt64(trial * 31 + thread))
                    for _ in 0..<8 { operations[random.next(operations.count)].cancelChecked() }
                    done.leave()
                }.start()
            }
            done.enter()
            Thread {
                _ = go.wait(timeout: .now() + 10)
                for _ in 0..<5 {
                    queue.isSuspended = true
                    queue.isSuspended = false
                }
                done.leave()
            }.start()
            for (index, operation) in operations.enumerated() {
                queue.addOperation(operation)
                if index % 10 == 5 { queue.addBarrierBlock {} }
                if index == 20 { for _ in 0..<4 { go.signal() } }
            }
            if trial % 3 == 0 {
                queue.cancelAllOperations()
                for operation in operations where !operation.isExecuting { operation.cancelledBeforeExecuting.mutate { _ in } }
            }
            XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
            for operation in operations {
                waitFinished(operation, timeout: testTimeout)
            }
            XCTAssertTrue(
                eventually(timeout: testTimeout) { operations.allSatisfy { $0.finishes.value == 1 } },
                "trial \(trial): finishes \(operations.map { $0.finishes.value })")
            XCTAssertTrue(operations.allSatisfy { $0.executions.value <= 1 }, "trial \(trial)")
            XCTAssertEqual(violations.value, [], "trial \(trial)")
            XCTAssertLessThanOrEqual(meterX.most, 1, "trial \(trial)")
            XCTAssertLessThanOrEqual(meterY.most, 1, "trial \(trial)")
            drain(queue)
            XCTAssertTrue(eventually(timeout: testTimeout) { Gatekeeper.isIdle }, "trial \(trial): something stays held")
            if !violations.value.isEmpty || meterX.most > 1 { break }
        }
    }

    /// One condition with a produced dependency shared by operations on four queues (one of width 1)
    /// and in a group; the produced operation fails, succeeds or is cancelled; the waiters are cancelled
    /// from many threads at once. Each waiter finishes once, unexecuted unless the condition passed;
    /// the produced operation executes at most once per making; nothing is left held or alive.
    func testASharedProducedDependencyRacingCancelsFromManyThreads() throws {
        let trials = Int(ProcessInfo.processInfo.environment["GATE_ATTACK_TRIALS"] ?? "") ?? 60
        for trial in 0..<trials {
            let made = Locked(0)
            let producedRuns = Locked(0)
            let verdict = trial % 3
            weak var weakWaiter: HammeredClaimant?
            let violations = Locked<[String]>([])
            try inScope {
                let condition = Condition(
                    "shared",
                    producing: { _ in
                        made.increment()
                        return AsyncBlockOperation { operation in
                            producedRuns.increment()
                            DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(Int.random(in: 0...500))) {
                                switch verdict {
                                case 0: operation.finish()
                                case 1: operation.finish(throwing: TestError(code: 7))
                                default:
                                    operation.cancel()
                                    operation.finish()
                                }
                            }
                        }
                    }
                ) { _, answer in answer(.satisfied) }
                let queues = (0..<4).map { index -> OperationQueue in
                    let queue = OperationQueue()
                    if index == 0 { queue.maxConcurrentOperationCount = 1 }
                    return queue
                }
                let category = OperationCategory("c\(trial % 2)", in: ExclusivityScope("attack-shared"))
                let waiters = try (0..<24).map { index -> HammeredClaimant in
                    let waiter = HammeredClaimant([ConcurrencyMeter()], violations: violations, name: "w\(index)")
                    try waiter.addCondition(condition)
                    if index % 2 == 0 { try waiter.addExclusivity(category) }
                    return waiter
                }
                weakWaiter = waiters[0]
                let grouped = Array(waiters[20...])
                let group = GroupOperation(operations: grouped)
                for (index, waiter) in waiters[..<20].enumerated() { queues[index % 4].addOperation(waiter) }
                queues[1].addOperation(group)
                DispatchQueue.concurrentPerform(iterations: 4) { thread in
                    var random = SplitMix(state: UInt64(trial * 7 + thread))
                    for _ in 0..<6 { waiters[random.next(waiters.count)].cancelChecked() }
                }
                for waiter in waiters { waitFinished(waiter, timeout: testTimeout) }
                waitFinished(group, timeout: testTimeout)
                XCTAssertTrue(
                    eventually(timeout: testTimeout) { waiters.allSatisfy { $0.finishes.value == 1 } }, "trial \(trial)")
                for waiter in waiters {
                    let outcome = waiter.outcome
                    if waiter.executions.value == 0 {
                        XCTAssertEqual(outcome?.isSuccess, false, "trial \(trial) \(waiter.name!)")
                    }
                    XCTAssertLessThanOrEqual(waiter.executions.value, 1)
                    if verdict != 0 { XCTAssertEqual(waiter.executions.value, 0, "trial \(trial) verdict \(verdict)") }
                }
                XCTAssertLessThanOrEqual(producedRuns.value, made.value, "trial \(trial)")
                XCTAssertEqual(violations.value, [], "trial \(trial)")
                for queue in queues { drain(queue) }
            }
            XCTAssertTrue(eventually(timeout: testTimeout) { weakWaiter == nil }, "trial \(trial): a waiter was not freed")
            XCTAssertTrue(eventually(timeout: testTimeout) { Gatekeeper.isIdle }, "trial \(trial): something stays held")
        }
    }

    /// Composites of gated work (a retry whose attempts fail twice then succeed, claiming X and holding
    /// a condition; a sequence of steps claiming X; a group holding X whose children claim it) compete
    /// for X with plain-queue claimants, while each composite is cancelled from another thread at a
    /// random moment. Every composite and claimant finishes once, X has at most one holder executing
    /// at a time (a group and its children are one holder), nothing stays held.
    func testCompositesOfGatedWorkCancelledAtRandomMomentsKeepXExclusive() throws {
        let trials = Int(ProcessInfo.processInfo.environment["GATE_ATTACK_TRIALS"] ?? "") ?? 40
        let scope = ExclusivityScope("attack-composites")
        let x = OperationCategory("X", in: scope)
        for trial in 0..<trials {
            let meter = ConcurrencyMeter()
            let violations = Locked<[String]>([])
            var random = SplitMix(state: UInt64(trial))
            let retry = RetryOperation<Int>(maximumAttempts: 4) { number in
                let attempt = ResultBlockOperation<Int> { operation in
                    meter.enter()
                    DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(100)) {
                        meter.leave()
                        if number < 3 {
                            operation.finish(throwing: TestError(code: number))
                        } else {
                            operation.finish(with: number)
                        }
                    }
                }
                try? attempt.addExclusivity(x)
                try? attempt.addCondition(.block("ok") { true })
                return attempt
            }
            let steps = try (0..<4).map { index -> HammeredClaimant in
                let step = HammeredClaimant([meter], violations: violations, name: "step\(index)")
                try step.addExclusivity(x)
                return step
            }
            let sequence = SequenceOperation<Void>(operations: steps)
            let groupMeter = ConcurrencyMeter()
            let children = try (0..<4).map { index -> HammeredClaimant in
                let child = HammeredClaimant([meter, groupMeter], violations: violations, name: "child\(index)")
                try child.addExclusivity(x)
                return child
            }
            let group = GroupOperation(operations: children)
            try group.addExclusivity(x)
            let plain = try (0..<6).map { index -> HammeredClaimant in
                let operation = HammeredClaimant([meter], violations: violations, name: "plain\(index)")
                try operation.addExclusivity(x)
                return operation
            }
            let queue = OperationQueue()
            let composites: [AsyncOperation] = [retry, sequence, group]
            queue.addOperations(composites + plain, waitUntilFinished: false)
            let victim = composites[random.next(3)]
            let delay = random.next(800)
            let cancelled = DispatchSemaphore(value: 0)
            DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(delay)) {
                victim.cancel()
                cancelled.signal()
            }
            XCTAssertEqual(cancelled.wait(timeout: .now() + 10), .success)
            for operation in composites + plain { waitFinished(operation, timeout: testTimeout) }
            for operation in steps + children { waitFinished(operation, timeout: testTimeout) }
            XCTAssertTrue(
                eventually(timeout: testTimeout) { (steps + children + plain).allSatisfy { $0.finishes.value == 1 } },
                "trial \(trial)")
            XCTAssertLessThanOrEqual(meter.most, 1, "trial \(trial)")
            XCTAssertLessThanOrEqual(groupMeter.most, 1, "trial \(trial)")
            XCTAssertEqual(violations.value, [], "trial \(trial)")
            if victim !== retry {
                XCTAssertEqual(retry.outcome?.isSuccess, true, "trial \(trial): \(String(describing: retry.outcome))")
            }
            XCTAssertTrue(eventually(timeout: testTimeout) { Gatekeeper.isIdle }, "trial \(trial): something stays held")
            if meter.most > 1 { break }
        }
    }
}
