import Foundation
import XCTest

@testable import Baton

/// Composites and chains let go of what they have handed on while they still run, and keep it only
/// when asked: each test counts the deinits of finished children while a blocked child keeps the
/// composite running (gated, no sleeps).
final class MemoryReleaseTests: BatonTestCase {
    // MARK: - Groups

    func testAGroupLetsGoOfEachChildOnceChildDidFinishHasConsumedIt() throws {
        let freed = Locked(0)
        let consumed = Locked(0)
        let blocker = Payload(bytes: 1, freed: freed, blocked: true)
        let group = ConsumingGroup(consumed: consumed)
        try inScope {
            for _ in 0..<20 { try group.addChild(Payload(bytes: 1_000, freed: freed)) }
        }
        try group.addChild(blocker)
        OperationQueue().addOperation(group)
        blocker.started.wait()
        XCTAssertTrue(eventually { freed.value == 20 }, "\(freed.value) of 20 finished children freed while the group runs")
        XCTAssertFalse(group.isFinished)
        XCTAssertEqual(consumed.value, 20_000, "every output reached childDidFinish before its child was let go")
        XCTAssertEqual(group.children.map(ObjectIdentifier.init), [ObjectIdentifier(blocker)])
        blocker.release.open()
        waitFinished(group)
        XCTAssertTrue(group.children.isEmpty)
        XCTAssertEqual(group.progress.completedUnitCount, 21)
    }

    func testAGroupThatKeepsFinishedChildrenKeepsThemUntilItIsFreed() throws {
        let freed = Locked(0)
        try inScope {
            let group = GroupOperation(keepsFinishedChildren: true)
            for _ in 0..<5 { try group.addChild(Payload(bytes: 10, freed: freed)) }
            waitFinished(finished(group))
            XCTAssertEqual(group.children.count, 5)
            XCTAssertEqual(group.children.compactMap { ($0 as? Payload)?.output?.count }, Array(repeating: 10, count: 5))
            XCTAssertEqual(freed.value, 0)
        }
        XCTAssertTrue(eventually { freed.value == 5 }, "the kept children go with the group")
    }

    func testAResultGroupKeepsOnlyTheOutputsInTheirOrder() throws {
        let freed = Locked(0)
        let first = Payload(bytes: 1, freed: freed, blocked: true)
        let group = ResultGroupOperation<[UInt8]>(operations: [first])
        try inScope {
            for size in 2...5 { try group.addChild(Payload(bytes: size, freed: freed)) }
        }
        OperationQueue().addOperation(group)
        first.started.wait()
        XCTAssertTrue(eventually { freed.value == 4 }, "\(freed.value) of 4 finished children freed while the group runs")
        XCTAssertEqual(group.children.map(ObjectIdentifier.init), [ObjectIdentifier(first)])
        first.release.open()
        waitFinished(group)
        XCTAssertEqual(group.output?.map(\.count), [1, 2, 3, 4, 5], "in the order given, though the first finished last")
    }

    func testAResultGroupThatKeepsFinishedChildrenKeepsThem() {
        let freed = Locked(0)
        let group = finished(
            ResultGroupOperation<[UInt8]>(
                operations: (1...3).map { Payload(bytes: $0, freed: freed) }, keepsFinishedChildren: true))
        XCTAssertEqual(group.children.compactMap { $0.output?.count }, [1, 2, 3])
        XCTAssertEqual(freed.value, 0)
    }

    // MARK: - Sequences, retries, trees

    func testASequenceLetsGoOfEachStepOnceItHasHandedItOn() {
        let freed = Locked(0)
        let last = Payload(bytes: 1, freed: freed, blocked: true)
        let sequence = inScope {
            SequenceOperation<[UInt8]>(operations: (0..<10).map { _ in Payload(bytes: 100, freed: freed) } + [last])
        }
        OperationQueue().addOperation(sequence)
        last.started.wait()
        XCTAssertTrue(eventually { freed.value == 10 }, "\(freed.value) of 10 steps freed while the sequence runs")
        XCTAssertEqual(sequence.children.map(ObjectIdentifier.init), [ObjectIdentifier(last)])
        XCTAssertTrue(sequence.childOutcomes.isEmpty)
        last.release.open()
        waitFinished(sequence)
        XCTAssertEqual(sequence.output?.count, 1)
        XCTAssertTrue(sequence.children.isEmpty)
    }

    func testASequenceThatKeepsFinishedChildrenKeepsThemAndTheirOutcomes() {
        let freed = Locked(0)
        let sequence = finished(
            SequenceOperation<[UInt8]>(
                operations: (1...3).map { Payload(bytes: $0, freed: freed) }, keepsFinishedChildren: true))
        XCTAssertEqual(sequence.children.count, 3)
        XCTAssertEqual(sequence.childOutcomes.compactMap { ($0.output as? [UInt8])?.count }, [1, 2, 3])
        XCTAssertEqual(freed.value, 0)
    }

    func testARetryLetsGoOfFailedAttempts() {
        let freed = Locked(0)
        let blocked = Locked<Payload?>(nil)
        let retry = RetryOperation<[UInt8]>(maximumAttempts: 5) { attempt in
            guard attempt == 4 else { return Payload(bytes: 100, freed: freed, fails: true) }
            let last = Payload(bytes: 1, freed: freed, blocked: true)
            blocked.mutate { $0 = last }
            return last
        }
        OperationQueue().addOperation(retry)
        XCTAssertTrue(eventually { blocked.value != nil })
        let last = blocked.value!
        last.started.wait()
        XCTAssertTrue(eventually { freed.value == 3 }, "\(freed.value) of 3 failed attempts freed while the retry runs")
        XCTAssertEqual(retry.attemptCount, 4)
        XCTAssertEqual(retry.attemptsMade.map(ObjectIdentifier.init), [ObjectIdentifier(last)])
        last.release.open()
        waitFinished(retry)
        XCTAssertEqual(retry.output?.count, 1)
        XCTAssertTrue(retry.attemptsMade.isEmpty)
    }

    func testATreeLetsGoOfFinishedNodesWhileItRuns() {
        let freed = Locked(0)
        let blocked = Payload(bytes: 1, freed: freed, blocked: true)
        let pending = Locked<Payload?>(blocked)
        let root = TreeNode<Int, Int>("root") { _ in ResultBlockOperation { $0.finish(with: 0) } }
        root.addChild(
            TreeNode<Int, [UInt8]>("leaf", items: { _ in Array(0..<8) }) { item in
                guard item == 0 else { return Payload(bytes: 100, freed: freed) }
                return pending.mutate { payload in
                    defer { payload = nil }
                    return payload!
                }
            })
        let tree = TreeOperation(root: root, input: 0)
        OperationQueue().addOperation(tree)
        blocked.started.wait()
        XCTAssertTrue(eventually { freed.value == 7 }, "\(freed.value) of 7 finished nodes freed while the tree runs")
        XCTAssertFalse(tree.isFinished)
        blocked.release.open()
        waitFinished(tree)
        XCTAssertTrue(tree.outcome?.isSuccess == true)
    }

    // MARK: - Chains

    func testAChainLetsGoOfFinishedOperationsWhenTheCallerKeepsNoArray() throws {
        let freed = Locked(0)
        let last = Payload(bytes: 1, freed: freed, blocked: true)
        let handle = try inScope {
            try OperationQueue().addChain((0..<10).map { _ in Payload(bytes: 100, freed: freed) } + [last])
        }
        last.started.wait()
        XCTAssertTrue(eventually { freed.value == 10 }, "\(freed.value) of 10 operations freed while the chain runs")
        XCTAssertEqual(handle.unfinishedOperations.map(ObjectIdentifier.init), [ObjectIdentifier(last)])
        last.release.open()
        XCTAssertEqual((try handle.waitToOutcome(timeout: testTimeout).output as? [UInt8])?.count, 1)
    }

    func testAGeneratedChainHoldsOnlyTheOperationRunning() throws {
        let freed = Locked(0)
        let blocked = Locked<Payload?>(nil)
        let made = Locked(0)
        let handle = try OperationQueue().addChain(first: Payload(bytes: 100, freed: freed)) { _ in
            let number = made.increment()
            if number < 10 { return Payload(bytes: 100, freed: freed) }
            guard number == 10 else { return nil }
            let last = Payload(bytes: 1, freed: freed, blocked: true)
            blocked.mutate { $0 = last }
            return last
        }
        XCTAssertTrue(eventually { blocked.value != nil })
        let last = blocked.value!
        last.started.wait()
        XCTAssertTrue(eventually { freed.value == 10 }, "\(freed.value) of 10 operations freed while the chain runs")
        XCTAssertEqual(handle.unfinishedOperations.map(ObjectIdentifier.init), [ObjectIdentifier(last)])
        last.release.open()
        XCTAssertEqual((try handle.waitToOutcome(timeout: testTimeout).output as? [UInt8])?.count, 1)
        XCTAssertEqual(made.value, 11, "asked once more after the last, which returned nil")
    }

    func testAGeneratedChainPassesOutputsOn() throws {
        let handle = try OperationQueue().addChain(first: ResultBlockOperation<Int> { $0.finish(with: 1) }) { previous in
            guard let value = (previous as? ResultOperation<Int>)?.output, value < 64 else { return nil }
            return TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! * 2) }
        }
        XCTAssertEqual(try handle.waitToOutcome(timeout: testTimeout).output as? Int, 64)
    }

    func testAGeneratedChainEndsAtAFailureWithoutAskingForMore() throws {
        let asked = Locked(0)
        let handle = try OperationQueue().addChain(first: ImmediateOperation(.success(1))) { _ in
            asked.increment() == 3
                ? ImmediateOperation(.failure(TestError(code: 3)), name: "third") : ImmediateOperation(.success(1))
        }
        let outcome = try handle.waitToOutcome(timeout: testTimeout)
        XCTAssertEqual(outcome.error as? TestError, TestError(code: 3))
        XCTAssertEqual(asked.value, 3)
    }

    func testCancellingAGeneratedChainStopsItMakingMore() throws {
        let asked = Locked(0)
        let first = ManualOperation(name: "first", finishesOnCancel: true)
        let handle = try OperationQueue().addChain(first: first) { _ in
            asked.increment()
            return ImmediateOperation(.success(1))
        }
        first.started.wait()
        handle.cancel()
        XCTAssertTrue(try handle.waitToOutcome(timeout: testTimeout).isCancelled)
        XCTAssertEqual(asked.value, 0)
    }

    func testCancellingAGeneratedChainBetweenTwoOperationsEndsItCancelled() throws {
        // The generator itself cancels the chain: the operation it returns is cancelled and never runs.
        let box = Locked<ChainHandle<any Sendable>?>(nil)
        let gate = Gate()
        let made = ImmediateOperation(.success(2), name: "made")
        let handle = try OperationQueue().addChain(
            first: ResultBlockOperation<Int> { operation in
                gate.wait()
                operation.finish(with: 1)
            }
        ) { _ in
            box.value?.cancel()
            return made
        }
        box.mutate { $0 = handle }
        gate.open()
        XCTAssertTrue(try handle.waitToOutcome(timeout: testTimeout).isCancelled)
        XCTAssertEqual(made.executions.value, 0)
    }

    func testAGeneratedOperationThatIsNotFreshFailsTheChainNamingIt() throws {
        let first = ImmediateOperation(.success(1), name: "first")
        let handle = try OperationQueue().addChain(first: first) { previous in previous }
        let outcome = try handle.waitToOutcome(timeout: testTimeout)
        guard case .failed(let error as BatonError) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(error.culprit?.name, "first")
    }

    func testAGeneratedChainRefusesAFirstOperationThatIsNotFresh() {
        let first = finished(ImmediateOperation(.success(1), name: "done already"))
        XCTAssertThrowsError(try OperationQueue().addChain(first: first) { _ in nil }) { error in
            XCTAssertEqual((error as? BatonError)?.culprit?.name, "done already")
        }
    }

    func testManyGeneratedChainsCancelledAtRandomMomentsAllEnd() throws {
        // Cancellation races the hand-on from one operation to the next; every chain must still end.
        let queue = OperationQueue()
        for trial in 0..<200 {
            let remaining = Locked(50)
            let handle = try queue.addChain(first: JitterOperation(trial)) { _ in
                let left = remaining.mutate {
                    $0 -= 1
                    return $0
                }
                return left > 0 ? JitterOperation(trial) : nil
            }
            if trial % 2 == 0 { DispatchQueue.global().async { handle.cancel() } } else { handle.cancel() }
            let outcome = try handle.waitToOutcome(timeout: testTimeout)
            XCTAssertTrue(outcome.isCancelled || outcome.isSuccess, "\(outcome)")
            XCTAssertTrue(handle.unfinishedOperations.isEmpty)
        }
    }
}

/// Produces `bytes` bytes (or fails) and counts its deinit; a blocked one waits for `release` first.
private final class Payload: ResultOperation<[UInt8]>, @unchecked Sendable {
    let bytes: Int
    let freed: Locked<Int>
    let fails: Bool
    let blocked: Bool
    let started = Gate()
    let release = Gate()

    init(bytes: Int, freed: Locked<Int>, fails: Bool = false, blocked: Bool = false) {
        self.bytes = bytes
        self.freed = freed
        self.fails = fails
        self.blocked = blocked
        super.init()
    }

    override func execute() {
        started.open()
        guard blocked else { return finishNow() }
        DispatchQueue.global().async { [self] in
            release.wait()
            finishNow()
        }
    }

    private func finishNow() {
        if fails { finish(throwing: TestError(code: bytes)) } else { finish(with: [UInt8](repeating: 1, count: bytes)) }
    }

    deinit { freed.mutate { $0 += 1 } }
}

/// Adds up the sizes of its children's outputs in `childDidFinish`, as a consumer of outputs does.
private final class ConsumingGroup: GroupOperation, @unchecked Sendable {
    let consumed: Locked<Int>
    init(consumed: Locked<Int>) {
        self.consumed = consumed
        super.init()
    }
    override func childDidFinish(_ child: Operation) {
        let size = (child as? Payload)?.output?.count ?? 0
        consumed.mutate { $0 += size }
    }
}
