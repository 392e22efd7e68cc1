import Foundation
import XCTest

@testable import Baton

/// Produces a number.
private final class Number: ResultOperation<Int>, @unchecked Sendable {
    let number: Int
    init(_ number: Int, name: String? = nil) {
        self.number = number
        super.init()
        self.name = name
    }
    override func execute() { finish(with: number) }
}

/// Adds to its input.
private final class Add: TransformOperation<Int, Int>, @unchecked Sendable {
    let amount: Int
    init(_ amount: Int, name: String? = nil) {
        self.amount = amount
        super.init()
        self.name = name
    }
    override func execute() { finish(with: input! + amount) }
}

/// Spells its input.
private final class Spell: TransformOperation<Int, String>, @unchecked Sendable {
    override func execute() { finish(with: "#\(input!)") }
}

/// Counts characters.
private final class Count: TransformOperation<String, Int>, @unchecked Sendable {
    override func execute() { finish(with: input!.count) }
}

/// Fails with a test error.
private final class Fail: TransformOperation<Int, Int>, @unchecked Sendable {
    let code: Int
    init(code: Int) {
        self.code = code
        super.init()
    }
    override func execute() { finish(throwing: TestError(code: code)) }
}

private enum Shape: Sendable { case small, large }

final class FlowDSLTests: XCTestCase {
    // MARK: - Types from step to step

    func testStepsAreTypedFromOneToTheNext() throws {
        let flow = Cascade {
            Number(40)
            Add(2)
            Spell()
            Count()
        }
        let typed: SequenceOperation<Int> = flow   // an ordinary sequence
        XCTAssertEqual(try typed.run(timeout: .seconds(testTimeout)), 3)   // "#42"
    }

    func testAStepWithoutInputStartsAfreshAndBlocksTakeNothing() throws {
        let seen = Locked<[String]>([])
        let flow = Cascade {
            Number(1)
            Spell()
            AsyncBlockOperation { operation in
                seen.append("block")
                operation.finish()
            }
            Number(7)   // takes nothing: the block's "no output" does not matter
            Add(1)
        }
        XCTAssertEqual(try flow.run(timeout: .seconds(testTimeout)), 8)
        XCTAssertEqual(seen.value, ["block"])
    }

    func testACascadeTakesAnInputGivenOrHandedOn() throws {
        let alone = Cascade(input: 20) {
            Add(1)
            Spell()
        }
        XCTAssertEqual(try alone.run(timeout: .seconds(testTimeout)), "#21")

        let nested = Cascade {
            Number(3)
            Cascade {   // Int -> String: takes the step before's output
                Add(4)
                Spell()
            }
            Count()
        }
        XCTAssertEqual(try nested.run(timeout: .seconds(testTimeout)), 2)   // "#7"
    }

    func testACascadeGivenAnInputOfAnotherTypeAtRunTimeFailsNamingIt() throws {
        // Through the untyped API, the compiler cannot check: the run-time check names the culprit.
        let cascade = Cascade {
            Add(1)
        }
        cascade.name = "adder"
        let words = ResultBlockOperation<String> { $0.finish(with: "not a number") }
        let sequence = SequenceOperation<Int>(operations: [words, cascade])
        let outcome = try sequence.runToOutcome()
        guard case .failed(BatonError.inputTypeMismatch(let culprit, let expected, let actual)) = outcome else {
            return XCTFail("\(outcome)")
        }
        XCTAssertTrue(culprit.operation === cascade)
        XCTAssertEqual(expected, "Int")
        XCTAssertEqual(actual, "String")
    }

    func testAStepWithoutItsInputFailsWithMissingInput() throws {
        let cascade = Cascade {
            Add(1)
        }
        let outcome = try cascade.runToOutcome()
        guard case .failed(BatonError.missingInput) = outcome else { return XCTFail("\(outcome)") }
    }

    // MARK: - Groups

    func testParallelOutputIsTheTupleOfItsChildrenInTheOrderWritten() throws {
        let flow = Cascade {
            Number(5)
            Parallel {
                Add(1)
                Spell()
                for amount in 1...3 { Add(amount) }
            }
        }
        let (sum, text, list) = try flow.run(timeout: .seconds(testTimeout))
        XCTAssertEqual(sum, 6)
        XCTAssertEqual(text, "#5")
        XCTAssertEqual(list, [6, 7, 8])
    }

    func testParallelChildrenWithoutInputAndASingleChild() throws {
        let paths = ["a", "bb", "ccc"]
        let sizes = Parallel {
            for path in paths { ResultBlockOperation<Int> { $0.finish(with: path.count) } }
        }
        XCTAssertEqual(try sizes.run(timeout: .seconds(testTimeout)), [1, 2, 3])

        let one = Parallel(input: 9) { Spell() }
        XCTAssertEqual(try one.run(timeout: .seconds(testTimeout)), "#9")
    }

    func testAGroupOfOneSkippedChildSucceedsWithNil() throws {
        for flag in [true, false] {
            let group = Parallel {
                if flag { Number(4) }
            }
            XCTAssertEqual(try group.run(timeout: .seconds(testTimeout)), flag ? 4 : nil)
            let cascade = Cascade(input: 9) {
                if flag { Add(1) }
            }
            XCTAssertEqual(try cascade.run(timeout: .seconds(testTimeout)), flag ? 10 : 9)
        }
    }

    func testTwentyTypedStepsAndTwentyMixedChildren() throws {
        let steps = Cascade {
            Number(1)
            Add(1)
            Spell()
            Count()
            Add(1)
            Spell()
            Count()
            Add(1)
            Spell()
            Count()
            Add(10)
            Spell()
            Count()
            Add(1)
            Spell()
            Count()
            Add(100)
            Spell()
            Count()
            Add(0)
        }
        XCTAssertEqual(try steps.run(timeout: .seconds(testTimeout)), 4)   // "#103" has 4 characters
        let children = Parallel(input: 2) {
            Number(1)
            Add(1)
            Spell()
            Number(2)
            Add(2)
            Spell()
            Number(3)
            Add(3)
            Spell()
            Number(4)
            Add(4)
            Spell()
            Number(5)
            Add(5)
            Spell()
            Number(6)
            Add(6)
            Spell()
            Number(7)
            Add(7)
        }
        let output = try children.run(timeout: .seconds(testTimeout))
        XCTAssertEqual(output.0, 1)
        XCTAssertEqual(output.2, "#2")
        XCTAssertEqual(output.19, 9)
    }

    func testOptionalVoidAndAnySendableOutputsInAGroup() throws {
        let group = Parallel {
            ResultBlockOperation<Int?> { $0.finish(with: nil) }
            ResultBlockOperation<Int?> { $0.finish(with: 3) }
            ResultBlockOperation<Void> { $0.finish() }
            ResultBlockOperation<any Sendable> { $0.finish(with: "text") }
            BlockOperation {}
        }
        let (none, three, nothing, text, _): (Int?, Int?, Void, any Sendable, Void) = try group.run(
            timeout: .seconds(testTimeout))
        XCTAssertNil(none)
        XCTAssertEqual(three, 3)
        XCTAssertEqual(String(describing: nothing), "()")
        XCTAssertEqual(String(describing: text), "text")
    }

    func testEmptyFlowsSucceedAtOnce() throws {
        let cascade = Cascade {}
        try cascade.run(timeout: .seconds(testTimeout))
        let parallel = Parallel {}
        try parallel.run(timeout: .seconds(testTimeout))
        let loop = Parallel {
            for number in [Int]() { Number(number) }
        }
        XCTAssertEqual(try loop.run(timeout: .seconds(testTimeout)), [])
    }

    func testAFailedChildFailsTheGroupAndTheCascadeWithEveryError() throws {
        let after = Locked(0)
        let flow = Cascade {
            Number(1)
            Parallel {
                Fail(code: 1)
                Add(1)
                Fail(code: 2)
            }
            AsyncBlockOperation { operation in
                after.increment()
                operation.finish()
            }
        }
        let outcome = try flow.runToOutcome()
        guard case .failed(BatonError.childrenFailed(_, let errors)) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(Set(errors.compactMap { ($0 as? TestError)?.code }), [1, 2])
        XCTAssertEqual(after.value, 0)
    }

    func testAFailureCancelsTheSiblingsWhenAsked() throws {
        let running = ManualOperation(finishesOnCancel: true)
        let group = Parallel(failurePolicy: .cancelSiblingsOnFailure) {
            running
            ResultBlockOperation<Int> { operation in
                running.started.wait(timeout: testTimeout)
                operation.finish(throwing: TestError(code: 3))
            }
        }
        let outcome = try group.runToOutcome()
        guard case .failed(BatonError.childrenFailed) = outcome else { return XCTFail("\(outcome)") }
        guard case .cancelled? = running.outcome else { return XCTFail("\(String(describing: running.outcome))") }
    }

    func testAnInvalidConcurrencyFailsTheGroupAtStart() throws {
        let child = Number(1)
        let group = Parallel(maxConcurrentOperationCount: 0) { child }
        let outcome = try group.runToOutcome()
        guard case .failed(BatonError.invalidArgument(let culprit, _)) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertTrue(culprit.operation === group)
        guard case .cancelled? = child.outcome else { return XCTFail("\(String(describing: child.outcome))") }
    }

    func testAChildAlreadyHeldElsewhereFailsTheGroupNamingIt() throws {
        let shared = Number(1)
        let first = SequenceOperation<Int>(operations: [shared])
        let group = Parallel {
            shared
            Number(2)
        }
        let outcome = try group.runToOutcome()
        guard case .failed(BatonError.alreadyEnqueued(let culprit)) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertTrue(culprit.operation === shared)
        XCTAssertEqual(try first.run(timeout: .seconds(testTimeout)), 1)
    }

    func testTheSameOperationTwiceFailsTheFlowNamingIt() throws {
        let twice = Number(1)
        let group = Parallel {
            twice
            twice
        }
        guard case .failed(BatonError.duplicateOperation(let culprit)) = try group.runToOutcome() else {
            return XCTFail("\(String(describing: group.outcome))")
        }
        XCTAssertTrue(culprit.operation === twice)

        let again = Add(1)
        let cascade = Cascade {
            Number(1)
            again
            again
        }
        guard case .failed(BatonError.duplicateOperation(let named)) = try cascade.runToOutcome() else {
            return XCTFail("\(String(describing: cascade.outcome))")
        }
        XCTAssertTrue(named.operation === again)
    }

    // MARK: - Nesting

    func testNestingToSeveralLevelsInBothDirections() throws {
        // cascade > parallel > cascade > parallel > cascade, typed all the way down and back up.
        let flow = Cascade {
            Number(10)
            Parallel {
                Cascade {
                    Add(1)   // 11
                    Parallel {
                        Spell()   // "#11"
                        Cascade {
                            Add(100)   // 111
                            Spell()   // "#111"
                            Count()   // 4
                        }
                    }
                }
                Add(2)   // 12
            }
            ResultBlockOperation<String> { $0.finish(with: "done") }
        }
        XCTAssertEqual(try flow.run(timeout: .seconds(testTimeout)), "done")

        let values = Cascade {
            Number(10)
            Parallel {
                Cascade {
                    Add(1)
                    Parallel {
                        Spell()
                        Cascade {
                            Add(100)
                            Spell()
                            Count()
                        }
                    }
                }
                Add(2)
            }
        }
        let ((text, count), twelve) = try values.run(timeout: .seconds(testTimeout))
        XCTAssertEqual(text, "#11")
        XCTAssertEqual(count, 4)
        XCTAssertEqual(twelve, 12)
    }

    func testHandBuiltCompositesAndPlainOperationsMixIn() throws {
        let flow = Cascade {
            GroupOperation(operations: [BlockOperation {}, AsyncBlockOperation { $0.finish() }])
            SequenceOperation<Int>(operations: [Number(2), Add(3)])
            Add(1)
        }
        XCTAssertEqual(try flow.run(timeout: .seconds(testTimeout)), 6)
    }

    // MARK: - Control flow

    func testIfIfLetSwitchAndForInACascade() throws {
        for (flag, extra, shape) in [(true, 5 as Int?, Shape.small), (false, nil, .large)] {
            let flow = Cascade {
                Number(1)
                if flag { Add(10) }   // Int -> Int, skipped: 1 flows on
                if let extra { Add(extra) }
                for _ in 0..<3 { Add(1) }
                switch shape {
                case .small: Spell()
                case .large:
                    Cascade {
                        Add(1000)
                        Spell()
                    }
                }
            }
            let expected = flag ? "#19" : "#1004"
            XCTAssertEqual(try flow.run(timeout: .seconds(testTimeout)), expected)
        }
    }

    func testSkippedVoidStepsAndEmptyLoops() throws {
        let ran = Locked(0)
        for condition in [true, false] {
            let flow = Cascade {
                if condition {
                    AsyncBlockOperation { operation in
                        ran.increment()
                        operation.finish()
                    }
                }
                Number(2)
                for _ in [Int]() { Add(1) }
            }
            XCTAssertEqual(try flow.run(timeout: .seconds(testTimeout)), 2)
        }
        XCTAssertEqual(ran.value, 1)
    }

    func testIfSwitchAndForInAParallel() throws {
        for flag in [true, false] {
            let group = Parallel(input: 1) {
                if flag { Add(1) }
                if flag { Spell() } else { Spell() }
                for amount in [10, 20] {
                    switch amount {
                    case 10: Add(amount)
                    default:
                        Cascade {
                            Add(amount)
                            Add(amount)
                        }
                    }
                }
            }
            let (maybe, text, list) = try group.run(timeout: .seconds(testTimeout))
            XCTAssertEqual(maybe, flag ? 2 : nil)
            XCTAssertEqual(text, "#1")
            XCTAssertEqual(list, [11, 41])
        }
    }

    // MARK: - Handlers

    func testHandlersAreCalledOnceWithTheOutcomeAtEveryLevel() throws {
        let events = Locked<[String]>([])
        let flow = Cascade {
            Number(1)
            Parallel {
                Add(1)
                Cascade {
                    Spell()
                }
                .onCompletion { events.append("inner \($0)") }
            }
            .onCompletion { events.append("group \($0.map { "\($0.0)\($0.1)" })") }
            .onCancellation { events.append("group cancelled") }
        }
        .onCompletion { events.append("outer \($0.map { "\($0.0)\($0.1)" })") }
        .onCancellation { events.append("outer cancelled") }
        try flow.run(timeout: .seconds(testTimeout))
        XCTAssertEqual(
            events.value, ["inner succeeded(#1)", "group succeeded(2#1)", "outer succeeded(2#1)"])
    }

    func testHandlersHearFailureAndCancellationOnce() throws {
        let events = Locked<[String]>([])
        let failing = Cascade {
            Number(1)
            Fail(code: 9)
        }
        .onCompletion { events.append("completion \($0)") }
        .onCancellation { events.append("cancellation") }
        _ = try failing.runToOutcome()
        XCTAssertEqual(events.value, ["completion failed(TestError(code: 9))"])

        events.mutate { $0 = [] }
        let cancelling = Cascade {
            Number(1)
            AsyncBlockOperation { operation in
                operation.cancel()
                operation.finish()   // finishes cancelled
            }
            Number(2)
        }
        .onCompletion { events.append("completion \($0)") }
        .onCancellation { events.append("cancellation") }
        XCTAssertTrue(try cancelling.runToOutcome().isCancelled)
        XCTAssertEqual(events.value, ["completion cancelled", "cancellation"])
    }

    // MARK: - Cancellation

    func testCancellingTheWholeFlowFromOutside() throws {
        let running = ManualOperation(finishesOnCancel: true)
        let never = Locked(0)
        let events = Locked<[String]>([])
        let flow = Cascade {
            Number(1)
            Parallel {
                running
                Add(1)
            }
            .onCancellation { events.append("group") }
            AsyncBlockOperation { operation in
                never.increment()
                operation.finish()
            }
        }
        .onCancellation { events.append("flow") }
        let queue = OperationQueue()
        queue.addOperation(flow)
        running.started.wait(timeout: testTimeout)
        flow.cancel()
        XCTAssertTrue(try flow.waitToOutcome().isCancelled)
        XCTAssertTrue(running.outcome?.isCancelled == true)
        XCTAssertEqual(never.value, 0)
        XCTAssertEqual(events.value, ["group", "flow"])
    }

    func testAStepDeepInsideCancellingCancelsTheFlow() throws {
        let later = Locked(0)
        let flow = Cascade {
            Number(1)
            Parallel {
                Add(1)
                Cascade {
                    Add(2)
                    TransformBlockOperation<Int, Int> { operation in
                        operation.cancel()
                        operation.finish()
                    }
                }
            }
            AsyncBlockOperation { operation in
                later.increment()
                operation.finish()
            }
        }
        XCTAssertTrue(try flow.runToOutcome().isCancelled)
        XCTAssertEqual(later.value, 0)
    }

    func testABlockReruns() throws {
        let attempts = Locked(0)
        let flow = Cascade {
            AsyncBlockOperation { operation in
                if attempts.increment() < 3 { operation.rerun() } else { operation.finish() }
            }
            Number(3)
        }
        XCTAssertEqual(try flow.run(timeout: .seconds(testTimeout)), 3)
        XCTAssertEqual(attempts.value, 3)
    }

    /// Cancels flows at random moments from another thread: every flow finishes, each handler is
    /// called exactly once, and no step runs after the flow has finished.
    func testCancellationRacingTheFlowFromManyThreads() throws {
        var random = SeededRandom(seed: 23)
        for trial in 0..<200 {
            let completions = Locked(0)
            let cancellations = Locked(0)
            let gate = Gate()
            let delay = Int.random(in: 0..<6, using: &random)
            let finished = Locked(false)
            let lateSteps = Locked(0)
            let flow = Cascade {
                Number(trial)
                Parallel {
                    Add(1)
                    for _ in 0..<3 {
                        TransformBlockOperation<Int, Int> { operation in
                            if finished.value { lateSteps.increment() }
                            DispatchQueue.global().async { operation.finish(with: operation.input ?? 0) }
                        }
                    }
                }
                AsyncBlockOperation { operation in
                    gate.open()
                    operation.finish()
                }
                for _ in 0..<delay { AsyncBlockOperation { $0.finish() } }
            }
            .onCompletion { _ in completions.increment() }
            .onCancellation { cancellations.increment() }
            let queue = OperationQueue()
            queue.addOperation(flow)
            if trial.isMultiple(of: 2) { gate.wait(timeout: testTimeout) }
            DispatchQueue.global().async { flow.cancel() }
            let outcome = try flow.waitToOutcome()
            finished.mutate { $0 = true }
            XCTAssertEqual(completions.value, 1, "trial \(trial)")
            XCTAssertEqual(cancellations.value, outcome.isCancelled ? 1 : 0, "trial \(trial)")
            XCTAssertEqual(lateSteps.value, 0, "trial \(trial)")
        }
    }

    // MARK: - Recording

    func testARecordedFlowDrawsTheSameGraphAsTheHandBuiltComposites() throws {
        func recordedGraph(_ operation: AsyncOperation) throws -> [String] {
            let recorder = FlightRecorder()
            recorder.attach(to: operation)
            try operation.run(timeout: .seconds(testTimeout))
            let records = recorder.records
            let names = Dictionary(uniqueKeysWithValues: records.map { ($0.id, $0.name ?? "?") })
            return records.map { record in
                [
                    "\(record.kind)", record.name ?? "?", record.parentID.map { names[$0]! } ?? "-",
                    record.position.map(String.init) ?? "-", record.predecessorID.map { names[$0]! } ?? "-",
                    record.link.map { "\($0)" } ?? "-", "\(record.status)",
                ].joined(separator: " ")
            }
            .sorted()
        }

        let dsl = Cascade {
            Number(1, name: "one")
            Parallel {
                Number(2, name: "two")
                Number(3, name: "three")
            }
            .named("both")
            ResultBlockOperation<Int> { $0.finish(with: 0) }.named("zero")
        }
        dsl.name = "flow"

        let handBuilt = SequenceOperation<Int>(operations: [
            Number(1, name: "one"),
            ResultGroupOperation(operations: [Number(2, name: "two"), Number(3, name: "three")]).named("both"),
            ResultBlockOperation<Int> { $0.finish(with: 0) }.named("zero"),
        ])
        handBuilt.name = "flow"

        let drawn = try recordedGraph(dsl)
        XCTAssertEqual(drawn.count, 6)
        XCTAssertEqual(drawn, try recordedGraph(handBuilt))
    }

    // MARK: - One-liners

    func testAsyncOperationRunsABlockOnAQueue() throws {
        let queue = OperationQueue()
        let operation = asyncOperation(on: queue) { operation in
            DispatchQueue.global().async { operation.finish() }
        }
        XCTAssertTrue(try operation.waitToOutcome().isSuccess)
    }

    func testSyncOperationBlocksUntilTheBlockFinishes() throws {
        let finished = Locked(false)
        try syncOperation(timeout: .seconds(testTimeout)) { operation in
            DispatchQueue.global().async {
                finished.mutate { $0 = true }
                operation.finish()
            }
        }
        XCTAssertTrue(finished.value)

        XCTAssertThrowsError(
            try syncOperation(timeout: .seconds(testTimeout)) { $0.finish(throwing: TestError(code: 4)) }
        ) { XCTAssertEqual($0 as? TestError, TestError(code: 4)) }
    }

    func testSyncOperationIsBoundedAndRefusesToDeadlock() throws {
        XCTAssertThrowsError(
            try syncOperation(timeout: .milliseconds(50)) { _ in }
        ) { error in
            guard case BatonError.timedOut = error else { return XCTFail("\(error)") }
        }

        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        let refusal = Locked<(any Error)?>(nil)
        let outer = AsyncBlockOperation { operation in
            do {
                try syncOperation(on: serial, timeout: .seconds(testTimeout)) { $0.finish() }
            } catch {
                refusal.mutate { $0 = error }
            }
            operation.finish()
        }
        serial.addOperation(outer)
        waitFinished(outer)
        guard case BatonError.wouldDeadlock? = refusal.value else { return XCTFail("\(String(describing: refusal.value))") }
    }
}

extension Operation {
    /// Names the operation where it is written (for the recorder test).
    fileprivate func named(_ name: String) -> Self {
        self.name = name
        return self
    }
}
