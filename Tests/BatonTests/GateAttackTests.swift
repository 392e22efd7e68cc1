import Dispatch
import Foundation
import XCTest

@testable import Baton

/// The attack surfaces (ATTACK-SURFACES.md) that conditions and categories touch, hammered: a start by
/// hand racing the gate, Foundation's own suspension and cancellation of waiters, callbacks that turn
/// on their own operation, waits that time out by the thousand, hostile names in every export, and
/// out-of-range durations.
final class GateAttackTests: BatonTestCase {
    /// Counts its executions and succeeds from another thread.
    private final class Counting: AsyncOperation, @unchecked Sendable {
        let executions = Locked(0)
        /// Runs as `execute()` begins (set before the operation is enqueued).
        var whenExecuting: (@Sendable () -> Void)?
        override func execute() {
            whenExecuting?()
            executions.increment()
            DispatchQueue.global().async { self.finish() }
        }
    }

    // MARK: - Decide, hop, act

    func testAStartByHandRacingTheGrantExecutesTheWaiterOnce() throws {
        for trial in 0..<300 {
            let x = OperationCategory("x", in: ExclusivityScope("start race \(trial)"))
            let holder = try holding(x)
            let waiter = Counting()
            try waiter.addExclusivity(x)
            if trial % 2 == 0 { try waiter.addCondition(.block("yes") { true }) }
            let finishes = Locked(0)
            waiter.onFinish { _ in finishes.increment() }
            let queue = OperationQueue()
            if trial % 3 != 0 { queue.addOperation(waiter) }
            let go = Gate()
            Thread {
                XCTAssertTrue(go.wait())
                waiter.start()
            }.start()
            Thread {
                XCTAssertTrue(go.wait())
                holder.finish(with: 0)
            }.start()
            go.open()
            go.open()   // a gate lets one waiter through per opening
            waitFinished(waiter)
            waitFinished(holder)
            XCTAssertEqual(waiter.executions.value, 1, "trial \(trial)")
            XCTAssertEqual(finishes.value, 1, "trial \(trial)")
            XCTAssertEqual(waiter.outcome?.isSuccess, true, "trial \(trial): \(String(describing: waiter.outcome))")
        }
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    // MARK: - The claim table while it grows and shrinks

    /// A burst of operations on categories of their own, in a group, so the table's lane map grows to
    /// thousands of lanes and shrinks back while the caller races grants against cancellations.
    private static func churnTheTable(_ count: Int) throws -> GroupOperation {
        let scope = ExclusivityScope("churn")
        let children = (0..<count).map { _ in AsyncBlockOperation { $0.finish() } }
        for (index, child) in children.enumerated() {
            try child.addExclusivity(OperationCategory("c\(index)", in: scope))
        }
        let group = GroupOperation(operations: children)
        OperationQueue().addOperation(group)
        return group
    }

    /// The holder's release grants a waiter at the instant another thread cancels it, while the map is
    /// resized under them. A waiter for one lane (`a`), and one for two (`a`, `b`) with a waiter for `b`
    /// behind it: each claimant of `a` either executes after the holder finishes (never beside it) or
    /// ends cancelled, the one behind runs either way, and nothing stays held.
    func testAGrantRacingACancelWhileTheTableIsResizedEndsEachWaiterOnce() throws {
        // Bursts one after another for as long as the trials last.
        let trialsDone = Locked(false)
        let churning = Gate()
        let churner = Thread {
            while !trialsDone.value {
                do { waitFinished(try GateAttackTests.churnTheTable(2_000)) } catch { XCTFail("\(error)") }
            }
            churning.open()
        }
        churner.start()
        for trial in 0..<300 {
            let scope = ExclusivityScope("grant race \(trial)")
            let (a, b) = (OperationCategory("a", in: scope), OperationCategory("b", in: scope))
            let holder = try holding(a)
            let overlaps = Locked(0)
            // Set just before the holder finishes: its lane can be granted only after that.
            let finishing = Locked(false)
            func waiter(_ categories: OperationCategory...) throws -> Counting {
                let waiter = Counting()
                try waiter.addExclusivity(categories)
                // Only the claimants of `a` wait for the holder (`behind` claims `b` alone).
                if categories.contains(a) {
                    waiter.whenExecuting = { if !finishing.value { overlaps.increment() } }
                }
                return waiter
            }
            let single = try waiter(a)
            let double = try waiter(a, b)
            let behind = try waiter(b)
            let queue = OperationQueue()
            // Added one by one: each joins its lines in this order.
            for operation in [single, double, behind] { queue.addOperation(operation) }
            let victim = trial % 2 == 0 ? single : double
            let go = Gate()
            Thread {
                XCTAssertTrue(go.wait())
                victim.cancel()
            }.start()
            Thread {
                XCTAssertTrue(go.wait())
                finishing.mutate { $0 = true }
                holder.finish(with: 0)
            }.start()
            go.open()
            go.open()
            for operation in [single, double, behind] { waitFinished(operation) }
            XCTAssertEqual(overlaps.value, 0, "trial \(trial): a waiter executed beside the holder")
            for operation in [single, double] {
                let executions = operation.executions.value
                if operation.isCancelled {
                    XCTAssertLessThanOrEqual(executions, 1, "trial \(trial)")
                } else {
                    XCTAssertEqual(executions, 1, "trial \(trial)")
                    XCTAssertEqual(operation.outcome?.isSuccess, true, "trial \(trial)")
                }
            }
            XCTAssertEqual(behind.executions.value, 1, "trial \(trial): the waiter behind never ran")
            XCTAssertEqual(behind.outcome?.isSuccess, true, "trial \(trial)")
        }
        trialsDone.mutate { $0 = true }
        XCTAssertTrue(churning.wait())
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    /// Limits changed by the contending operations themselves, as each starts on its worker, while two
    /// hundred of them contend for the category and a burst resizes the table: never more holders than
    /// the largest limit set, every operation finishes, nothing stays held.
    func testLimitsChangedUnderLoadNeverAdmitMoreThanTheLargest() throws {
        for trial in 0..<20 {
            let churn = try Self.churnTheTable(2_000)
            let scope = ExclusivityScope("limits under load \(trial)")
            let meter = ConcurrencyMeter()
            let children = (0..<200).map { _ in MeteredOperation(meter) }
            for (index, child) in children.enumerated() {
                try child.addExclusivity(OperationCategory("x", in: scope))
                child.onStart {
                    do { try scope.setLimit(index % 3 + 1, for: "x") } catch { XCTFail("\(error)") }
                }
            }
            try GroupOperation(operations: children).run(timeout: .seconds(bulkTimeout))
            waitFinished(churn)
            XCTAssertLessThanOrEqual(meter.most, 3, "trial \(trial)")
            XCTAssertEqual(meter.total, 200, "trial \(trial)")
        }
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    /// An uncontended claim in a plain queue is asked for in a read of `isReady`: readers on several
    /// threads, the queue's own reads, a cancel and a start by hand all race the one request, and the
    /// operation still executes at most once, finishes once and leaves nothing held.
    func testReadersOfIsReadyRacingACancelAndAStartByHandAskOnce() throws {
        let readers = 3
        for trial in 0..<300 {
            let x = OperationCategory("x", in: ExclusivityScope("ready race \(trial)"))
            let waiter = Counting()
            try waiter.addExclusivity(x)
            let finishes = Locked(0)
            waiter.onFinish { _ in finishes.increment() }
            let go = Gate()
            // Readers of isReady, and a cancel (one trial in three) or a start by hand (one in three).
            var racers: [@Sendable () -> Void] = Array(repeating: { for _ in 0..<5 { _ = waiter.isReady } }, count: readers)
            switch trial % 3 {
            case 0: racers.append { waiter.cancel() }
            case 1: racers.append { waiter.start() }
            default: break
            }
            for racer in racers {
                Thread {
                    XCTAssertTrue(go.wait())
                    racer()
                }.start()
            }
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = trial % 2 == 0 ? 1 : 4
            queue.addOperation(waiter)
            for _ in racers { go.open() }
            waitFinished(waiter)
            XCTAssertLessThanOrEqual(waiter.executions.value, 1, "trial \(trial)")
            XCTAssertTrue(eventually { finishes.value == 1 }, "trial \(trial): \(finishes.value) finishes")
            if trial % 3 != 0 { XCTAssertEqual(waiter.outcome?.isSuccess, true, "trial \(trial)") }
        }
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    func testACancelRacingTheConditionsAnswerAndTheGrantEndsOnceAndHoldsNothing() throws {
        for trial in 0..<300 {
            let x = OperationCategory("x", in: ExclusivityScope("answer race \(trial)"))
            let answer = Gate()
            let waiter = Counting()
            try waiter.addExclusivity(x)
            try waiter.addCondition(
                Condition("gated") { (_: ConditionContext, reply: @escaping @Sendable (ConditionResult) -> Void) in
                    DispatchQueue.global().async {
                        XCTAssertTrue(answer.wait())
                        reply(.satisfied)
                    }
                })
            let finishes = Locked(0)
            waiter.onFinish { _ in finishes.increment() }
            OperationQueue().addOperation(GroupOperation(operations: [waiter]))
            Thread {
                XCTAssertTrue(answer.wait())
                waiter.cancel()
            }.start()
            answer.open()
            answer.open()   // the condition's reply and the cancel
            waitFinished(waiter)
            XCTAssertEqual(finishes.value, 1)
            XCTAssertLessThanOrEqual(waiter.executions.value, 1)
        }
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "a cancelled waiter kept or lost a claim")
    }

    // MARK: - Foundation underneath

    func testSuspendingAndCancellingAQueueOfWaitersLeavesNothingHeld() throws {
        let x = OperationCategory("x", in: ExclusivityScope("suspend and cancel"))
        let holder = try holding(x)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        let waiters = (0..<200).map { _ in Counting() }
        // Half wait for x; the other half claim a category of their own, granted in the queue's reads
        // of isReady while the queue is suspended, resumed and cancelled around them.
        for (index, waiter) in waiters.enumerated() {
            try waiter.addExclusivity(index % 2 == 0 ? x : OperationCategory("own \(index)", in: x.scope))
        }
        queue.addOperations(waiters, waitUntilFinished: false)
        let go = Gate()
        let togglers = (0..<4).map { _ in
            Thread {
                XCTAssertTrue(go.wait())
                for _ in 0..<50 {
                    queue.isSuspended = true
                    queue.isSuspended = false
                }
            }
        }
        for toggler in togglers { toggler.start() }
        for _ in togglers { go.open() }
        queue.cancelAllOperations()
        holder.finish(with: 0)
        for waiter in waiters { waitFinished(waiter) }
        XCTAssertTrue(waiters.allSatisfy { $0.outcome?.isCancelled == true || $0.outcome?.isSuccess == true })
        XCTAssertTrue(waiters.allSatisfy { $0.executions.value <= 1 })
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    // MARK: - Callbacks that call back

    func testAConditionThatCancelsWaitsOnOrReconfiguresItsOwnOperationEndsIt() throws {
        let cancelling = Counting()
        try cancelling.addCondition(
            Condition("cancels") { (context: ConditionContext, reply: @escaping @Sendable (ConditionResult) -> Void) in
                context.operation.cancel()
                reply(.satisfied)
            })
        OperationQueue().addOperation(cancelling)
        waitFinished(cancelling)
        XCTAssertEqual(cancelling.outcome?.isCancelled, true)
        XCTAssertEqual(cancelling.executions.value, 0)

        let refused = Locked<BatonError?>(nil)
        let waiting = Counting()
        try waiting.addCondition(
            Condition("waits") { (context: ConditionContext, reply: @escaping @Sendable (ConditionResult) -> Void) in
                _ = try? context.operation.wait(timeout: .milliseconds(20))
                do {
                    try context.operation.addCondition(.block("late") { true })
                } catch {
                    refused.mutate { $0 = error as? BatonError }
                }
                reply(.satisfied)
            })
        OperationQueue().addOperation(waiting)
        waitFinished(waiting)
        XCTAssertEqual(waiting.outcome?.isSuccess, true)
        XCTAssertEqual(waiting.executions.value, 1)
        guard case .invalidArgument? = refused.value else { return XCTFail("\(String(describing: refused.value))") }
    }

    func testEachHolderEnqueuingTheNextClaimantFromItsOnFinishChainsAHundredDeep() throws {
        let x = OperationCategory("x", in: ExclusivityScope("on finish chain"))
        let queue = OperationQueue()
        let succeeded = Locked(0)
        let done = Gate()
        @Sendable func link(_ depth: Int) -> Counting {
            let operation = Counting()
            try? operation.addExclusivity(x)
            operation.onFinish { outcome in
                if outcome.isSuccess { succeeded.increment() }
                guard depth < 100 else { return done.open() }
                queue.addOperation(link(depth + 1))
            }
            return operation
        }
        queue.addOperation(link(1))
        XCTAssertTrue(done.wait())
        XCTAssertEqual(succeeded.value, 100)
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    // MARK: - Composites

    /// Every level of 100,000 nested groups claims one category (each takes it in its parent's lane),
    /// and so does the leaf: run, cancelled before start, freed unrun.
    func testOneHundredThousandNestedClaimingGroupsRunCancelAndFree() {
        let x = OperationCategory("x", in: ExclusivityScope("nested claims"))
        runCancelAndFree { leaf in
            try? (leaf as? AsyncOperation)?.addExclusivity(x)
            var nest = GroupOperation(operations: [leaf])
            try? nest.addExclusivity(x)
            for _ in 1..<nestingDepth {
                nest = GroupOperation(operations: [nest])
                try? nest.addExclusivity(x)
            }
            return nest
        }
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    // MARK: - Waits

    func testThousandsOfTimedOutWaitsOnAWaiterChangeNothing() throws {
        let x = OperationCategory("x", in: ExclusivityScope("timed out waits"))
        let holder = try holding(x)
        let waiter = Counting()
        try waiter.addExclusivity(x)
        OperationQueue().addOperation(waiter)
        let timedOut = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 2_000) { _ in
            do {
                try waiter.wait(timeout: .milliseconds(1))
            } catch BatonError.timedOut {
                timedOut.increment()
            } catch {
                XCTFail("\(error)")
            }
        }
        XCTAssertEqual(timedOut.value, 2_000)
        XCTAssertFalse(waiter.isFinished)
        holder.finish(with: 0)
        waitFinished(waiter)
        XCTAssertEqual(waiter.executions.value, 1)
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    // MARK: - Arguments

    func testAConditionWithATimeoutOfZeroOrLessIsRefusedBeforeAnythingRuns() {
        let operation = Counting()
        operation.name = "fetch"
        for timeout in [Duration.zero, .seconds(-1), .seconds(Int64.min)] {
            let condition = Condition("instant", timeout: timeout) {
                (_: ConditionContext, reply: @escaping @Sendable (ConditionResult) -> Void) in reply(.satisfied)
            }
            XCTAssertThrowsError(try operation.addCondition(condition)) { error in
                guard case BatonError.invalidArgument(let culprit, let reason) = error else { return XCTFail("\(error)") }
                XCTAssertEqual(culprit.name, "fetch")
                XCTAssertTrue(reason.contains("'instant'"), reason)
            }
        }
        XCTAssertEqual(operation.conditions.count, 0)
    }

    func testHugeDurationsNeitherTrapNorHang() throws {
        let flag = ConditionFlag("huge", isSet: true)
        let scope = ExclusivityScope("huge")
        scope.slowWaitThreshold = .seconds(Int64.max)
        let operation = Counting()
        try operation.addCondition(.waitUntil(flag, timeout: .seconds(Int64.max)))
        try operation.addCondition(
            Condition("patient", timeout: .seconds(Int64.max)) {
                (_: ConditionContext, reply: @escaping @Sendable (ConditionResult) -> Void) in reply(.satisfied)
            })
        try operation.addExclusivity(OperationCategory("x", in: scope))
        try operation.run(timeout: .seconds(testTimeout))
        XCTAssertEqual(operation.executions.value, 1)
    }

    // MARK: - Exports

    func testHostileCategoryNamesAreEscapedInEveryExport() throws {
        let hostile = "q\"\u{301} back\\slash\nline\r\u{0}nul <&> #9829; ]; x -> y"
        let category = OperationCategory(hostile, in: ExclusivityScope("hostile"))
        let holder = try holding(category)
        let waiter = Counting()
        waiter.name = "waiter"
        try waiter.addExclusivity(category)
        let (group, recorder) = recordedGroup([waiter])
        XCTAssertTrue(eventually { recorder.textTree(of: group).contains("held by holder") })
        holder.finish(with: 0)
        waitFinished(group)

        let trace = try XCTUnwrap(
            try JSONSerialization.jsonObject(with: Data(recorder.export(.chromeTrace).utf8)) as? [String: Any])
        let events = try XCTUnwrap(trace["traceEvents"] as? [[String: Any]])
        XCTAssertTrue(events.contains { ($0["name"] as? String)?.contains(hostile) == true }, "the wait's span")
        let dot = recorder.export(.graphviz)
        XCTAssertTrue(dot.contains(#"q\"\#u{301} back\\slash\nline"#), dot)
        XCTAssertFalse(dot.contains("\u{0}") || dot.contains("\r"), dot)
        let mermaid = recorder.export(.mermaid)
        XCTAssertTrue(mermaid.contains("q#quot;\u{301} back\\slash line"), mermaid)
        XCTAssertFalse(mermaid.contains("\r") || mermaid.contains("#9829;"), mermaid)
    }
}
