import Foundation
import XCTest

@testable import Baton

/// Errors and diagnostics name their operation by an `OperationReference`: a display name, and an
/// identity that leads back to the operation while it lives.
final class CulpritTests: BatonTestCase {
    func testTwoUnnamedFailingDependenciesAreToldApart() {
        let first = AsyncBlockOperation { $0.finish(throwing: TestError(code: 1)) }
        let second = AsyncBlockOperation { $0.finish(throwing: TestError(code: 2)) }
        let afterFirst = AsyncBlockOperation { $0.finish() }
        let afterSecond = AsyncBlockOperation { $0.finish() }
        afterFirst.addDependency(first)
        afterSecond.addDependency(second)
        let queue = OperationQueue()
        queue.addOperations([first, second, afterFirst, afterSecond], waitUntilFinished: true)

        guard case .failed(BatonError.dependencyFailed(let blamedByFirst, _))? = afterFirst.outcome,
            case .failed(BatonError.dependencyFailed(let blamedBySecond, _))? = afterSecond.outcome
        else {
            return XCTFail("\(String(describing: afterFirst.outcome)), \(String(describing: afterSecond.outcome))")
        }
        XCTAssertEqual(blamedByFirst.name, blamedBySecond.name, "both are unnamed AsyncBlockOperations")
        XCTAssertEqual(blamedByFirst.name, "AsyncBlockOperation")
        XCTAssertTrue(blamedByFirst.operation === first)
        XCTAssertTrue(blamedBySecond.operation === second)
        XCTAssertNotEqual(blamedByFirst, blamedBySecond)
        XCTAssertEqual(blamedByFirst, OperationReference(first))
        XCTAssertEqual(Set([blamedByFirst, blamedBySecond, OperationReference(first)]).count, 2, "usable as a key")
    }

    func testCulpritGivesTheOperationOfEveryCaseThatNamesOne() throws {
        let operation = ManualOperation(name: "job")
        let reference = OperationReference(operation)
        let cases: [BatonError] = [
            .dependencyFailed(dependency: reference, underlying: TestError(code: 1)),
            .missingInput(operation: reference), .missingOutput(operation: reference),
            .emptySequence(operation: reference), .alreadyEnqueued(operation: reference),
            .timedOut(operation: reference, after: .seconds(1)),
            .childrenFailed(group: reference, errors: []),
            .invalidArgument(operation: reference, reason: "why"),
            .wouldDeadlock(operation: reference, reason: "why"),
        ]
        for error in cases {
            XCTAssertTrue(error.culprit?.operation === operation, "\(error)")
            XCTAssertTrue("\(error)".contains("job"), "the description names it: \(error)")
        }
        XCTAssertNil(BatonError.dependencyCycle(path: [reference, reference]).culprit)
        XCTAssertNil(BatonError.treeNodeFailed(path: ["root[0]"], operation: nil, underlying: TestError(code: 1)).culprit)
    }

    func testReferencesToFreedOperationsStayDistinct() {
        // Freed objects' addresses are reused at once: identity alone would merge these.
        var references = Set<OperationReference>()
        for index in 0..<100 {
            inScope { _ = references.insert(OperationReference(ImmediateOperation(.success(index)))) }
        }
        XCTAssertEqual(references.count, 100)
    }

    func testATreeFailureNamesTheOperationThatFailed() {
        let failing = Locked<Operation?>(nil)
        let root = TreeNode<Int, Int>("item", items: { Array(0..<$0) }) { index in
            let operation = ResultBlockOperation<Int> { $0.finish(throwing: TestError(code: index)) }
            if index == 1 { failing.mutate { $0 = operation } }
            return operation
        }
        let tree = TreeOperation(root: root, input: 2)
        _ = try? tree.runToOutcome()
        guard case .failed(BatonError.treeFailed(let failures))? = tree.outcome else {
            return XCTFail("\(String(describing: tree.outcome))")
        }
        let second = failures.first { if case .treeNodeFailed(["item[1]"], _, _) = $0 { return true } else { return false } }
        XCTAssertTrue(second?.culprit?.operation === failing.value)
    }

    func testAReferenceDoesNotKeepItsOperationAlive() {
        var reference: OperationReference?
        weak var freed: Operation?
        inScope {
            let operation = ImmediateOperation(.success(1), name: "short-lived")
            freed = operation
            reference = OperationReference(operation)
            XCTAssertTrue(reference?.operation === operation)
        }
        XCTAssertNil(freed, "an error must not keep the operation it names alive (it is often stored in its outcome)")
        XCTAssertNil(reference?.operation)
        XCTAssertEqual(reference?.name, "short-lived")
    }

    func testAnOperationWhoseOwnErrorNamesItIsFreed() throws {
        weak var freed: Operation?
        try inScope {
            let operation = ResultBlockOperation<Int> { $0.finish() }   // no output: missingOutput names it
            freed = operation
            XCTAssertTrue(try operation.runToOutcome().error.flatMap { ($0 as? BatonError)?.culprit?.operation } === operation)
        }
        // The queue lets go of a finished operation on its own thread, just after the wait returns.
        XCTAssertTrue(eventually { freed == nil }, "an outcome that names its own operation makes no cycle")
    }

    func testTheCycleErrorNamesEveryOperationOnIt() {
        let first = ImmediateOperation(.success(1), name: "first")
        let second = ImmediateOperation(.success(2), name: "second")
        first.addDependency(second)
        XCTAssertThrowsError(try OperationQueue().addChain([first, second])) { error in
            guard case BatonError.dependencyCycle(let path)? = error as? BatonError else { return XCTFail("\(error)") }
            XCTAssertEqual(path.map(\.name), ["first", "second", "first"])
            XCTAssertTrue(path[0].operation === first && path[1].operation === second)
        }
        first.removeDependency(second)
    }

    func testADiagnosticCarriesTheSameReference() {
        let reports = Locked<[Diagnostic]>([])
        let original = Diagnostics.handler
        Diagnostics.handler = { diagnostic in reports.mutate { $0.append(diagnostic) } }
        defer { Diagnostics.handler = original }
        let operation = ImmediateOperation(.success(1))
        operation.start()
        operation.start()
        XCTAssertTrue(reports.value.contains { $0.kind == .startedTwice && $0.operation.operation === operation })
    }
}

/// `Outcome`'s case checks and its bridge to `Result`.
final class OutcomeTests: BatonTestCase {
    func testCaseChecks() {
        let outcomes: [Outcome<Int>] = [.succeeded(1), .failed(TestError(code: 1)), .cancelled]
        XCTAssertEqual(outcomes.map(\.isSuccess), [true, false, false])
        XCTAssertEqual(outcomes.map(\.isFailure), [false, true, false])
        XCTAssertEqual(outcomes.map(\.isCancelled), [false, false, true])
    }

    func testTheResultBridgeRoundTrips() {
        XCTAssertEqual(try Outcome<Int>.succeeded(3).result.get(), 3)
        XCTAssertThrowsError(try Outcome<Int>.cancelled.result.get()) { XCTAssertTrue($0 is CancellationError) }
        XCTAssertEqual(Outcome<Int>.failed(TestError(code: 4)).result.failureValue as? TestError, TestError(code: 4))
        for outcome: Outcome<Int> in [.succeeded(3), .failed(TestError(code: 4)), .cancelled] {
            XCTAssertEqual("\(Outcome(outcome.result))", "\(outcome)")
        }
        XCTAssertTrue(Outcome(Result<Int, any Error>.failure(CancellationError())).isCancelled)
    }

    func testABlockTransformTakesItsInputInTheInitializer() throws {
        XCTAssertEqual(try TransformBlockOperation(input: 21) { $0 * 2 }.run(timeout: .seconds(testTimeout)), 42)
        let block = TransformBlockOperation<Int, String>(input: 7) { $0.finish(with: "\($0.input!)") }
        XCTAssertEqual(try block.run(timeout: .seconds(testTimeout)), "7")
        let unset = TransformBlockOperation<Int, Int> { $0 + 1 }
        XCTAssertNil(unset.input, "without input: the chain or the caller provides it")
    }
}

extension Result {
    fileprivate var failureValue: Failure? {
        if case .failure(let failure) = self { return failure }
        return nil
    }
}
