import Foundation
import XCTest

@testable import Baton

/// A chain hands a step's output to the next step's input: a value of exactly the input type is stored
/// as it is (no cast), any other value goes through Swift's cast. These pin that both ways give what
/// the cast alone gave, for every kind of input type.
final class InputHandOnTests: BatonTestCase {
    private class Animal: @unchecked Sendable {
        var sound: String { "..." }
    }

    private final class Dog: Animal, @unchecked Sendable {
        override var sound: String { "woof" }
    }

    private protocol Named: Sendable {
        var name: String { get }
    }

    private struct Cat: Named {
        let name: String
    }

    /// Runs a step that finishes with `output`, then `second`, as a chain; returns `second`'s outcome.
    private func handOn<Output: Sendable, Input: Sendable, Result: Sendable>(
        _ output: Output, to second: TransformBlockOperation<Input, Result>
    ) throws -> Outcome<Result> {
        let queue = OperationQueue()
        let first = ResultBlockOperation<Output> { $0.finish(with: output) }
        try queue.addChain([first, second]).waitToOutcome()
        return try second.waitToOutcome()
    }

    func testAValueOfExactlyTheInputTypeArrivesWhole() throws {
        let outcome = try handOn(41, to: TransformBlockOperation<Int, Int> { $0 + 1 })
        XCTAssertEqual(outcome.output, 42)
        let text = try handOn("baton", to: TransformBlockOperation<String, Int> { $0.count })
        XCTAssertEqual(text.output, 5)
    }

    func testASubclassInstanceArrivesAsItsBaseClass() throws {
        let outcome = try handOn(Dog(), to: TransformBlockOperation<Animal, String> { $0.sound })
        XCTAssertEqual(outcome.output, "woof")
    }

    func testAValueArrivesAsAnExistentialItConformsTo() throws {
        let named = try handOn(Cat(name: "Tom"), to: TransformBlockOperation<any Named, String> { $0.name })
        XCTAssertEqual(named.output, "Tom")
        let any = try handOn(7, to: TransformBlockOperation<any Sendable, String> { "\($0)" })
        XCTAssertEqual(any.output, "7")
    }

    func testAValueArrivesAsAnOptionalOfItsType() throws {
        let outcome = try handOn(5, to: TransformBlockOperation<Int?, String> { String(describing: $0) })
        XCTAssertEqual(outcome.output, "Optional(5)")
    }

    func testAValueOfAnotherTypeFailsTheStepNamingBothTypes() throws {
        let outcome = try handOn(Cat(name: "Tom"), to: TransformBlockOperation<Animal, String> { $0.sound })
        guard case .failed(BatonError.inputTypeMismatch(_, let expected, let actual)) = outcome else {
            return XCTFail("expected inputTypeMismatch, got \(outcome)")
        }
        XCTAssertTrue(expected.hasSuffix("Animal"), expected)
        XCTAssertTrue(actual.hasSuffix("Cat"), actual)
    }

    /// An input given at creation, to either initialiser, is the input; none given leaves it unset.
    func testAnInputGivenAtCreationIsStored() throws {
        let given = TransformBlockOperation<Int, Int>(input: 20) { $0 * 2 }
        XCTAssertEqual(given.input, 20)
        let queue = OperationQueue()
        queue.addOperation(given)
        XCTAssertEqual(try given.waitToOutcome().output, 40)
        let body = TransformBlockOperation<Int, Int>(input: 3) { $0.finish(with: $0.input! + 1) }
        XCTAssertEqual(body.input, 3)
        XCTAssertNil(TransformBlockOperation<Int, Int> { $0 + 1 }.input)
        let optional = TransformBlockOperation<Int?, Int>(input: .some(nil)) { $0 ?? -1 }
        XCTAssertEqual(optional.input, .some(nil))
    }
}
