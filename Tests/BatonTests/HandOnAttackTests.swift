import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Attacks on what #26's second round changed: a group that finds duplicates by a refused claim and
/// its children by position, outcomes kept behind one shared reference and read by many threads as
/// they are decided, and inputs handed on through a method instead of a protocol cast, with outputs
/// typed `Optional`, `Void` and `any Sendable`.
final class HandOnAttackTests: BatonTestCase {
    /// One child handed at once, by five threads released together, to a running group (four times)
    /// and to a second group (once): exactly one hand-over takes it, every other is refused with a
    /// typed error, and it runs once. For a Baton child and for a Foundation one.
    func testOneChildAddedFromManyThreadsToARunningGroupAndAnotherIsTakenOnce() throws {
        let queue = OperationQueue()
        for trial in 0..<300 {
            let runs = Locked(0)
            let child: Operation =
                trial.isMultiple(of: 2)
                ? AsyncBlockOperation { operation in
                    runs.increment()
                    operation.finish()
                } : BlockOperation { runs.increment() }
            let release = Gate()
            let holding = Gate()
            let holder = AsyncBlockOperation { operation in
                holding.open()
                release.wait()
                operation.finish()
            }
            let running = GroupOperation(operations: [holder])
            let other = GroupOperation()
            queue.addOperation(running)
            XCTAssertTrue(holding.wait(), "trial \(trial)")
            let go = DispatchSemaphore(value: 0)
            let ready = DispatchGroup()
            let done = DispatchGroup()
            let takers = Locked([Int]())
            for side in 0..<5 {
                ready.enter()
                done.enter()
                DispatchQueue.global().async {
                    ready.leave()
                    go.wait()
                    do {
                        try (side < 4 ? running : other).addChild(child)
                        takers.mutate { $0.append(side) }
                    } catch BatonError.duplicateOperation, BatonError.alreadyEnqueued, BatonError.alreadyExecuting,
                        BatonError.alreadyFinished
                    {
                        // Held by the group that took it (or running, or run by it already).
                    } catch {
                        XCTFail("trial \(trial), side \(side): \(error)")
                    }
                    done.leave()
                }
            }
            XCTAssertEqual(ready.wait(timeout: .now() + testTimeout), .success)
            for _ in 0..<5 { go.signal() }
            XCTAssertEqual(done.wait(timeout: .now() + testTimeout), .success)
            XCTAssertEqual(takers.value.count, 1, "trial \(trial): taken by \(takers.value)")
            if takers.value == [4] { queue.addOperation(other) }
            release.open()
            XCTAssertTrue(eventually { running.isFinished && child.isFinished }, "trial \(trial)")
            XCTAssertEqual(runs.value, 1, "trial \(trial)")
            XCTAssertEqual(running.outcome?.isSuccess, true, "trial \(trial)")
        }
    }

    /// Outputs typed `Optional` (its `nil` too), `Void` and `any Sendable`, handed on through chains
    /// and sequences built and run on four threads at once: each arrives as it was made, compared by
    /// its description, not by a cast that could flatten an `Optional`.
    func testOptionalVoidAndAnyOutputsArriveWholeThroughChainsAndSequencesOnManyThreads() throws {
        let failures = Locked([String]())
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            for round in 0..<100 {
                let expected: String
                let first: Operation
                switch (thread + round) % 4 {
                case 0:
                    expected = "nil"
                    first = ResultBlockOperation<Int?> { $0.finish(with: nil) }
                case 1:
                    expected = "Optional(7)"
                    first = ResultBlockOperation<Int?> { $0.finish(with: 7) }
                case 2:
                    expected = "()"
                    first = ResultBlockOperation<Void> { $0.finish(with: ()) }
                default:
                    expected = "\"any\""
                    first = ResultBlockOperation<any Sendable> { $0.finish(with: "any") }
                }
                let describe: Operation
                switch (thread + round) % 4 {
                case 0, 1: describe = TransformBlockOperation<Int?, String> { $0.finish(with: String(describing: $0.input!)) }
                case 2: describe = TransformBlockOperation<Void, String> { $0.finish(with: String(describing: $0.input!)) }
                default:
                    describe = TransformBlockOperation<any Sendable, String> {
                        $0.finish(with: String(reflecting: $0.input!))
                    }
                }
                do {
                    let got: String
                    if round.isMultiple(of: 2) {
                        let handle = try OperationQueue().addChain([first, describe])
                        got = String(describing: try handle.wait(timeout: .seconds(testTimeout)))
                    } else {
                        got = try SequenceOperation<String>(operations: [first, describe]).run(timeout: .seconds(testTimeout))
                    }
                    if got != expected { failures.mutate { $0.append("\(thread)/\(round): \(got) != \(expected)") } }
                } catch {
                    failures.mutate { $0.append("\(thread)/\(round): \(error)") }
                }
            }
        }
        XCTAssertEqual(failures.value, [])
    }

    /// An operation finishing (with an output, a failure, or cancelled) while four threads read its
    /// outcome, add observers and wait for it: every observer is told once, every reader sees nothing
    /// or the final outcome, never another, and waits end with it.
    func testAnOutcomeReadObservedAndAwaitedFromManyThreadsAsItIsDecided() throws {
        for trial in 0..<500 {
            let go = Gate()
            let operation = ResultBlockOperation<Int> { operation in
                go.wait()
                switch trial % 3 {
                case 0: operation.finish(with: trial)
                case 1: operation.finish(throwing: CocoaError(.fileNoSuchFile))
                default:
                    // Cooperative: cancelled while executing, it still finishes (cancelled).
                    operation.cancel()
                    operation.finish(with: trial)
                }
            }
            let expected =
                switch trial % 3 {
                case 0: "succeeded(\(trial))"
                case 1: "failed"
                default: "cancelled"
                }
            let told = Locked([String]())
            let seen = Locked([String]())
            let queue = OperationQueue()
            queue.addOperation(operation)
            let done = DispatchGroup()
            for reader in 0..<4 {
                done.enter()
                DispatchQueue.global().async {
                    if reader == 0 { go.open() }
                    operation.onFinish { outcome in told.mutate { $0.append(summary(outcome)) } }
                    if let outcome = operation.outcome { seen.mutate { $0.append(summary(outcome)) } }
                    // A wait throws the operation's failure or cancellation: it ended, which is all it tells.
                    _ = try? operation.wait(timeout: .seconds(testTimeout))
                    seen.mutate { $0.append(operation.outcome.map(summary) ?? "unfinished after its wait") }
                    done.leave()
                }
            }
            XCTAssertEqual(done.wait(timeout: .now() + testTimeout), .success, "trial \(trial)")
            XCTAssertEqual(told.value, Array(repeating: expected, count: 4), "trial \(trial)")
            XCTAssertTrue(seen.value.count >= 4 && seen.value.allSatisfy { $0 == expected }, "trial \(trial): \(seen.value)")
        }
    }
}

/// An outcome's case, and a success's value: what the readers of one operation compare.
private func summary(_ outcome: Outcome<Int>) -> String {
    switch outcome {
    case .succeeded(let value): "succeeded(\(value))"
    case .failed: "failed"
    case .cancelled: "cancelled"
    }
}
