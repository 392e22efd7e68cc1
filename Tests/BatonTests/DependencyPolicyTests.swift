import Foundation
import XCTest

@testable import Baton

final class DependencyPolicyTests: BatonTestCase {
    private enum Dependency: CaseIterable {
        case blockSucceeded, blockCancelled, batonSucceeded, batonCancelled, batonFailed

        func make() -> Operation {
            switch self {
            case .blockSucceeded: return BlockOperation {}
            case .blockCancelled:
                let operation = BlockOperation {}
                operation.cancel()
                return operation
            case .batonSucceeded: return ImmediateOperation(.success(1), name: "dependency")
            case .batonCancelled:
                let operation = ImmediateOperation(.success(1), name: "dependency")
                operation.cancel()
                return operation
            case .batonFailed: return ImmediateOperation(.failure(TestError(code: 21)), name: "dependency")
            }
        }
    }

    private enum Expected: Equatable {
        case runs, cancelled, failsNamingTheDependency
    }

    private func expected(_ policy: DependencyPolicy, _ dependency: Dependency) -> Expected {
        switch (policy, dependency) {
        case (.runRegardless, _), (_, .blockSucceeded), (_, .batonSucceeded): return .runs
        case (_, .blockCancelled), (_, .batonCancelled): return .cancelled
        case (.skipOnCancellation, .batonFailed): return .runs
        case (.skipOnFailureOrCancellation, .batonFailed): return .failsNamingTheDependency
        }
    }

    func testEveryPolicyAgainstEveryKindOfDependencyOnAQueue() {
        for policy in [DependencyPolicy.skipOnFailureOrCancellation, .skipOnCancellation, .runRegardless] {
            for kind in Dependency.allCases {
                let queue = OperationQueue()
                let dependency = kind.make()
                let operation = ImmediateOperation(.success(2))
                operation.dependencyPolicy = policy
                operation.addDependency(dependency)
                queue.addOperations([dependency, operation], waitUntilFinished: false)
                drain(queue)

                let context = "\(policy) with \(kind)"
                XCTAssertTrue(operation.isFinished, context)
                switch expected(policy, kind) {
                case .runs:
                    XCTAssertEqual(operation.executions.value, 1, context)
                    XCTAssertEqual(operation.output, 2, context)
                case .cancelled:
                    XCTAssertEqual(operation.executions.value, 0, context)
                    XCTAssertTrue(operation.isCancelled, context)
                    XCTAssertTrue(operation.outcome?.isCancelled == true, context)
                case .failsNamingTheDependency:
                    XCTAssertEqual(operation.executions.value, 0, context)
                    guard case .failed(BatonError.dependencyFailed(let name, let underlying))? = operation.outcome else {
                        XCTFail("\(context): got \(String(describing: operation.outcome))")
                        continue
                    }
                    XCTAssertTrue(name.operation === dependency, context)
                    XCTAssertEqual(name.name, "dependency", context)
                    XCTAssertEqual(underlying as? TestError, TestError(code: 21), context)
                }
            }
        }
    }

    /// Baton's final classes skip reading `dependencies` until one is added (stop 45): every way of
    /// adding one still rules the operation out when it failed, started by a queue, by Baton's launch,
    /// or as a group's child, and an operation of a subclass that lists its own is still read.
    func testAFinalClassSkipsReadingDependenciesOnlyUntilOneIsAdded() throws {
        XCTAssertTrue(AsyncBlockOperation.listsOnlyAddedDependencies)
        XCTAssertFalse(ImmediateOperation.listsOnlyAddedDependencies)
        XCTAssertFalse(GroupOperation.listsOnlyAddedDependencies)
        let ran = Locked(0)
        func make() -> AsyncBlockOperation {
            AsyncBlockOperation {
                ran.increment()
                $0.finish()
            }
        }
        let failed = ImmediateOperation(.failure(TestError(code: 23)), name: "dependency")
        _ = try? failed.runForOutcome(timeout: .seconds(testTimeout))

        let viaFoundation = make()
        (viaFoundation as Operation).addDependency(failed)
        let queue = OperationQueue()
        queue.addOperation(viaFoundation)
        drain(queue)

        let launched = make()
        launched.addDependency(failed)
        XCTAssertThrowsError(try launched.run(on: queue, timeout: .seconds(testTimeout)))

        let child = make()
        child.addDependency(failed)
        _ = try GroupOperation(operations: [child]).runForOutcome(timeout: .seconds(testTimeout))

        XCTAssertEqual(ran.value, 0)
        for operation in [viaFoundation, launched, child] {
            guard case .failed(BatonError.dependencyFailed)? = operation.outcome else {
                return XCTFail("got \(String(describing: operation.outcome))")
            }
        }
    }

    /// From the second review of stop 45: an operation in a (suspended) queue gets a cancelled
    /// dependency through `addDependency`; the queue resumes after Foundation has recorded the
    /// dependency, while the override is still running. The flag that lets a final class skip reading
    /// `dependencies` was set after Foundation's edge, so `start()` skipped the read and executed past
    /// the cancelled dependency (20 runs in 20). It is set before now.
    func testADependencyAddedBeforeStartIsNotIgnoredByTheFlag() {
        let dependency = TrapFinishedOperation {}
        dependency.cancel()
        dependency.start()
        XCTAssertTrue(dependency.isFinished)
        XCTAssertTrue(dependency.isCancelled)

        let executed = Locked(0)
        let operation = AsyncBlockOperation {
            executed.increment()
            $0.finish()
        }
        let queue = OperationQueue()
        queue.isSuspended = true
        queue.addOperation(operation)

        dependency.arm()
        let added = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            operation.addDependency(dependency)
            added.signal()
        }
        XCTAssertEqual(dependency.entered.wait(timeout: .now() + 10), .success)
        // Foundation has the edge now.
        XCTAssertTrue(operation.dependencies.contains { $0 === dependency })
        queue.isSuspended = false
        _ = eventually(timeout: 3) { operation.isFinished }
        dependency.release.signal()
        XCTAssertEqual(added.wait(timeout: .now() + 10), .success)
        drain(queue)
        XCTAssertTrue(operation.isFinished)
        XCTAssertEqual(
            executed.value, 0,
            "executed although its dependency (listed: \(operation.dependencies.contains { $0 === dependency })) was cancelled")
        XCTAssertTrue(operation.isCancelled, "outcome: \(String(describing: operation.outcome))")
    }

    /// A failed dependency rules the operation out however Baton learns of it: added through a
    /// reference typed as Foundation's `Operation`, added to a gated group child (held back until its
    /// dependencies finished), or listed by a subclass's `dependencies` override. (A review found the
    /// last one broken by a shortcut that trusted `addDependency` alone; the shortcut is gone.)
    func testAFailedDependencyRulesTheOperationOutHoweverItIsDeclared() throws {
        let failed = ImmediateOperation(.failure(TestError(code: 21)), name: "dependency")
        let plain = ImmediateOperation(.success(2))
        let foundation: Operation = plain
        foundation.addDependency(failed)
        let queue = OperationQueue()
        queue.addOperations([failed, plain], waitUntilFinished: false)
        drain(queue)
        XCTAssertEqual(plain.executions.value, 0)
        guard case .failed(BatonError.dependencyFailed)? = plain.outcome else {
            return XCTFail("got \(String(describing: plain.outcome))")
        }

        final class Listing: AsyncOperation, @unchecked Sendable {
            let listed: [Operation]
            let ran = Locked(false)
            init(_ listed: [Operation]) {
                self.listed = listed
                super.init()
            }
            override var dependencies: [Operation] { listed + super.dependencies }
            override func execute() {
                ran.mutate { $0 = true }
                finish()
            }
        }
        let listing = Listing([failed])
        finished(listing)
        XCTAssertFalse(listing.ran.value, "ran although its listed dependency failed")

        let sibling = ImmediateOperation(.failure(TestError(code: 22)), name: "sibling")
        let gated = ImmediateOperation(.success(3))
        try gated.addExclusivity(OperationCategory("x", in: ExclusivityScope("gated dependency")))
        gated.addDependency(sibling)
        // The group fails (its children did); it is run for what it does to the gated child.
        _ = try GroupOperation(operations: [gated, sibling]).runForOutcome(timeout: .seconds(testTimeout))
        XCTAssertEqual(gated.executions.value, 0)
        guard case .failed(BatonError.dependencyFailed)? = gated.outcome else {
            return XCTFail("got \(String(describing: gated.outcome))")
        }
    }

    func testAFailureIsReportedBeforeACancellationAmongSeveralDependencies() {
        let cancelled = BlockOperation {}
        cancelled.cancel()
        let failed = ImmediateOperation(.failure(TestError(code: 1)), name: "failed")
        let operation = ImmediateOperation(.success(0))
        operation.addDependency(cancelled)
        operation.addDependency(failed)
        let queue = OperationQueue()
        queue.addOperations([cancelled, failed, operation], waitUntilFinished: false)
        drain(queue)
        guard case .failed(BatonError.dependencyFailed("failed", _))? = operation.outcome else {
            return XCTFail("got \(String(describing: operation.outcome))")
        }
    }

    func testASkippedFailureNamesEveryLevel() {
        let root = ImmediateOperation(.failure(TestError(code: 3)), name: "root")
        let middle = ImmediateOperation(.success(0), name: "middle")
        let leaf = ImmediateOperation(.success(0), name: "leaf")
        middle.addDependency(root)
        leaf.addDependency(middle)
        let queue = OperationQueue()
        queue.addOperations([root, middle, leaf], waitUntilFinished: false)
        drain(queue)
        guard
            case .failed(BatonError.dependencyFailed("middle", BatonError.dependencyFailed("root", let underlying)))? =
                leaf.outcome
        else {
            return XCTFail("got \(String(describing: leaf.outcome))")
        }
        XCTAssertEqual(underlying as? TestError, TestError(code: 3))
        XCTAssertEqual(middle.executions.value + leaf.executions.value, 0)
    }
}

/// A Foundation operation whose `isFinished` can be made to stop, once, on the thread that reads it
/// next (to widen a window deterministically).
private final class TrapFinishedOperation: BlockOperation, @unchecked Sendable {
    private let lock = NSLock()
    private var armed = false
    let entered = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)

    func arm() {
        lock.lock()
        armed = true
        lock.unlock()
    }

    override var isFinished: Bool {
        lock.lock()
        let trap = armed
        armed = false
        lock.unlock()
        if trap {
            entered.signal()
            _ = release.wait(timeout: .now() + 10)
        }
        return super.isFinished
    }
}
