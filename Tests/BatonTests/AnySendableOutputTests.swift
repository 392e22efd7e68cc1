import Foundation
import XCTest

@testable import Baton

/// An output whose type is `any Sendable` comes back as the value itself, never wrapped in an
/// `Optional`, wherever it is stored or handed on (issue #22's bug). `String(describing:)` and `==`
/// on the existential see the wrapping, where `as? Int` looks through it.
final class AnySendableOutputTests: BatonTestCase {
    private func describe(_ value: (any Sendable)?) -> String { value.map { String(describing: $0) } ?? "nil" }

    func testARunAndTheOutcomeHoldTheValueItself() throws {
        let operation = ResultBlockOperation<any Sendable> { $0.finish(with: 5) }
        let value = try operation.run(on: OperationQueue(), timeout: .seconds(Int(testTimeout)))
        XCTAssertEqual(String(describing: value), "5")
        XCTAssertEqual(String(describing: operation.outcome!), "succeeded(5)")
        XCTAssertEqual(describe(operation.output), "5")
    }

    func testARetryHoldsTheValueItself() throws {
        let retry = RetryOperation<any Sendable>(maximumAttempts: 2) { _ in ResultBlockOperation { $0.finish(with: 5) } }
        let value = try retry.run(on: OperationQueue(), timeout: .seconds(Int(testTimeout)))
        XCTAssertEqual(String(describing: value), "5")
        XCTAssertEqual(String(describing: retry.outcome!), "succeeded(5)")
    }

    func testASequenceAndAGroupHoldTheValuesThemselves() throws {
        let sequence = SequenceOperation<any Sendable>(operations: [
            ResultBlockOperation<any Sendable> { $0.finish(with: "first") },
            TransformBlockOperation<any Sendable, any Sendable> { operation in
                operation.finish(with: "saw \(String(describing: operation.input!))")
            },
        ])
        let value = try sequence.run(on: OperationQueue(), timeout: .seconds(Int(testTimeout)))
        XCTAssertEqual(String(describing: value), "saw first")

        let group = ResultGroupOperation<any Sendable>(operations: [
            ResultBlockOperation { $0.finish(with: 1) }, ResultBlockOperation { $0.finish(with: "two") },
        ])
        let outputs = try group.run(on: OperationQueue(), timeout: .seconds(Int(testTimeout)))
        XCTAssertEqual(String(describing: outputs), String(describing: [1 as any Sendable, "two" as any Sendable]))
    }

    func testAChainHandsTheValueItselfToTheNextStepAndItsHandle() throws {
        let seen = Locked<String>("")
        let handle = try OperationQueue().addChain([
            ResultBlockOperation<any Sendable> { $0.finish(with: 5) },
            TransformBlockOperation<any Sendable, any Sendable> { operation in
                seen.mutate { $0 = String(describing: operation.input!) }
                operation.finish(with: operation.input!)
            },
        ])
        let value = try handle.wait(timeout: .seconds(Int(testTimeout)))
        XCTAssertEqual(seen.value, "5")
        XCTAssertEqual(String(describing: value), "5")
    }

    func testATreeHandsTheValueItselfToItsChildren() throws {
        let seen = Locked<[String]>([])
        let root = TreeNode<any Sendable, any Sendable>("root") { input in
            ResultBlockOperation<any Sendable> { $0.finish(with: "from \(String(describing: input))") }
        }
        let child = TreeNode<any Sendable, any Sendable>("child") { input in
            seen.mutate { $0.append(String(describing: input)) }
            return ResultBlockOperation<any Sendable> { $0.finish(with: input) }
        }
        root.addChild(child)
        let tree = TreeOperation(root: root, input: "seed" as any Sendable)
        XCTAssertTrue(try tree.runToOutcome().isSuccess)
        XCTAssertEqual(seen.value, ["from seed"])
    }

    func testAnOptionalOutputStaysOneOptional() throws {
        let none = ResultBlockOperation<Int?> { $0.finish(with: nil) }
        XCTAssertEqual(String(describing: try none.run(on: OperationQueue(), timeout: .seconds(Int(testTimeout)))), "nil")
        let some = ResultBlockOperation<Int?> { $0.finish(with: 3) }
        XCTAssertEqual(String(describing: try some.run(on: OperationQueue(), timeout: .seconds(Int(testTimeout)))), "Optional(3)")
        let transform = TransformBlockOperation<any Sendable, String> { operation in
            operation.finish(with: String(describing: operation.input!))
        }
        transform.input = 7
        XCTAssertEqual(String(describing: transform.input), "Optional(7)", "the property itself is optional, once")
        XCTAssertEqual(try transform.run(on: OperationQueue(), timeout: .seconds(Int(testTimeout))), "7")
    }

    func testAMixedSequenceTypedAnySendableEndsAsTheSameChainDoes() throws {
        func steps() -> [Operation] {
            [ResultBlockOperation<Int> { $0.finish(with: 5) }, BlockOperation {}]
        }
        let chain = try OperationQueue().addChain(steps()).wait(timeout: .seconds(Int(testTimeout)))
        let sequence = try SequenceOperation<any Sendable>(operations: steps()).run(
            on: OperationQueue(), timeout: .seconds(Int(testTimeout)))
        XCTAssertEqual(String(describing: chain), "()")
        XCTAssertEqual(String(describing: sequence), "()")
        // With an output last, that output; typed otherwise, a missing output is still an error.
        let ending = SequenceOperation<any Sendable>(operations: [
            BlockOperation {}, ResultBlockOperation<String> { $0.finish(with: "x") },
        ])
        XCTAssertEqual(String(describing: try ending.run(on: OperationQueue(), timeout: .seconds(Int(testTimeout)))), "x")
        let typed = SequenceOperation<Int>(operations: steps())
        guard case .failed(let error) = try typed.runToOutcome() else {
            return XCTFail("a typed sequence without an output succeeded")
        }
        guard case .outputTypeMismatch = error as? BatonError else { return XCTFail("\(error)") }
    }
}
