import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Waits made inside an operation that holds a category: refused exactly when they would wait for
/// themselves (the awaited operation, or a step still ahead of a chain, has yet to be granted a
/// category of limit 1 that the holder holds, and the holder cannot finish before the wait ends), and
/// left alone otherwise. Most of these shapes come from an adversarial review of the first version.
final class HolderWaitTests: BatonTestCase {
    private static func describe(_ attempt: () async throws -> Void) async -> String {
        do {
            try await attempt()
            return "ran"
        } catch BatonError.wouldDeadlock {
            return "refused"
        } catch {
            return "\(error)"
        }
    }

    private static func describeBlocking(_ attempt: () throws -> Void) -> String {
        do {
            try attempt()
            return "ran"
        } catch BatonError.wouldDeadlock {
            return "refused"
        } catch {
            return "\(error)"
        }
    }

    private func needing(_ category: OperationCategory, _ name: String) -> ImmediateOperation {
        let operation = ImmediateOperation(.success(1), name: name)
        try? operation.addExclusivity(category)
        return operation
    }

    // MARK: - Refused: they would wait for themselves

    /// A blocking wait on a composite's queue, for an operation that needs a category a composite above
    /// holds, is refused (the composite waits for the child this thread runs). It still is once the
    /// child has finished but is inside its `execute()`, where the walk up from the child itself stops
    /// at it (it no longer keeps its queue: a review's remark after stop 48): the rule is found through
    /// the queue the thread runs. A sequence is still running its steps then; a group's other children
    /// may all have finished, and the group with them: its wait is refused, or runs once the group has
    /// given the category back. Checked to fail without the queue's rule (both sequences ran).
    func testABlockingWaitAfterTheChildFinishedInsideACompositeThatHoldsTheCategory() throws {
        let shapes: [(String, mustRefuse: Bool, (AsyncOperation, AsyncOperation) -> AsyncOperation)] = [
            ("sequence", true, { SequenceOperation<Void>(operations: [$0, $1]) }),
            ("sequence in a group", true, { GroupOperation(operations: [SequenceOperation<Void>(operations: [$0, $1])]) }),
            ("group", false, { GroupOperation(operations: [$0, $1]) }),
            ("serial group", false, { GroupOperation(operations: [$0, $1], maxConcurrentOperationCount: 1) }),
        ]
        for (shape, mustRefuse, make) in shapes {
            let x = OperationCategory("x", in: ExclusivityScope("after finishing, \(shape)"))
            let inner = needing(x, "inner")
            let seen = Mutex("not run")
            let returned = DispatchSemaphore(value: 0)
            let first = AsyncBlockOperation { operation in
                operation.finish()
                let outcome = Self.describeBlocking { try inner.run(timeout: .seconds(testTimeout)) }
                seen.withLock { $0 = outcome }
                returned.signal()
            }
            let composite = make(first, AsyncBlockOperation { $0.finish() })
            try composite.addExclusivity(x)
            let outcome = try composite.runForOutcome(timeout: .seconds(testTimeout))
            guard case .succeeded = outcome else { return XCTFail("\(shape): \(outcome)") }
            XCTAssertEqual(returned.wait(timeout: .now() + testTimeout), .success, shape)
            let result = seen.withLock { $0 }
            XCTAssertTrue(mustRefuse ? result == "refused" : ["refused", "ran"].contains(result), "\(shape): \(result)")
        }
    }

    func testAwaitingAChainHandleForAStepThatNeedsTheHeldCategoryIsRefused() throws {
        let x = OperationCategory("x", in: ExclusivityScope("handle async"))
        let step = needing(x, "step")
        let holder = AsyncTaskOperation { () async -> String in
            await Self.describe {
                let handle = try OperationQueue().addChain(Chain(step))
                _ = try await handle.value
            }
        }
        try holder.addExclusivity(x)
        XCTAssertEqual(try holder.run(timeout: .seconds(testTimeout)), "refused")
    }

    func testBlockingOnAChainHandleForAStepThatNeedsTheHeldCategoryIsRefused() throws {
        let x = OperationCategory("x", in: ExclusivityScope("handle blocking"))
        let step = needing(x, "step")
        let error = try errorInsideHolder(of: x) {
            let handle = try OperationQueue().addChain(Chain(step))
            _ = try handle.wait(timeout: .seconds(testTimeout))
        }
        guard case .wouldDeadlock? = error as? BatonError else {
            return XCTFail("expected wouldDeadlock, got \(String(describing: error))")
        }
    }

    /// A blocking wait from synchronous code that a holder's `async` body calls: the thread holds
    /// nothing, the body's task does.
    func testABlockingWaitInsideAHoldersBodyIsRefused() throws {
        let x = OperationCategory("x", in: ExclusivityScope("blocking in body"))
        let inner = needing(x, "inner")
        @Sendable func blockingRun() -> String {
            Self.describeBlocking { try inner.run(timeout: .seconds(testTimeout)) }
        }
        let holder = AsyncTaskOperation { () async -> String in blockingRun() }
        try holder.addExclusivity(x)
        XCTAssertEqual(try holder.run(timeout: .seconds(testTimeout)), "refused")
    }

    /// A body that awaits its own operation: it finishes only when the body returns.
    func testABodyAwaitingItsOwnOperationIsRefused() throws {
        let me = Locked<AsyncTaskOperation<String>?>(nil)
        let operation = AsyncTaskOperation { () async -> String in
            guard let me = me.value else { return "no reference" }
            return await Self.describe { _ = try await me.value }
        }
        me.mutate { $0 = operation }
        XCTAssertEqual(try operation.run(timeout: .seconds(testTimeout)), "refused")
    }

    /// A child (claiming nothing) of a group that holds the category awaits an operation that needs it
    /// at the top: the group waits for the child, the child for the operation, the operation for the
    /// group. ProcedureKit's group deadlock, one level down.
    func testAnAwaitInAChildOfAHoldingGroupIsRefused() throws {
        let x = OperationCategory("x", in: ExclusivityScope("child of holder async"))
        let inner = needing(x, "inner")
        let child = AsyncTaskOperation { () async -> String in
            await Self.describe { _ = try await inner.run() }
        }
        let group = GroupOperation(operations: [child])
        try group.addExclusivity(x)
        try group.run(timeout: .seconds(testTimeout))
        XCTAssertEqual(child.output, "refused")
    }

    /// The same with a blocking wait in a plain child's `execute()`, and two levels down (a group in
    /// the holding group).
    func testABlockingWaitInAChildOfAHoldingGroupIsRefusedAtAnyDepth() throws {
        let x = OperationCategory("x", in: ExclusivityScope("child of holder blocking"))
        let seen = Locked<[String]>([])
        func child() -> AsyncBlockOperation {
            AsyncBlockOperation { operation in
                let inner = ImmediateOperation(.success(1), name: "inner")
                try? inner.addExclusivity(x)
                let result = Self.describeBlocking { try inner.run(timeout: .seconds(testTimeout)) }
                seen.mutate { $0.append(result) }
                operation.finish()
            }
        }
        let group = GroupOperation(operations: [child(), GroupOperation(operations: [child()])])
        try group.addExclusivity(x)
        try group.run(timeout: .seconds(testTimeout))
        XCTAssertEqual(seen.value, ["refused", "refused"])
    }

    // MARK: - Left alone: they do not wait for themselves

    /// The awaited operation claimed the category but has finished: its outcome is returned.
    func testWaitingForAFinishedClaimantReturnsItsOutcome() throws {
        let x = OperationCategory("x", in: ExclusivityScope("finished claimant"))
        let earlier = ImmediateOperation(.success(7), name: "earlier")
        try earlier.addExclusivity(x)
        XCTAssertEqual(try earlier.run(timeout: .seconds(testTimeout)), 7)
        let holder = AsyncTaskOperation { () async -> [String] in
            [
                await Self.describe {
                    let value = try await earlier.value
                    XCTAssertEqual(value, 7)
                },
                await Self.describe {
                    let value = try await earlier.run()
                    XCTAssertEqual(value, 7)
                },
            ]
        }
        try holder.addExclusivity(x)
        XCTAssertEqual(try holder.run(timeout: .seconds(testTimeout)), ["ran", "ran"])

        let error = try errorInsideHolder(of: x) { XCTAssertEqual(try earlier.wait(timeout: .seconds(testTimeout)), 7) }
        XCTAssertNil(error)
    }

    /// A limit of 2: the holder takes one place, the awaited operation the other.
    func testAnAwaitForACategoryWithRoomToSpareRuns() throws {
        let scope = ExclusivityScope("room to spare")
        try scope.setLimit(2, for: "x")
        let x = OperationCategory("x", in: scope)
        let inner = needing(x, "inner")
        let holder = AsyncTaskOperation { () async -> String in
            await Self.describe { _ = try await inner.run() }
        }
        try holder.addExclusivity(x)
        XCTAssertEqual(try holder.run(timeout: .seconds(testTimeout)), "ran")
    }

    /// A child of a holding group awaits a sibling that claims the category under the group (the
    /// group lends it): the sibling contends with the group's other children, not with the group, and
    /// none of them holds it, so it runs.
    func testAChildAwaitingASiblingThatClaimsTheLentCategoryWaitsForIt() throws {
        let x = OperationCategory("x", in: ExclusivityScope("sibling under holder"))
        let sibling = needing(x, "sibling")
        let child = AsyncTaskOperation { () async -> String in
            await Self.describe { _ = try await sibling.value }
        }
        let group = GroupOperation(operations: [child, sibling])
        try group.addExclusivity(x)
        try group.run(timeout: .seconds(testTimeout))
        XCTAssertEqual(child.output, "ran")
        XCTAssertEqual(sibling.output, 1)
    }

    /// A task the body starts and does not wait for: the holder finishes without it, then the
    /// operation it awaits gets the category and runs.
    func testATaskTheBodyStartsAndDoesNotAwaitMayAwaitTheCategory() throws {
        let x = OperationCategory("x", in: ExclusivityScope("unawaited task"))
        let inner = needing(x, "inner")
        let result = Locked<String?>(nil)
        let holder = AsyncTaskOperation { () async -> Void in
            Task {
                let text = await Self.describe { _ = try await inner.run() }
                result.mutate { $0 = text }
            }
            // Returns once the task is either refused or waiting for the category.
            await withCheckedContinuation { continuation in
                DispatchQueue.global().async {
                    _ = eventually { result.value != nil || inner.gateWaitDescription() != nil }
                    continuation.resume()
                }
            }
        }
        try holder.addExclusivity(x)
        try holder.run(timeout: .seconds(testTimeout))
        XCTAssertTrue(eventually { result.value != nil })
        XCTAssertEqual(result.value, "ran")
    }
}
