import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Hammers issue #22's new paths along ../shared/ATTACK-SURFACES.md: decisions that cross threads
/// (adapter operations, tree windows, task cancellation of `runForOutcome`), callbacks that call back,
/// retries of Foundation operations racing a cancel, and exports of hostile names. Many trials, gates
/// to widen the windows, no sleeps; every wait is bounded.
final class AttackRoundFourTests: BatonTestCase {
    // MARK: - Adapter operations: a cancel in every gap

    /// The chain is cancelled from another thread while an adapter operation runs, or just before or
    /// after it is enqueued. The chain always ends, never runs the step after a cancel that reached
    /// the adapter first, and holds nothing afterwards.
    func testCancellingAChainRacesItsAdapterOperations() throws {
        var outcomes = [String: Int]()
        for trial in 0..<400 {
            let inAdapter = Gate()
            let ranAfterCancel = Locked(false)
            let cancelled = Locked(false)
            let adapter = ChainAdapter.operation {
                AdapterBlockOperation { _, _, _ in
                    if trial % 2 == 0 { inAdapter.open() }
                    return .forward
                }
            }
            let steps: [Operation] =
                [ResultBlockOperation<Int> { $0.finish(with: 0) }]
                + (1..<4).map { _ in
                    TransformBlockOperation<Int, Int> { value in
                        if cancelled.value { ranAfterCancel.mutate { $0 = true } }
                        return value + 1
                    }
                }
            let handle = try OperationQueue().addChain(steps, adapter: adapter)
            if trial % 2 == 0 { inAdapter.wait() }
            handle.cancel()
            // A step whose body starts after this point was not cancelled: the chain must end cancelled.
            cancelled.mutate { $0 = true }
            let outcome = try handle.waitToOutcome()
            outcomes[outcome.isCancelled ? "cancelled" : outcome.isSuccess ? "succeeded" : "failed", default: 0] += 1
            if case .failed = outcome { XCTFail("trial \(trial): \(outcome)") }
            XCTAssertTrue(handle.unfinishedOperations.isEmpty, "trial \(trial)")
            XCTAssertFalse(ranAfterCancel.value && outcome.isCancelled == false, "trial \(trial)")
        }
        XCTAssertGreaterThan(outcomes["cancelled", default: 0], 0, "\(outcomes)")
    }

    /// An adapter operation that cancels its own chain, and a recovering adapter that cancels it, from
    /// inside the hand-on: the chain ends cancelled, once.
    func testAdaptersThatCancelTheirOwnChain() throws {
        for _ in 0..<200 {
            let handleBox = Locked<ChainHandle<any Sendable>?>(nil)
            let ready = Gate()
            let adapter = ChainAdapter.operation {
                AdapterBlockOperation { _, _, _ in
                    ready.wait()
                    handleBox.value?.cancel()
                    return .forward
                }
            }
            let handle = try OperationQueue().addChain(
                [ResultBlockOperation<Int> { $0.finish(with: 1) }, TransformBlockOperation<Int, Int> { $0 }],
                adapter: adapter)
            handleBox.mutate { $0 = handle }
            ready.open()
            XCTAssertTrue(try handle.waitToOutcome().isCancelled)

            let recoveringBox = Locked<ChainHandle<any Sendable>?>(nil)
            let recoveringReady = Gate()
            let recovering = ChainAdapter.recovering { _, _, _ in
                recoveringReady.wait()
                recoveringBox.value?.cancel()
                return .recover(with: 5)
            }
            let second = try OperationQueue().addChain(
                [ResultBlockOperation<Int> { $0.finish(with: 1) }, TransformBlockOperation<Int, Int> { $0 }],
                adapter: recovering)
            recoveringBox.mutate { $0 = second }
            recoveringReady.open()
            XCTAssertTrue(try second.waitToOutcome().isCancelled)
        }
    }

    // MARK: - Tree windows: cancels and re-entrant callbacks

    /// A tree whose node has a window of 2 and 300 items is cancelled at a random moment, from
    /// another thread or from the node's own `onFinish`. It always ends, and every operation it
    /// made finished (nothing parked is lost, nothing launched twice).
    func testCancellingATreeRacesItsWindows() throws {
        var random = SeededRandom(seed: 22)
        var cutShort = 0
        for trial in 0..<300 {
            let made = Locked(0)
            let finished = Locked(0)
            let cancelAt = Int.random(in: 0..<40, using: &random)
            let treeBox = Locked<TreeOperation<Int>?>(nil)
            let fromCallback = trial % 3 == 0
            let node = TreeNode<Int, Void>("item", items: { 0..<$0 }) { index in
                made.increment()
                return index % 5 == 0
                    ? BlockOperation {}
                    : AsyncBlockOperation { operation in
                        DispatchQueue.global().async { operation.finish() }
                    }
            }
            node.window = 2
            let reached = Gate()
            node.onFinish { _ in
                if finished.increment() == cancelAt {
                    if fromCallback { treeBox.value?.cancel() } else { reached.open() }
                }
            }
            let tree = TreeOperation(root: node, input: 300)
            treeBox.mutate { $0 = tree }
            OperationQueue().addOperation(tree)
            if !fromCallback, cancelAt > 0 {
                reached.wait()
                tree.cancel()
            } else if cancelAt == 0 {
                tree.cancel()
            }
            waitFinished(tree)
            XCTAssertEqual(made.value, finished.value, "trial \(trial): an operation it made never finished")
            XCTAssertLessThanOrEqual(made.value, 300)
            XCTAssertTrue(tree.outcome?.isFailure == false, "trial \(trial): \(String(describing: tree.outcome))")
            if made.value < 300 { cutShort += 1 }
        }
        XCTAssertGreaterThan(cutShort, 150, "the cancels did not land while items were still to be made")
    }

    // MARK: - runForOutcome: task cancellation racing the finish

    /// The awaiting task is cancelled just as the operation finishes: the wait returns the outcome or
    /// throws CancellationError, never hangs, and leaves no registration behind.
    func testTaskCancellationRacesTheFinishOfRunForOutcome() async throws {
        for _ in 0..<1_000 {
            let go = Gate()
            let operation = ResultBlockOperation<Int> { operation in
                DispatchQueue.global().async {
                    go.wait()
                    operation.finish(with: 1)
                }
            }
            let task = Task { try await operation.runForOutcome() }
            go.open()
            task.cancel()
            do {
                let outcome = try await task.value
                XCTAssertTrue(outcome.isSuccess || outcome.isCancelled, "\(outcome)")
            } catch {
                XCTAssertTrue(error is CancellationError, "\(error)")
            }
            await Gate.finished(operation)
            XCTAssertEqual(operation.core.withLock { $0.waitCount }, 0)
        }
    }

    // MARK: - Retries of Foundation operations racing a cancel

    /// Attempts that fail at once and are retried immediately, with cancels arriving at random
    /// moments: the retry always ends (cancelled or failed), within its attempts.
    func testARetryOfPlainOperationsRacesACancel() {
        var random = SeededRandom(seed: 2222)
        for trial in 0..<300 {
            let attempts = Locked(0)
            let cancelAt = Int.random(in: 1...20, using: &random)
            let reached = Gate()
            let retry = RetryOperation<Void>(maximumAttempts: 30) { attempt in
                if attempts.increment() == cancelAt { reached.open() }
                // A Foundation attempt always succeeds: most attempts fail, every seventh is a block.
                if attempt % 7 == 0 { return BlockOperation {} }
                return AsyncBlockOperation { operation in
                    DispatchQueue.global().async { operation.finish(throwing: TestError(code: attempt)) }
                }
            }
            OperationQueue().addOperation(retry)
            if cancelAt < 7 {
                reached.wait()
                retry.cancel()
            }
            waitFinished(retry)
            let outcome = retry.outcome!
            XCTAssertTrue(outcome.isCancelled || outcome.isSuccess, "trial \(trial): \(outcome)")
            // It succeeds exactly at the first Foundation attempt, and always when nobody cancels it.
            if outcome.isSuccess { XCTAssertEqual(attempts.value, 7, "trial \(trial)") }
            if cancelAt >= 7 { XCTAssertTrue(outcome.isSuccess, "trial \(trial): \(outcome) uncancelled") }
            XCTAssertLessThanOrEqual(attempts.value, 7, "trial \(trial): attempts after the success or the cancel")
        }
    }

    // MARK: - Timeouts: the expiry racing a user's cancel and the finish

    /// An operation's own timeout (zero) races a user's cancel and its own finish: it ends once,
    /// either succeeded, cancelled (the user first) or timed out, and reads as cancelled exactly
    /// when its outcome is cancelled.
    func testATimeoutRacesACancelAndTheFinish() {
        var seen = Set<String>()
        for _ in 0..<2_000 {
            let told = Locked(0)
            let operation = ResultBlockOperation<Int> { operation in
                DispatchQueue.global().async { operation.finish(with: 1) }
            } onCancel: {
                $0.finish()
            }
            operation.timeout = .zero
            operation.onFinish { _ in told.increment() }
            let queue = OperationQueue()
            DispatchQueue.concurrentPerform(iterations: 2) { index in
                if index == 0 { queue.addOperation(operation) } else { operation.cancel() }
            }
            waitFinished(operation)
            let outcome = operation.outcome!
            switch outcome {
            case .succeeded: seen.insert("succeeded")
            case .cancelled: seen.insert("cancelled")
            case .failed(BatonError.timedOut): seen.insert("timedOut")
            case .failed(let error): XCTFail("\(error)")
            }
            XCTAssertEqual(told.value, 1)
            XCTAssertEqual(operation.isCancelled, outcome.isCancelled)
        }
        XCTAssertTrue(seen.contains("cancelled"), "\(seen)")
    }

    // MARK: - Exports

    /// Names and errors holding every character JSON interprets still give a trace that parses, with
    /// the names unchanged.
    func testATraceWithHostileNamesParses() throws {
        struct Odd: Error, CustomStringConvertible {
            var description: String { "bad \"quote\" \\ \u{0}\u{1f}\n\t</script>" }
        }
        let names = ["\"", "\\", "\n\r\t", "\u{0}\u{7}\u{1b}", "\u{2028}\u{2029}", "é\u{301}", "#9829;&amp;", "💥"]
        let recorder = FlightRecorder()
        let operations = names.map { name in
            let operation = AsyncBlockOperation { $0.finish(throwing: Odd()) }
            operation.name = name
            return operation
        }
        let group = GroupOperation(operations: operations)
        recorder.attach(to: group)
        _ = try group.runToOutcome()
        let data = Data(recorder.export(.chromeTrace).utf8)
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let events = try XCTUnwrap(object["traceEvents"] as? [[String: Any]])
        let labels = Set(events.compactMap { $0["name"] as? String })
        for name in names { XCTAssertTrue(labels.contains { $0.contains(name) }, "\(name.debugDescription) lost") }
        let errors = events.compactMap { ($0["args"] as? [String: Any])?["error"] as? String }
        XCTAssertTrue(errors.contains { $0.contains(Odd().description) })
    }
}

extension Gate {
    /// Suspends until `operation` has finished (on a thread of its own, bounded).
    static func finished(_ operation: Operation) async {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                waitFinished(operation)
                continuation.resume()
            }
        }
    }
}
