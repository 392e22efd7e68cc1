import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Issue #22: an adapter that is an operation runs on the chain's queue between its neighbours:
/// visible in `queue.operations`, with the chain's quality of service, cancellable, and recorded as a
/// node of its own; the chain stays one stage at a time.
final class AdapterOperationTests: BatonTestCase {
    /// Waits for the test before deciding, and says what it saw.
    final class Gated: AdapterOperation, @unchecked Sendable {
        let started = Gate()
        let release = Gate()
        let decision: ChainAdapter.Decision
        let seenQueue = Locked<String?>(nil)

        init(_ decision: ChainAdapter.Decision = .forward) {
            self.decision = decision
            super.init()
            name = "gated adapter"
        }

        override func execute() {
            seenQueue.mutate { $0 = OperationQueue.current?.name }
            started.open()
            release.wait()
            finish(with: decision)
        }
    }

    private func echo() -> TransformBlockOperation<Int, String> {
        TransformBlockOperation<Int, String> { "got \($0)" }
    }

    func testAnAdapterOperationRunsOnTheQueueAndIsVisibleThere() throws {
        let queue = OperationQueue()
        queue.name = "chain queue"
        let adapter = Gated()
        let first = ResultBlockOperation<Int> { $0.finish(with: 7) }
        first.qualityOfService = .utility
        let next = echo()
        let handle = try queue.addChain([first, next], adapter: .operation { adapter })
        adapter.started.wait()
        XCTAssertTrue(queue.operations.contains { $0 === adapter }, "the adapter is not in the queue")
        XCTAssertFalse(queue.operations.contains { $0 === next }, "the next operation was enqueued with the adapter")
        XCTAssertEqual(adapter.seenQueue.value, "chain queue")
        XCTAssertEqual(adapter.qualityOfService, .utility)
        XCTAssertTrue(adapter.upstream === first)
        XCTAssertTrue(adapter.downstream === next)
        XCTAssertEqual(String(describing: adapter.upstreamOutcome), "succeeded(7)")
        XCTAssertTrue(handle.unfinishedOperations.contains { $0 === next })
        adapter.release.open()
        XCTAssertEqual(String(describing: try handle.waitToOutcome()), "succeeded(got 7)")
        XCTAssertNil(adapter.upstream, "the adapter kept its neighbours after it finished")
        XCTAssertNil(adapter.downstream)
    }

    func testABlockAdapterOperationRecoversAFailure() throws {
        let adapter = ChainAdapter.operation {
            AdapterBlockOperation { _, outcome, _ in outcome.isFailure ? .recover(with: 0) : .forward }
        }
        let failing = ResultBlockOperation<Int> { $0.finish(throwing: TestError(code: 1)) }
        let outcome = try OperationQueue().addChain(Chain(failing).then(echo()), adapter: adapter).waitToOutcome()
        XCTAssertEqual(String(describing: outcome), "succeeded(got 0)")
    }

    func testCancellingTheAdapterOperationCancelsTheDownstreamOperation() throws {
        let adapter = Gated()
        let next = echo()
        let handle = try OperationQueue().addChain(
            [ResultBlockOperation<Int> { $0.finish(with: 1) }, next], adapter: .operation { adapter })
        adapter.started.wait()
        adapter.cancel()
        adapter.release.open()
        XCTAssertTrue(try handle.waitToOutcome().isCancelled)
        XCTAssertTrue(next.outcome?.isCancelled == true)
    }

    func testCancellingTheChainReachesTheAdapterAndTheDownstreamOperation() throws {
        let adapter = Gated()
        let next = echo()
        let handle = try OperationQueue().addChain(
            [ResultBlockOperation<Int> { $0.finish(with: 1) }, next], adapter: .operation { adapter })
        adapter.started.wait()
        handle.cancel()
        XCTAssertTrue(adapter.isCancelled)
        adapter.release.open()
        XCTAssertTrue(try handle.waitToOutcome().isCancelled)
        XCTAssertTrue(next.outcome?.isCancelled == true)
    }

    func testAFailingOrUndecidedAdapterOperationFailsTheChainNamingIt() throws {
        let failing = ChainAdapter.operation { AdapterBlockOperation { _, _, _ in throw TestError(code: 2) } }
        let failed = try OperationQueue().addChain(
            [ResultBlockOperation<Int> { $0.finish(with: 1) }, echo()], adapter: failing
        ).waitToOutcome()
        XCTAssertEqual(failed.error as? TestError, TestError(code: 2))

        // An adapter operation that finishes without a decision neither recovers nor forwards.
        final class Undecided: AdapterOperation, @unchecked Sendable {
            override func execute() { finish() }
        }
        let undecided = try OperationQueue().addChain(
            [ResultBlockOperation<Int> { $0.finish(with: 1) }, echo()], adapter: .operation { Undecided() }
        ).waitToOutcome()
        guard case .failed(BatonError.missingOutput("Undecided")) = undecided else { return XCTFail("\(undecided)") }
    }

    func testAnAdapterOperationGivenTwiceFailsTheChain() throws {
        let shared = AdapterBlockOperation { _, _, _ in .forward }
        shared.name = "shared"
        let handle = try OperationQueue().addChain(
            [
                ResultBlockOperation<Int> { $0.finish(with: 1) }, TransformBlockOperation<Int, Int> { $0 + 1 },
                TransformBlockOperation<Int, Int> { $0 + 1 },
            ], adapter: .operation { shared })
        guard case .failed(BatonError.alreadyFinished("shared")) = try handle.waitToOutcome() else {
            return XCTFail("\(String(describing: handle.outcome))")
        }
    }

    func testAnAdapterOperationIsARecordedNodeOfItsOwn() throws {
        let recorder = FlightRecorder()
        let operations: [Operation] = [ImmediateOperation(.success(1), name: "a"), echo()]
        recorder.attach(to: operations)
        let adapter = ChainAdapter.operation {
            let operation = AdapterBlockOperation { _, _, _ in .forward }
            operation.name = "check"
            return operation
        }
        try OperationQueue().addChain(operations, adapter: adapter).wait(timeout: .seconds(testTimeout))
        let records = recorder.records
        let chain = try XCTUnwrap(records.first { $0.kind == .chain })
        let stages = records.filter { $0.parentID == chain.id }.sorted { $0.position! < $1.position! }
        XCTAssertEqual(
            stages.map(\.typeName), ["ImmediateOperation", "AdapterBlockOperation", "TransformBlockOperation<Int, String>"])
        XCTAssertEqual(stages[1].name, "check")
        XCTAssertEqual(stages.map(\.predecessorID), [nil, stages[0].id, stages[1].id])
        XCTAssertTrue(stages.allSatisfy { $0.status == .succeeded })
        XCTAssertTrue(recorder.export(.graphviz).contains("check"))
    }

    func testASequenceRefusesAdapterOperations() throws {
        let sequence = SequenceOperation<String>(
            operations: [ResultBlockOperation<Int> { $0.finish(with: 1) }, echo()],
            adapter: .operation { AdapterBlockOperation { _, _, _ in .forward } })
        sequence.name = "steps"
        guard case .failed(BatonError.invalidArgument("steps", _)) = try sequence.runToOutcome() else {
            return XCTFail("\(String(describing: sequence.outcome))")
        }
    }

    func testALongCancelledChainWithAdapterOperationsDoesNotRecurse() throws {
        let operations: [Operation] = (0..<20_000).map { _ in AsyncBlockOperation { $0.finish() } }
        operations[0].cancel()
        let handle = try OperationQueue().addChain(
            operations, adapter: .operation { AdapterBlockOperation { _, _, _ in .forward } })
        XCTAssertTrue(try handle.waitToOutcome(timeout: bulkTimeout).isCancelled)
    }
}
