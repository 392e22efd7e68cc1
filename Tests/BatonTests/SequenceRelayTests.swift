import Dispatch
import Foundation
import XCTest

@testable import Baton

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A step that logs when it enters `execute()` and when that call returns, on which thread, and runs
/// `after` between its finish and the return.
private final class LoggedStep: TransformOperation<Int, Int>, @unchecked Sendable {
    let index: Int
    let log: Locked<[(event: String, index: Int, thread: pthread_t)]>
    let executions = Locked(0)
    var after: (@Sendable (LoggedStep) -> Void)?

    init(_ index: Int, log: Locked<[(event: String, index: Int, thread: pthread_t)]>) {
        self.index = index
        self.log = log
        super.init()
    }

    override func execute() {
        executions.increment()
        log.mutate { $0.append(("enter", index, pthread_self())) }
        finish(with: (input ?? 0) + 1)
        after?(self)
        log.mutate { $0.append(("return", index, pthread_self())) }
    }
}

/// A sequence's next step is started on the worker that ran the step before, once that step's
/// `execute()` has returned, instead of through the sequence's queue (`Relay`). These tests pin what that
/// must keep: the order, the cancellation, a wait inside a step, a dependency added late, and the gate.
final class SequenceRelayTests: BatonTestCase {
    private typealias Log = Locked<[(event: String, index: Int, thread: pthread_t)]>

    private func steps(_ count: Int, log: Log) -> [LoggedStep] {
        (0..<count).map { index in
            let step = LoggedStep(index, log: log)
            if index == 0 { step.input = 0 }
            return step
        }
    }

    func testAStepThatFinishesInsideExecuteHandsOnOnItsWorkerOnceExecuteHasReturned() {
        let log = Log([])
        let children = steps(300, log: log)
        let sequence = finished(SequenceOperation<Int>(operations: children))
        XCTAssertEqual(sequence.output, 300)
        // The sequence finishes with its last step's finish, before that step's `execute()` returns.
        XCTAssertTrue(eventually { log.value.count == 600 })
        let events = log.value
        // Strictly enter 0, return 0, enter 1, return 1, …: the next step waits for the return.
        for (position, event) in events.enumerated() {
            XCTAssertEqual(event.index, position / 2, "event \(position)")
            XCTAssertEqual(event.event, position.isMultiple(of: 2) ? "enter" : "return", "event \(position)")
        }
        // Every step ran on the thread of the first: no step went through the queue to another worker.
        let first = events[0].thread
        XCTAssertTrue(events.allSatisfy { pthread_equal($0.thread, first) != 0 }, "a step changed threads")
        XCTAssertEqual(diagnostics.allKinds, [])
    }

    func testAStepThatWaitsForItsSequenceAfterItFinishedDoesNotHoldUpTheNextStep() {
        let log = Log([])
        let children = steps(3, log: log)
        let sequence = SequenceOperation<Int>(operations: children)
        let waited = Locked<String?>(nil)
        let returned = Gate()
        children[0].after = { _ in
            defer { returned.open() }
            // The next step is this thread's to start once `execute()` returns: the wait gives it to
            // the queue instead of waiting for itself.
            do {
                let value = try sequence.wait(timeout: .seconds(Int64(testTimeout)))
                waited.mutate { $0 = "\(value)" }
            } catch {
                waited.mutate { $0 = "\(error)" }
            }
        }
        finished(sequence)
        returned.wait()
        XCTAssertEqual(sequence.output, 3)
        XCTAssertEqual(waited.value, "3")
    }

    func testAStepThatWaitsUntilItsSequenceFinishedAfterItFinishedDoesNotHoldUpTheNextStep() {
        let log = Log([])
        let children = steps(3, log: log)
        let sequence = SequenceOperation<Int>(operations: children)
        let returned = Gate()
        children[0].after = { _ in
            // Foundation's own wait: no timeout, so the test's bounded wait below is the hang guard.
            sequence.waitUntilFinished()
            returned.open()
        }
        finished(sequence)
        returned.wait()
        XCTAssertEqual(sequence.output, 3)
    }

    func testAStepThatWaitsForAChainHoldingItsSequenceDoesNotHoldUpTheNextStep() throws {
        let log = Log([])
        let children = steps(3, log: log)
        let sequence = SequenceOperation<Int>(operations: children)
        let handle = Locked<ChainHandle<any Sendable>?>(nil)
        let waited = Locked<Int?>(nil)
        let ready = Gate()
        let returned = Gate()
        children[0].after = { _ in
            defer { returned.open() }
            ready.wait()
            waited.mutate { $0 = (try? handle.value?.wait(timeout: .seconds(Int64(testTimeout)))) as? Int }
        }
        let queue = OperationQueue()
        let chained = try queue.addChain([sequence, TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! * 10) }])
        handle.mutate { $0 = chained }
        ready.open()
        XCTAssertEqual(try chained.wait(timeout: .seconds(Int64(testTimeout))) as? Int, 30)
        // Both waits end together: the step's thread writes what it saw once it runs again.
        returned.wait()
        XCTAssertEqual(waited.value, 30)
    }

    func testCancellingTheSequenceFromAFinishedStepRetiresTheStepHandedOn() {
        let log = Log([])
        let children = steps(3, log: log)
        let sequence = SequenceOperation<Int>(operations: children)
        children[0].after = { _ in sequence.cancel() }
        finished(sequence)
        XCTAssertTrue(sequence.isCancelled)
        XCTAssertEqual(children[1].executions.value, 0)
        XCTAssertEqual(children[2].executions.value, 0)
        XCTAssertTrue(children[1].isFinished && children[1].isCancelled)
        XCTAssertTrue(children[2].isFinished && children[2].isCancelled)
    }

    func testADependencyAddedToTheStepHandedOnIsWaitedFor() {
        for trial in 0..<10 {
            let log = Log([])
            let children = steps(2, log: log)
            let blocker = BlockOperation {}
            let sawBlockerFinished = Locked<Bool?>(nil)
            let returned = Gate()
            children[0].after = { _ in
                children[1].addDependency(blocker)
                returned.open()
            }
            let sequence = SequenceOperation<Int>(operations: children)
            children[1].onStart { sawBlockerFinished.mutate { $0 = blocker.isFinished } }
            let queue = OperationQueue()
            queue.addOperation(sequence)
            returned.wait()
            OperationQueue().addOperation(blocker)
            waitFinished(sequence)
            XCTAssertEqual(sequence.output, 2, "trial \(trial)")
            XCTAssertEqual(sawBlockerFinished.value, true, "trial \(trial): started before its dependency finished")
        }
        XCTAssertFalse(diagnostics.allKinds.contains(.startedWhileNotReady))
    }

    func testAClaimingStepHandedOnWaitsForItsCategoryWithoutAWorker() throws {
        let scope = ExclusivityScope("relay")
        let category = OperationCategory("x", in: scope)
        let holder = ManualOperation()
        try holder.addExclusivity(category)
        let outside = OperationQueue()
        outside.addOperation(holder)
        holder.started.wait()
        let log = Log([])
        let children = steps(4, log: log)
        for child in children.dropFirst() { try child.addExclusivity(category) }
        let sequence = SequenceOperation<Int>(operations: children)
        let queue = OperationQueue()
        queue.addOperation(sequence)
        XCTAssertTrue(eventually { children[0].isFinished })
        XCTAssertEqual(children[1].executions.value, 0, "ran while the category was held")
        holder.finish(with: 0)
        waitFinished(sequence)
        XCTAssertEqual(sequence.output, 4, "\(String(describing: sequence.outcome))")
        XCTAssertEqual(children.map { $0.executions.value }, [1, 1, 1, 1])
    }

    /// Many sequences at once, each step finishing on its worker, on another thread, or after a wait
    /// for its own sequence; some cancel their sequence, some claim one category that every sequence shares. Every step runs at most once, in order, never two
    /// holders of the category at once, and every sequence ends.
    func testSequencesWhoseStepsRelayUnderLoadKeepOrderExclusivityAndEnd() throws {
        let trials = ProcessInfo.processInfo.environment["BATON_RELAY_TRIALS"].flatMap(Int.init) ?? 200
        var generator = SeededRandom(seed: 41)
        let scope = ExclusivityScope("relay hammer")
        let category = OperationCategory("shared", in: scope)
        let holders = Locked(0)
        let overlap = Locked(false)
        for trial in 0..<trials {
            var sequences: [SequenceOperation<Int>] = []
            var allSteps: [[RelayHammerStep]] = []
            for sequenceIndex in 0..<8 {
                let count = Int.random(in: 2...30, using: &generator)
                // At most one step of the first sequence blocks its thread in a wait: Linux's dispatch
                // pool adds a thread for a blocked one only every so often (about 0.2 s).
                var waits = sequenceIndex > 0
                let steps = (0..<count).map { index in
                    var behaviour = RelayHammerStep.Behaviour.allCases.randomElement(using: &generator)!
                    if behaviour == .waitForSequence {
                        if waits { behaviour = .finishHere }
                        waits = true
                    }
                    return RelayHammerStep(index: index, behaviour: behaviour, holders: holders, overlap: overlap)
                }
                steps[0].input = 0
                for step in steps where Bool.random(using: &generator) { try step.addExclusivity(category) }
                let sequence = SequenceOperation<Int>(operations: steps)
                for (position, step) in steps.enumerated() {
                    step.sequence = sequence
                    step.next = position + 1 < steps.count ? steps[position + 1] : nil
                }
                sequences.append(sequence)
                allSteps.append(steps)
            }
            let queue = OperationQueue()
            queue.addOperations(sequences, waitUntilFinished: false)
            for (sequence, steps) in zip(sequences, allSteps) {
                waitFinished(sequence)
                XCTAssertTrue(sequence.isFinished, "trial \(trial)")
                let ran = steps.map { $0.executions.value }
                XCTAssertTrue(ran.allSatisfy { $0 <= 1 }, "trial \(trial): a step ran twice: \(ran)")
                // Steps run in order: once one did not run, none after it did.
                if let firstUnrun = ran.firstIndex(of: 0) {
                    XCTAssertTrue(ran[firstUnrun...].allSatisfy { $0 == 0 }, "trial \(trial): out of order: \(ran)")
                }
                XCTAssertTrue(steps.allSatisfy(\.isFinished), "trial \(trial): a step was left pending")
                if sequence.outcome?.isSuccess == true { XCTAssertEqual(sequence.output, steps.count) }
            }
            for step in allSteps.joined() where step.waited.value != nil {
                XCTAssertNotEqual(step.waited.value, "timed out", "trial \(trial)")
            }
        }
        XCTAssertFalse(overlap.value, "two holders of one category executed at once")
    }
}

/// A step whose own readiness (an `isReady` override) is false until `allow()` (from the independent
/// review of the relay).
private final class ReadyWhenAllowed: AsyncOperation, @unchecked Sendable {
    let allowed = Locked(false)
    let executedWhileNotAllowed = Locked<Bool?>(nil)

    override var isReady: Bool { super.isReady && allowed.value }

    func allow() {
        willChangeValue(forKey: "isReady")
        allowed.mutate { $0 = true }
        didChangeValue(forKey: "isReady")
    }

    override func execute() {
        executedWhileNotAllowed.mutate { $0 = !allowed.value }
        finish()
    }
}

extension SequenceRelayTests {
    /// A step whose `isReady` says no is not handed on: the queue waits for it, as it did.
    func testAStepWhoseOwnIsReadyIsFalseIsNotStartedByTheRelay() throws {
        for claims in [false, true] {
            let first = AsyncBlockOperation { $0.finish() }
            let second = ReadyWhenAllowed()
            if claims { try second.addExclusivity(OperationCategory("ready", in: ExclusivityScope("relay ready"))) }
            let sequence = SequenceOperation<Void>(operations: [first, second])
            let started = Gate()
            second.onStart { started.open() }
            OperationQueue().addOperation(sequence)
            XCTAssertTrue(eventually { first.isFinished })
            // The relay starts at once on the thread that ran the first step, or not at all: once the
            // sequence's queue has the step, it is Foundation's to start when `isReady` says yes.
            XCTAssertTrue(
                eventually { second.core.withLock { $0.life.isPending } && FoundationQueueState.isEnqueued(second) == true })
            XCTAssertNil(second.executedWhileNotAllowed.value, "claims: \(claims)")
            second.allow()
            started.wait()
            waitFinished(sequence)
            XCTAssertEqual(second.executedWhileNotAllowed.value, false, "claims: \(claims)")
            XCTAssertFalse(diagnostics.kinds(for: second).contains(.startedWhileNotReady))
        }
    }

    /// A sequence's timeout (a cancel) ends it when it runs out, even while the step before, finished,
    /// is still inside its `execute()`: the step handed on is started by the cancel, cancelled.
    func testASequencesTimeoutEndsItWhileAFinishedStepIsStillInsideExecute() {
        let cleanupDone = Gate()
        let finishedFirst = Gate()
        let first = AsyncBlockOperation { operation in
            operation.finish()
            finishedFirst.open()
            cleanupDone.wait()
        }
        let second = ManualOperation(finishesOnCancel: true)
        let sequence = SequenceOperation<Void>(operations: [first, second])
        sequence.timeout = .milliseconds(100)
        OperationQueue().addOperation(sequence)
        finishedFirst.wait()
        let ended = Gate()
        sequence.whenFinished { ended.open() }
        ended.wait()
        cleanupDone.open()
        XCTAssertEqual(second.executions.value, 0)
        XCTAssertTrue(second.isFinished && second.isCancelled)
    }
}

private final class RelayHammerStep: TransformOperation<Int, Int>, @unchecked Sendable {
    enum Behaviour: CaseIterable {
        // A dependency added late is `testADependencyAddedToTheStepHandedOnIsWaitedFor`'s: here it would
        // race Foundation's own readiness bookkeeping for the steps a waiting gate adds to the queue.
        case finishHere, finishElsewhere, waitForSequence, cancelSequence
    }

    let index: Int
    let behaviour: Behaviour
    let holders: Locked<Int>
    let overlap: Locked<Bool>
    let executions = Locked(0)
    let waited = Locked<String?>(nil)
    nonisolated(unsafe) weak var sequence: SequenceOperation<Int>?
    nonisolated(unsafe) var next: Operation?

    init(index: Int, behaviour: Behaviour, holders: Locked<Int>, overlap: Locked<Bool>) {
        self.index = index
        self.behaviour = behaviour
        self.holders = holders
        self.overlap = overlap
        super.init()
    }

    override func execute() {
        executions.increment()
        let claims = !categories.isEmpty
        if claims, holders.increment() > 1 { overlap.mutate { $0 = true } }
        let value = (input ?? 0) + 1
        let done: @Sendable () -> Void = {
            if claims { self.holders.mutate { $0 -= 1 } }
            self.finish(with: value)
        }
        switch behaviour {
        case .finishHere:
            done()
        case .finishElsewhere:
            DispatchQueue.global().async(execute: done)
        case .waitForSequence:
            done()
            guard let sequence else { return }
            do {
                _ = try sequence.wait(timeout: .seconds(Int64(testTimeout)))
                waited.mutate { $0 = "finished" }
            } catch BatonError.timedOut {
                waited.mutate { $0 = "timed out" }
            } catch {
                waited.mutate { $0 = "ended: \(error)" }
            }
        case .cancelSequence:
            done()
            if index % 3 == 0 { sequence?.cancel() }
        }
        self.next = nil
    }
}

/// Cancels racing the relay from other threads (attack surfaces: a decision acted on after a hop, the
/// window between "handed on" and "started", re-entry through a generator): sequences of steps that
/// finish on their worker, in the list form and the generator form, cancelled from another thread at
/// a point chosen per trial, released together by a gate. Every step runs at most once, every step and
/// sequence ends, and no start is refused (a refused start would mean two threads thought they owned it).
final class SequenceRelayCancelHammerTests: BatonTestCase {
    func testCancelsRacingTheRelayNeverRunAStepTwiceOrLeaveOnePending() {
        let trials = ProcessInfo.processInfo.environment["BATON_RELAY_TRIALS"].flatMap(Int.init) ?? 200
        var generator = SeededRandom(seed: 46)
        for trial in 0..<trials {
            let start = DispatchSemaphore(value: 0)
            var sequences: [SequenceOperation<Int>] = []
            var made: [Locked<[TransformBlockOperation<Int, Int>]>] = []
            let executions = Locked(0)
            for index in 0..<6 {
                let steps = Locked<[TransformBlockOperation<Int, Int>]>([])
                let makeStep: @Sendable () -> TransformBlockOperation<Int, Int> = {
                    let step = TransformBlockOperation<Int, Int> { operation in
                        executions.increment()
                        operation.finish(with: (operation.input ?? 0) + 1)
                    }
                    steps.mutate { $0.append(step) }
                    return step
                }
                let count = Int.random(in: 5...60, using: &generator)
                let sequence: SequenceOperation<Int>
                if index.isMultiple(of: 2) {
                    let list = (0..<count).map { _ in makeStep() }
                    list[0].input = 0
                    sequence = SequenceOperation<Int>(operations: list)
                } else {
                    let first = makeStep()
                    first.input = 0
                    let made = Locked(1)
                    sequence = SequenceOperation<Int>(first: first) { _ in
                        made.increment() <= count ? makeStep() : nil
                    }
                }
                sequences.append(sequence)
                made.append(steps)
                let spin = Int.random(in: 0...2_000, using: &generator)
                Thread {
                    start.wait()
                    var sink = 0
                    for value in 0..<spin { sink &+= value }
                    if sink >= 0 { sequence.cancel() }
                }.start()
            }
            let queue = OperationQueue()
            queue.addOperations(sequences, waitUntilFinished: false)
            for _ in sequences { start.signal() }
            for sequence in sequences { waitFinished(sequence) }
            for (position, steps) in made.enumerated() {
                XCTAssertTrue(
                    eventually { steps.value.allSatisfy(\.isFinished) }, "trial \(trial): a step of \(position) pending")
            }
            let total = made.reduce(0) { $0 + $1.value.count }
            XCTAssertLessThanOrEqual(executions.value, total, "trial \(trial)")
        }
        let refused = diagnostics.allKinds.filter { [.startedTwice, .startedWhileClaimed, .finishedTwice].contains($0) }
        XCTAssertEqual(refused, [], "starts refused or finishes repeated")
    }
}
