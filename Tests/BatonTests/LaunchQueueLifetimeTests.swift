import Foundation
import XCTest

@testable import Baton

/// An operation a Baton entry point launched holds its queue until it finishes (a rerun hops to it, a
/// pending one's gate and deadlock check read it), and not a moment longer: a queue its owner dropped
/// runs what it was given and is then freed, whoever still holds the finished operations.
final class LaunchQueueLifetimeTests: BatonTestCase {
    private struct Weak<Object: AnyObject> {
        weak var object: Object?
        init(_ object: Object) { self.object = object }
    }

    /// A chain launched on a queue whose owner drops it (and its handle, which holds the queue for its
    /// waits) while the first step runs: both steps run, and the queue is freed once they have
    /// finished, although the test still holds the steps.
    func testADroppedQueueRunsItsChainAndIsThenFreed() throws {
        weak var weakQueue: OperationQueue?
        let running = Gate()
        let release = Gate()
        let first = ResultBlockOperation<Int> { operation in
            running.open()
            release.wait()
            operation.finish(with: 20)
        }
        let second = TransformBlockOperation<Int, Int> { $0 + 1 }
        do {
            let queue = OperationQueue()
            weakQueue = queue
            try queue.addChain([first, second])
        }
        running.wait()
        release.open()
        XCTAssertEqual(try second.waitToOutcome().output, 21)
        XCTAssertTrue(eventually { weakQueue == nil }, "the finished steps still hold their queue")
        XCTAssertTrue(first.isFinished && second.isFinished)
    }

    /// Operations run by a Baton entry point and kept by their owner after they finish do not keep the
    /// queue they ran on.
    func testFinishedOperationsDoNotHoldTheirQueue() throws {
        weak var weakQueue: OperationQueue?
        var kept: [AsyncBlockOperation] = []
        do {
            let queue = OperationQueue()
            weakQueue = queue
            for _ in 0..<20 {
                let operation = AsyncBlockOperation { $0.finish() }
                XCTAssertTrue(try operation.runForOutcome(on: queue, timeout: .seconds(testTimeout)).isSuccess)
                kept.append(operation)
            }
        }
        XCTAssertTrue(eventually { weakQueue == nil }, "a finished operation still holds its queue")
        XCTAssertEqual(kept.filter(\.isFinished).count, 20)
    }

    /// An operation cancelled before it started, in a suspended queue its owner drops, finishes (a
    /// cancelled operation leaves its queue once its queue runs again); released at once, the queue is
    /// freed with nothing pending.
    func testACancelledPendingOperationReleasesItsQueueWhenItFinishes() throws {
        weak var weakQueue: OperationQueue?
        let operation = ResultBlockOperation<Int> { $0.finish(with: 1) }
        do {
            let queue = OperationQueue()
            weakQueue = queue
            queue.isSuspended = true
            try queue.addChain([operation])
            operation.cancel()
            queue.isSuspended = false
        }
        XCTAssertTrue(try operation.waitToOutcome().isCancelled)
        XCTAssertTrue(eventually { weakQueue == nil }, "the cancelled operation still holds its queue")
    }

    /// Many queues dropped by their owner at once after a Baton entry point was given a short chain, a
    /// group and an operation run on them: the queue's last reference is then its operations', let go
    /// as each finishes, on whichever thread finishes it (a worker of that very queue, often). Every
    /// operation finishes and every queue is freed.
    func testQueuesLetGoByTheirLastOperationsAreFreed() throws {
        let trials = ProcessInfo.processInfo.environment["BATON_QUEUE_LIFETIME_TRIALS"].flatMap(Int.init) ?? 200
        let queues = Locked<[Int: Weak<OperationQueue>]>([:])
        var lasts: [Operation] = []
        for trial in 0..<trials {
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = trial % 3 == 0 ? 1 : 2
            queues.mutate { $0[trial] = Weak(queue) }
            let last = TransformBlockOperation<Int, Int> { $0 + 1 }
            try queue.addChain([ResultBlockOperation<Int> { $0.finish(with: trial) }, last])
            let group = GroupOperation(operations: (0..<3).map { _ in AsyncBlockOperation { $0.finish() } })
            try queue.addChain([group])
            lasts.append(last)
            lasts.append(group)
        }
        for operation in lasts { waitFinished(operation) }
        XCTAssertTrue(eventually { queues.value.values.allSatisfy { $0.object == nil } }, "a queue was never freed")
        XCTAssertEqual(lasts.filter(\.isCancelled).count, 0)
    }
}
