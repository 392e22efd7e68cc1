import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Attacks on what #26 took off the process-wide lock: a Foundation operation's custody (now striped)
/// and a queue's recorder (now found through an atomic flag), from many threads released by one gate.
final class ContentionAttackTests: BatonTestCase {
    /// The same `BlockOperation` handed to four entry points at once (two chains, two groups): exactly
    /// one takes it, the others are refused (held, or already run by the chain that took it), and it
    /// runs once.
    func testAFoundationOperationTakenByManyEntryPointsAtOnceRunsOnce() throws {
        let queue = OperationQueue()
        for trial in 0..<300 {
            let runs = Locked(0)
            let block = BlockOperation { runs.mutate { $0 += 1 } }
            let groups = [GroupOperation(), GroupOperation()]
            let go = DispatchSemaphore(value: 0)
            let ready = DispatchGroup()
            let taken = Locked([Int]())
            let refused = Locked(0)
            let done = DispatchGroup()
            for side in 0..<4 {
                ready.enter()
                done.enter()
                DispatchQueue.global().async {
                    ready.leave()
                    go.wait()
                    do {
                        if side < 2 {
                            try queue.addChain([block])
                        } else {
                            try groups[side - 2].addChild(block)
                        }
                        taken.mutate { $0.append(side) }
                    } catch BatonError.alreadyEnqueued, BatonError.alreadyExecuting, BatonError.alreadyFinished {
                        // Held by another entry point, or already run by the chain that took it.
                        refused.mutate { $0 += 1 }
                    } catch {
                        XCTFail("trial \(trial), side \(side): \(error)")
                    }
                    done.leave()
                }
            }
            XCTAssertEqual(ready.wait(timeout: .now() + testTimeout), .success)
            for _ in 0..<4 { go.signal() }
            XCTAssertEqual(done.wait(timeout: .now() + testTimeout), .success)
            XCTAssertEqual(taken.value.count, 1, "trial \(trial): taken by \(taken.value)")
            XCTAssertEqual(refused.value, 3, "trial \(trial)")
            // The group that took it runs it; a chain already did.
            if let side = taken.value.first, side >= 2 { queue.addOperation(groups[side - 2]) }
            XCTAssertTrue(eventually { block.isFinished }, "trial \(trial)")
            XCTAssertEqual(runs.value, 1, "trial \(trial)")
        }
    }

    /// Two chains handed the same `BlockOperation`, the second a moment after the first (spread over
    /// the first one's run without sleeping). A chain gives a stage back once it has finished: exactly
    /// one chain takes it, and none takes (and skips) an operation that already ran.
    func testAFoundationOperationGivenBackByItsChainIsNeverTakenOnceItRan() throws {
        let queue = OperationQueue()
        for trial in 0..<2_000 {
            let runs = Locked(0)
            let block = BlockOperation { runs.mutate { $0 += 1 } }
            let go = DispatchSemaphore(value: 0)
            let takers = Locked(0)
            let done = DispatchSemaphore(value: 0)
            DispatchQueue.global().async {
                go.wait()
                spinRounds(trial % 50 * 200)
                if (try? queue.addChain([block])) != nil { takers.mutate { $0 += 1 } }
                done.signal()
            }
            go.signal()
            if (try? queue.addChain([block])) != nil { takers.mutate { $0 += 1 } }
            XCTAssertEqual(done.wait(timeout: .now() + testTimeout), .success)
            XCTAssertEqual(takers.value, 1, "trial \(trial): taken by \(takers.value) chains")
            XCTAssertTrue(eventually { block.isFinished }, "trial \(trial)")
            XCTAssertEqual(runs.value, 1, "trial \(trial)")
        }
    }

    /// A recorder attached to and detached from a queue (and a second queue, so the "some queue
    /// records" flag flips too) while four threads add operations to it: each operation is recorded
    /// at most once, every record it made ends, and nothing is recorded after the last detach.
    func testQueueRecordersAttachedAndDetachedWhileOperationsStartOnTheQueue() throws {
        let queue = OperationQueue()
        let other = OperationQueue()
        let recorder = FlightRecorder()
        let adding = Locked(4)
        let stopped = keepChanging(while: adding) { round in
            switch round % 4 {
            case 0: recorder.attach(to: queue)
            case 1: recorder.attach(to: other)
            case 2: recorder.detach(from: queue)
            default: recorder.detach(from: other)
            }
        } finally: {
            recorder.detach(from: queue)
            recorder.detach(from: other)
        }
        let made = Locked([ImmediateOperation]())
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            var mine = [ImmediateOperation]()
            for index in 0..<300 {
                let operation = ImmediateOperation(.success(index), name: "\(thread)-\(index)")
                mine.append(operation)
                queue.addOperation(operation)
            }
            made.mutate { $0 += mine }
            adding.mutate { $0 -= 1 }
        }
        XCTAssertEqual(stopped.wait(timeout: .now() + testTimeout), .success)
        let operations = made.value
        XCTAssertTrue(eventually { operations.allSatisfy(\.isFinished) })
        let names = recorder.records.compactMap(\.name)
        XCTAssertEqual(Set(names).count, names.count, "an operation recorded twice")
        XCTAssertTrue(recorder.records.allSatisfy { $0.status == .succeeded }, "a record never ended")
        let after = ImmediateOperation(.success(0), name: "after")
        queue.addOperation(after)
        XCTAssertTrue(eventually { after.isFinished })
        XCTAssertFalse(recorder.records.contains { $0.name == "after" }, "recorded after the last detach")
    }
}
