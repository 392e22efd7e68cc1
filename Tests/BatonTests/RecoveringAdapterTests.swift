import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Issue #22: a recovering adapter sees the upstream's outcome, failures and cancellations included,
/// and decides: forward, recover (an input, and the downstream runs), run, fail or cancel.
final class RecoveringAdapterTests: BatonTestCase {
    private func echo(_ name: String) -> TransformBlockOperation<String, String> {
        let operation = TransformBlockOperation<String, String> { "echo \($0)" }
        operation.name = name
        return operation
    }

    private func failing(_ code: Int) -> ResultBlockOperation<String> {
        ResultBlockOperation { $0.finish(throwing: TestError(code: code)) }
    }

    func testAFailureIsRecoveredAndTheChainGoesOn() throws {
        let seen = Locked<[String]>([])
        let adapter = ChainAdapter.recovering { _, outcome, _ in
            seen.append(String(describing: outcome))
            guard case .failed = outcome else { return .forward }
            return .recover(with: "cached")
        }
        let handle = try OperationQueue().addChain([failing(1), echo("first"), echo("second")], adapter: adapter)
        let outcome = try handle.waitToOutcome()
        XCTAssertEqual(String(describing: outcome), "succeeded(echo echo cached)")
        XCTAssertEqual(seen.value, ["failed(TestError(code: 1))", "succeeded(echo cached)"])
    }

    func testACancellationIsRecovered() throws {
        let first = ResultBlockOperation<String> { $0.finish(with: "unused") }
        first.cancel()
        let adapter = ChainAdapter.recovering { _, outcome, _ in outcome.isCancelled ? .recover(with: "again") : .forward }
        let outcome = try Chain(first).then(echo("next")).runForOutcome(timeout: .seconds(testTimeout))
        XCTAssertTrue(outcome.isCancelled, "the default adapter forwards the cancellation")
        let second = ResultBlockOperation<String> { $0.finish(with: "unused") }
        second.cancel()
        let recovered = try OperationQueue().addChain(Chain(second).then(echo("next")), adapter: adapter).waitToOutcome()
        XCTAssertEqual(String(describing: recovered), "succeeded(echo again)")
    }

    func testForwardingIsTheDefaultAdaptersBehaviour() throws {
        let adapter = ChainAdapter.recovering { _, _, _ in .forward }
        let failed = try OperationQueue().addChain([failing(2), echo("next")], adapter: adapter).waitToOutcome()
        XCTAssertEqual(failed.error as? TestError, TestError(code: 2))
        let succeeded = try OperationQueue().addChain(
            [ResultBlockOperation<String> { $0.finish(with: "x") }, echo("next")], adapter: adapter
        ).waitToOutcome()
        XCTAssertEqual(String(describing: succeeded), "succeeded(echo x)")
    }

    func testTheAdapterFailsOrCancelsTheDownstreamOperation() throws {
        let next = echo("next")
        let failingAdapter = ChainAdapter.recovering { _, _, _ in .fail(TestError(code: 3)) }
        let failed = try OperationQueue().addChain(
            [ResultBlockOperation<String> { $0.finish(with: "fine") }, next], adapter: failingAdapter
        ).waitToOutcome()
        XCTAssertEqual(failed.error as? TestError, TestError(code: 3))
        XCTAssertEqual(next.outcome?.error as? TestError, TestError(code: 3))

        let throwing = ChainAdapter.recovering { _, _, _ in throw TestError(code: 4) }
        let thrown = try OperationQueue().addChain(
            [ResultBlockOperation<String> { $0.finish(with: "fine") }, echo("next")], adapter: throwing
        ).waitToOutcome()
        XCTAssertEqual(thrown.error as? TestError, TestError(code: 4))

        let cancelling = ChainAdapter.recovering { _, _, _ in .cancel }
        let cancelled = try OperationQueue().addChain(
            [ResultBlockOperation<String> { $0.finish(with: "fine") }, echo("next")], adapter: cancelling
        ).waitToOutcome()
        XCTAssertTrue(cancelled.isCancelled)
    }

    func testRunLetsTheDownstreamRunWithTheInputItHas() throws {
        let preset = TransformBlockOperation<String, String>(input: "preset") { "echo \($0)" }
        let outcome = try OperationQueue().addChain(
            [failing(5), preset], adapter: .recovering { _, _, _ in .run }
        ).waitToOutcome()
        XCTAssertEqual(String(describing: outcome), "succeeded(echo preset)")
        let ran = Locked(false)
        let plain = try OperationQueue().addChain(
            [failing(5), BlockOperation { ran.mutate { $0 = true } }], adapter: .recovering { _, _, _ in .run }
        ).waitToOutcome()
        XCTAssertTrue(plain.isSuccess)
        XCTAssertTrue(ran.value)
    }

    func testADecisionThatCannotBeCarriedOutNamesTheOperation() throws {
        // Recovering with a value for an operation that takes no input.
        let plain = AsyncBlockOperation { $0.finish() }
        plain.name = "plain"
        let recovered = try OperationQueue().addChain(
            [failing(6), plain], adapter: .recovering { _, _, _ in .recover(with: 1) }
        ).waitToOutcome()
        guard case .failed(BatonError.invalidArgument("plain", _)) = recovered else { return XCTFail("\(recovered)") }
        // Letting an operation that needs an input run without one.
        let needy = echo("needy")
        let ran = try OperationQueue().addChain([failing(7), needy], adapter: .recovering { _, _, _ in .run })
            .waitToOutcome()
        guard case .failed(BatonError.missingInput("needy")) = ran else { return XCTFail("\(ran)") }
        // Recovering with a value of the wrong type.
        let typed = echo("typed")
        let mismatched = try OperationQueue().addChain(
            [failing(8), typed], adapter: .recovering { _, _, _ in .recover(with: 42) }
        ).waitToOutcome()
        guard case .failed(BatonError.inputTypeMismatch("typed", _, _)) = mismatched else {
            return XCTFail("\(mismatched)")
        }
    }

    func testASequenceWithARecoveringAdapterGoesOnAfterAFailure() throws {
        let sequence = SequenceOperation<String>(
            operations: [failing(9), echo("a"), echo("b")],
            adapter: .recovering { _, outcome, _ in outcome.isFailure ? .recover(with: "recovered") : .forward })
        XCTAssertEqual(String(describing: try sequence.runToOutcome()), "succeeded(echo echo recovered)")

        let forwarded = SequenceOperation<String>(
            operations: [failing(10), echo("a"), echo("b")], adapter: .recovering { _, _, _ in .forward })
        XCTAssertEqual(try forwarded.runToOutcome().error as? TestError, TestError(code: 10))

        let lastFails = SequenceOperation<String>(
            operations: [
                ResultBlockOperation<String> { $0.finish(with: "x") },
                TransformBlockOperation<String, String> { _ in
                    throw TestError(code: 11)
                },
            ], adapter: .recovering { _, _, _ in .forward })
        XCTAssertEqual(try lastFails.runToOutcome().error as? TestError, TestError(code: 11))
    }
}
