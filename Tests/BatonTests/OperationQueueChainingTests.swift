import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Adds one to its input.
private final class Increment: TransformOperation<Int, Int>, @unchecked Sendable {
    let executions = Locked(0)
    override func execute() {
        executions.increment()
        finish(with: input! + 1)
    }
}

/// Fails with the given error.
private final class Explode: TransformOperation<Int, Int>, @unchecked Sendable {
    let error: TestError
    init(_ error: TestError) {
        self.error = error
        super.init()
        name = "Explode"
    }
    override func execute() { finish(throwing: error) }
}

private func counted<T>(_ value: T) -> (operation: ResultBlockOperation<T>, executions: Locked<Int>) where T: Sendable {
    let executions = Locked(0)
    let operation = ResultBlockOperation<T> { operation in
        executions.increment()
        operation.finish(with: value)
    }
    return (operation, executions)
}

final class OperationQueueChainingTests: BatonTestCase {
    // MARK: - Outputs

    func testOutputFlowsThroughThreeTypedStages() throws {
        let queue = OperationQueue()
        let first = ResultBlockOperation<Int> { $0.finish(with: 20) }
        let describe = TransformBlockOperation<Int, String> { $0.finish(with: "n=\($0.input!)") }
        let measure = TransformBlockOperation<String, Int> { $0.finish(with: $0.input!.count) }
        let handle = try queue.addChain([first, Increment(), describe, measure])

        let outcome = try handle.waitToOutcome(timeout: testTimeout)
        XCTAssertEqual(outcome.output as? Int, 4)   // "n=21".count
        XCTAssertEqual(describe.output, "n=21")
        XCTAssertTrue(handle.unfinishedOperations.isEmpty, "the handle let go of every finished operation")
    }

    func testTypedBuilderThreadsOutputsAndMaps() throws {
        let queue = OperationQueue()
        let handle = try queue.addChain(
            Chain(ResultBlockOperation<Int> { $0.finish(with: 1) })
                .then(Increment())
                .map { "value \($0)" }
                .then(TransformBlockOperation<String, Int> { $0.finish(with: $0.input!.count) }))
        let outcome: Outcome<Int> = try handle.waitToOutcome(timeout: testTimeout)
        XCTAssertEqual(outcome.output, "value 2".count)
    }

    func testTypedBuilderCanBeAwaited() async throws {
        let queue = OperationQueue()
        let value = try await Chain(ResultBlockOperation<Int> { $0.finish(with: 40) })
            .then(Increment())
            .then(Increment())
            .run(on: queue)
        XCTAssertEqual(value, 42)
    }

    func testAMapThatThrowsFailsTheChain() throws {
        let queue = OperationQueue()
        let last = Increment()
        let handle = try queue.addChain(
            Chain(ResultBlockOperation<Int> { $0.finish(with: 1) })
                .map { _ -> Int in throw TestError(code: 9) }
                .then(last))
        let outcome = try handle.waitToOutcome(timeout: testTimeout)
        XCTAssertEqual(outcome.error as? TestError, TestError(code: 9))
        XCTAssertEqual(last.executions.value, 0)
    }

    // MARK: - Failure and cancellation

    func testAFailureInTheMiddleStopsLaterStagesAndBecomesTheOutcome() throws {
        let queue = OperationQueue()
        let (first, _) = counted(1)
        let later = Increment()
        let last = Increment()
        let handle = try queue.addChain([first, Increment(), Explode(TestError(code: 7)), later, last])

        let outcome = try handle.waitToOutcome(timeout: testTimeout)
        XCTAssertEqual(outcome.error as? TestError, TestError(code: 7))
        XCTAssertEqual(later.executions.value, 0)
        XCTAssertEqual(last.executions.value, 0)
        XCTAssertEqual(later.outcome?.error as? TestError, TestError(code: 7), "the upstream error is forwarded unchanged")
    }

    func testARunRegardlessDownstreamRunsAndReadsTheUpstreamError() throws {
        let queue = OperationQueue()
        let seen = Locked<[String]>([])
        let recover = TransformBlockOperation<Int, Int> { operation in
            seen.append("\(operation.upstreamError.map { "\($0)" } ?? "none")")
            operation.finish(with: -1)
        }
        recover.dependencyPolicy = .runRegardless
        let handle = try queue.addChain([ResultBlockOperation<Int> { $0.finish(with: 0) }, Explode(TestError(code: 2)), recover])
        let outcome = try handle.waitToOutcome(timeout: testTimeout)
        XCTAssertEqual(seen.value, ["TestError(code: 2)"])
        XCTAssertEqual(recover.output, -1)
        XCTAssertEqual(outcome.error as? TestError, TestError(code: 2), "the chain reports its first failure")
    }

    func testCancellingAStageInTheMiddleCancelsTheRest() throws {
        let queue = OperationQueue()
        let middle = ManualOperation(name: "middle")
        let after = Increment()
        let (first, _) = counted(0)
        let handle = try queue.addChain([first, Increment(), middle, after])
        middle.started.wait()
        middle.cancel()
        middle.cancelled.wait()
        XCTAssertEqual(middle.cancellations.value, 1)
        middle.finish()

        let outcome = try handle.waitToOutcome(timeout: testTimeout)
        XCTAssertTrue(outcome.isCancelled)
        XCTAssertEqual(after.executions.value, 0)
        XCTAssertTrue(after.isCancelled)
    }

    func testHandleCancelStopsARunningChain() throws {
        let queue = OperationQueue()
        let running = ManualOperation(name: "running")
        let after = Increment()
        let handle = try queue.addChain([running, after])
        running.started.wait()
        handle.cancel()
        running.finish()   // cooperative: the subclass ends after didCancel()
        let outcome = try handle.waitToOutcome(timeout: testTimeout)
        XCTAssertTrue(outcome.isCancelled)
        XCTAssertEqual(after.executions.value, 0)
    }

    func testCancelBeforeStart() throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let (first, firstRuns) = counted(1)
        let second = Increment()
        let handle = try queue.addChain([first, second])
        handle.cancel()
        queue.isSuspended = false
        let outcome = try handle.waitToOutcome(timeout: testTimeout)
        XCTAssertTrue(outcome.isCancelled)
        XCTAssertEqual(firstRuns.value, 0)
        XCTAssertEqual(second.executions.value, 0)
    }

    func testAnOperationCancelledBeforeChainingIsSkippedAndCancelsTheRest() throws {
        let queue = OperationQueue()
        let (first, firstRuns) = counted(1)
        first.cancel()
        let second = Increment()
        let handle = try queue.addChain([first, second])
        let outcome = try handle.waitToOutcome(timeout: testTimeout)
        XCTAssertTrue(outcome.isCancelled)
        XCTAssertEqual(firstRuns.value, 0)
        XCTAssertEqual(second.executions.value, 0)
    }

    func testUnfinishedOperationsAreWhatIsAheadAndCancelReachesThem() throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let first = ResultBlockOperation<Int> { $0.finish(with: 1) }
        let second = Increment()
        let handle = try queue.addChain([first, second])
        XCTAssertEqual(handle.unfinishedOperations.map(ObjectIdentifier.init), [first, second].map(ObjectIdentifier.init))
        handle.cancel()
        XCTAssertTrue(first.isCancelled)
        XCTAssertTrue(second.isCancelled)
        queue.isSuspended = false
        XCTAssertTrue(try handle.waitToOutcome(timeout: testTimeout).isCancelled)
        XCTAssertTrue(handle.unfinishedOperations.isEmpty)
    }

    // MARK: - Adapters

    func testACustomAdapterTransforms() throws {
        let queue = OperationQueue()
        let adapter = ChainAdapter.custom { upstream, downstream in
            guard let count = (upstream as? ResultOperation<Int>)?.output,
                let next = downstream as? TransformOperation<String, String>
            else { return }
            next.input = String(repeating: "*", count: count)
        }
        let show = TransformBlockOperation<String, String> { $0.finish(with: "[\($0.input!)]") }
        let handle = try queue.addChain([ResultBlockOperation<Int> { $0.finish(with: 3) }, show], adapter: adapter)
        XCTAssertEqual(try handle.waitToOutcome(timeout: testTimeout).output as? String, "[***]")
    }

    func testACustomAdapterThatThrowsFailsTheDownstreamOperation() throws {
        let queue = OperationQueue()
        let adapter = ChainAdapter.custom { _, _ in throw TestError(code: 11) }
        let second = Increment()
        let handle = try queue.addChain([ResultBlockOperation<Int> { $0.finish(with: 3) }, second], adapter: adapter)
        let outcome = try handle.waitToOutcome(timeout: testTimeout)
        XCTAssertEqual(outcome.error as? TestError, TestError(code: 11))
        XCTAssertEqual(second.outcome?.error as? TestError, TestError(code: 11))
        XCTAssertEqual(second.executions.value, 0)
    }

    func testACustomAdapterCanDecideToCancel() throws {
        let queue = OperationQueue()
        let adapter = ChainAdapter.custom { _, downstream in downstream.cancel() }
        let second = Increment()
        let handle = try queue.addChain([ResultBlockOperation<Int> { $0.finish(with: 3) }, second], adapter: adapter)
        XCTAssertTrue(try handle.waitToOutcome(timeout: testTimeout).isCancelled)
        XCTAssertEqual(second.executions.value, 0)
    }

    func testATypeMismatchFailsTheDownstreamWithBothTypesNamed() throws {
        let queue = OperationQueue()
        let text = TransformBlockOperation<String, String> { $0.finish(with: $0.input!) }
        text.name = "Text"
        let handle = try queue.addChain([ResultBlockOperation<Int> { $0.finish(with: 3) }, text])
        let outcome = try handle.waitToOutcome(timeout: testTimeout)
        guard case .failed(BatonError.inputTypeMismatch(let operation, let expected, let actual)) = outcome else {
            return XCTFail("expected inputTypeMismatch, got \(outcome)")
        }
        XCTAssertEqual([operation.name, expected, actual], ["Text", "String", "Int"])
        XCTAssertTrue(
            "\(BatonError.inputTypeMismatch(operation: operation, expected: expected, actual: actual))".contains("String"))
    }

    // MARK: - Foundation operations

    func testFoundationOperationsTakePartThroughDependenciesAndCancellation() throws {
        let queue = OperationQueue()
        let order = Locked<[String]>([])
        let block = BlockOperation { order.append("block") }
        let first = ResultBlockOperation<Int> {
            order.append("first")
            $0.finish(with: 1)
        }
        let last = ResultBlockOperation<Int> {
            order.append("last")
            $0.finish(with: 2)
        }
        let handle = try queue.addChain([first, block, last])
        XCTAssertEqual(try handle.waitToOutcome(timeout: testTimeout).output as? Int, 2)
        XCTAssertEqual(order.value, ["first", "block", "last"])
    }

    func testAFailureBeforeAFoundationOperationCancelsItAndStaysTheOutcome() throws {
        let queue = OperationQueue()
        let ran = Locked(0)
        let block = BlockOperation { ran.increment() }
        let last = Increment()
        let handle = try queue.addChain([ImmediateOperation(.failure(TestError(code: 5))), block, last])
        let outcome = try handle.waitToOutcome(timeout: testTimeout)
        XCTAssertEqual(outcome.error as? TestError, TestError(code: 5))
        XCTAssertTrue(block.isCancelled)
        XCTAssertEqual(ran.value, 0)
        XCTAssertEqual(last.executions.value, 0)
    }

    func testAChainEndingInAFoundationOperationKeepsItsCompletionBlock() throws {
        let queue = OperationQueue()
        let completion = Gate()
        let block = BlockOperation {}
        block.completionBlock = { completion.open() }
        let handle = try queue.addChain([ResultBlockOperation<Int> { $0.finish(with: 1) }, block])
        XCTAssertTrue(try handle.waitToOutcome(timeout: testTimeout).isSuccess)
        completion.wait()
    }

    // MARK: - Shapes

    func testAOneElementChainIsEnqueuedAsItIs() throws {
        let queue = OperationQueue()
        let (only, runs) = counted(5)
        let handle = try queue.addChain([only])
        XCTAssertEqual(try handle.waitToOutcome(timeout: testTimeout).output as? Int, 5)
        XCTAssertEqual(runs.value, 1)
        XCTAssertTrue(handle.unfinishedOperations.isEmpty)
    }

    func testAnEmptyChainIsAlreadyFinished() throws {
        let handle = try OperationQueue().addChain([])
        XCTAssertTrue(handle.isFinished)
        XCTAssertTrue(handle.outcome?.isSuccess == true)
        XCTAssertTrue(handle.unfinishedOperations.isEmpty)
    }

    // MARK: - Validation

    private func assertRejected(
        _ operations: [Operation], on queue: OperationQueue = OperationQueue(),
        file: StaticString = #filePath, line: UInt = #line,
        _ check: (BatonError) -> Bool
    ) {
        XCTAssertThrowsError(try queue.addChain(operations), file: file, line: line) { error in
            guard let error = error as? BatonError, check(error) else {
                return XCTFail("unexpected error \(error)", file: file, line: line)
            }
        }
        XCTAssertEqual(queue.operationCount, 0, "nothing may be enqueued", file: file, line: line)
    }

    func testTheSameOperationTwiceIsRejected() {
        let twice = Increment()
        twice.name = "twice"
        assertRejected([ResultBlockOperation<Int> { $0.finish(with: 0) }, twice, twice]) {
            if case .duplicateOperation("twice") = $0 { return true } else { return false }
        }
        XCTAssertTrue(twice.dependencies.isEmpty, "a rejected chain wires nothing")
    }

    func testAFinishedOperationIsRejected() {
        let done = ImmediateOperation(.success(1), name: "done")
        done.start()
        assertRejected([done, Increment()]) {
            if case .alreadyFinished("done") = $0 { return true } else { return false }
        }
    }

    func testAnExecutingOperationIsRejected() {
        let running = ManualOperation(name: "running")
        running.start()
        assertRejected([running, Increment()]) {
            if case .alreadyExecuting("running") = $0 { return true } else { return false }
        }
        running.finish()
    }

    func testAnOperationInAnotherChainIsRejected() throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let shared = Increment()
        shared.name = "shared"
        let first = try queue.addChain([ResultBlockOperation<Int> { $0.finish(with: 0) }, shared])
        let before = queue.operationCount
        XCTAssertThrowsError(try queue.addChain([shared, Increment()])) { error in
            guard case BatonError.alreadyEnqueued("shared") = error else { return XCTFail("unexpected \(error)") }
        }
        XCTAssertEqual(queue.operationCount, before)
        queue.isSuspended = false
        XCTAssertEqual(try first.waitToOutcome(timeout: testTimeout).output as? Int, 1)
        // Once its chain has finished, the operation is only refused for being finished.
        assertRejected([shared]) { if case .alreadyFinished = $0 { return true } else { return false } }
    }

    func testACycleThroughExistingDependenciesIsRejected() {
        let first = ResultBlockOperation<Int> { $0.finish(with: 0) }
        first.name = "first"
        let outside = BlockOperation {}
        outside.name = "outside"
        let last = Increment()
        last.name = "last"
        first.addDependency(outside)
        outside.addDependency(last)
        assertRejected([first, Increment(), last]) {
            if case .dependencyCycle(let path) = $0 {
                return path.map(\.name) == ["first", "last", "first"]
            } else {
                return false
            }
        }
    }

    func testAnExistingCycleIsRejected() {
        let a = BlockOperation {}
        a.name = "a"
        let b = BlockOperation {}
        b.name = "b"
        a.addDependency(b)
        b.addDependency(a)
        assertRejected([a, Increment()]) {
            if case .dependencyCycle(let path) = $0 { return path.map(\.name) == ["a", "b", "a"] } else { return false }
        }
    }

    func testExistingDependenciesOnEarlierOperationsAreAccepted() throws {
        let queue = OperationQueue()
        let first = ResultBlockOperation<Int> { $0.finish(with: 1) }
        let last = Increment()
        last.addDependency(first)
        XCTAssertEqual(try queue.addChain([first, Increment(), last]).waitToOutcome(timeout: testTimeout).output as? Int, 3)
    }

    // MARK: - Queues and scale

    func testManyChainsAtOnceOnDifferentQueues() throws {
        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        for queue in [OperationQueue(), serial] {
            let handles = try (0..<200).map { index in
                try queue.addChain(
                    Chain(ResultBlockOperation<Int> { $0.finish(with: index) })
                        .then(Increment())
                        .map { $0 * 2 })
            }
            for (index, handle) in handles.enumerated() {
                XCTAssertEqual(try handle.waitToOutcome(timeout: testTimeout).output, (index + 1) * 2)
            }
        }
    }

    func testChainsCreatedFromManyThreadsAtOnce() {
        let queue = OperationQueue()
        let results = Locked([Int?](repeating: nil, count: 500))
        DispatchQueue.concurrentPerform(iterations: 500) { index in
            do {
                let handle = try queue.addChain(Chain(ResultBlockOperation<Int> { $0.finish(with: index) }).then(Increment()))
                let value = try handle.waitToOutcome(timeout: testTimeout).get()
                results.mutate { $0[index] = value }
            } catch {
                XCTFail("chain \(index): \(error)")
            }
        }
        XCTAssertEqual(results.value, (0..<500).map { $0 + 1 })
    }

    func testAChainNeverHoldsMoreThanOneStageInTheQueue() throws {
        let queue = OperationQueue()
        let largest = Locked(0)
        var operations: [Operation] = [ResultBlockOperation<Int> { $0.finish(with: 0) }]
        for _ in 0..<200 {
            operations.append(
                TransformBlockOperation<Int, Int> { operation in
                    let count = queue.operationCount
                    largest.mutate { $0 = max($0, count) }
                    operation.finish(with: operation.input! + 1)
                })
        }
        let outcome = try queue.addChain(operations).waitToOutcome(timeout: testTimeout)
        XCTAssertEqual(outcome.output as? Int, 200)
        XCTAssertLessThanOrEqual(largest.value, 3, "an operation and its adapter (and the previous adapter finishing)")
    }

    func testAChainAddsNoDependencyEdgesAndLetsGoOfWhatFinished() throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        var operations: [Operation] = [ResultBlockOperation<Int> { $0.finish(with: 0) }]
        for _ in 0..<2_000 { operations.append(TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! + 1) }) }
        let handle = try queue.addChain(operations)
        XCTAssertEqual(handle.unfinishedOperations.count, 2_001)
        XCTAssertTrue(operations.allSatisfy { $0.dependencies.isEmpty })
        queue.isSuspended = false
        XCTAssertEqual(try handle.waitToOutcome(timeout: testTimeout).output as? Int, 2_000)
        XCTAssertTrue(handle.unfinishedOperations.isEmpty)
    }

    func testALongChainRunsAndIsReleasedWithoutRecursion() throws {
        // Foundation's own dependency chain overflows the stack near 40,000 when released.
        let count = 60_000
        let freed = Gate()
        var handle: ChainHandle<any Sendable>?
        try inScope {
            var operations: [Operation] = [TrackedOperation(freed: freed)]
            operations.reserveCapacity(count)
            for _ in 1..<count { operations.append(AsyncBlockOperation { $0.finish() }) }
            handle = try OperationQueue().addChain(operations)
        }
        XCTAssertTrue(try handle?.waitToOutcome(timeout: bulkTimeout).isSuccess == true)
        handle = nil
        freed.wait(timeout: bulkTimeout)
    }

    func testChainedOperationsAreFreedAfterTheChain() throws {
        let freed = Gate()
        let finished = Gate()
        try inScope {
            let tracked = TrackedOperation(freed: freed)
            let handle = try OperationQueue().addChain([ResultBlockOperation<Int> { $0.finish(with: 1) }, tracked, Increment()])
            handle.onFinish { _ in finished.open() }
        }
        finished.wait()
        freed.wait()
    }

    // MARK: - Async

    func testAwaitingTheHandle() async throws {
        let queue = OperationQueue()
        let handle = try queue.addChain([ResultBlockOperation<Int> { $0.finish(with: 1) }, Increment()])
        let value = try await handle.value
        XCTAssertEqual(value as? Int, 2)
        let again = await handle.awaitOutcome()
        XCTAssertEqual(again.output as? Int, 2)
    }

    func testCancellingTheTaskThatRunsAChainCancelsTheChain() async throws {
        let queue = OperationQueue()
        let running = ManualOperation(name: "running", finishesOnCancel: true)
        let after = Increment()
        let task = Task { try await Chain(running).then(after).run(on: queue) }
        await running.started.waitAsync()
        task.cancel()
        let result = await task.result
        XCTAssertThrowsError(try result.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        await running.cancelled.waitAsync()
        XCTAssertEqual(running.cancellations.value, 1)
        XCTAssertEqual(after.executions.value, 0)
    }

    func testOnFinishIsCalledOnceEvenWhenAddedLate() throws {
        let calls = Locked(0)
        let handle = try OperationQueue().addChain([ResultBlockOperation<Int> { $0.finish(with: 1) }])
        handle.onFinish { _ in calls.increment() }
        try handle.waitToOutcome(timeout: testTimeout)
        handle.onFinish { _ in calls.increment() }
        XCTAssertEqual(calls.value, 2)
    }

    func testAWaitThatRunsOutThrowsTimedOut() throws {
        let running = ManualOperation()
        let handle = try OperationQueue().addChain([running])
        XCTAssertThrowsError(try handle.waitToOutcome(timeout: 0.05)) { error in
            guard case BatonError.timedOut = error else { return XCTFail("unexpected \(error)") }
        }
        running.started.wait()
        running.finish(with: 1)
        XCTAssertEqual(try handle.waitToOutcome(timeout: testTimeout).output as? Int, 1)
    }
}
