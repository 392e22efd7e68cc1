import Foundation
import XCTest

@testable import Baton

/// A start by hand of an operation Baton enqueued, racing the queue's own start from another thread,
/// is refused and reported: the operation runs once, on the queue's worker, never on the thread that
/// started it by hand. (Recognising the queue's start by Foundation's record alone, which says
/// `starting` from just before the worker's call, let the start by hand win about one race in ten.)
final class StartByHandHammerTests: BatonTestCase {
    /// Records each run, and whether it ran inside the start by hand (on the thread that is, at that
    /// moment, inside that call: pooled threads are reused, so the thread alone does not say).
    private final class ThreadRecordingOperation: ResultOperation<Int>, @unchecked Sendable {
        let runs = Locked(0)
        let insideStartByHand = Locked<ObjectIdentifier?>(nil)
        let ranByHand = Locked(false)

        override func execute() {
            runs.mutate { $0 += 1 }
            if insideStartByHand.value == ObjectIdentifier(Thread.current) { ranByHand.mutate { $0 = true } }
            finish(with: 1)
        }
    }

    func testStartsByHandRacingTheQueuesStartAreRefused() throws {
        let trials = ProcessInfo.processInfo.environment["BATON_START_BY_HAND_TRIALS"].flatMap(Int.init) ?? 2_000
        let queue = OperationQueue()
        var handles: [ChainHandle<any Sendable>] = []
        var operations: [ThreadRecordingOperation] = []
        for trial in 0..<trials {
            let operation = ThreadRecordingOperation()
            operation.name = "trial \(trial)"
            operations.append(operation)
            let launched = Gate()
            let handle = Locked<ChainHandle<any Sendable>?>(nil)
            // One thread hands it to the queue through Baton; the other starts it by hand as soon as
            // that returns, after a trial-dependent spin, to move across the queue's own start.
            DispatchQueue.concurrentPerform(iterations: 2) { side in
                if side == 0 {
                    let made = try? queue.addChain([operation])
                    handle.mutate { $0 = made }
                    launched.open()
                } else {
                    launched.wait()
                    var spin = 0
                    for _ in 0..<(trial % 128 * 40) { spin &+= 1 }
                    operation.insideStartByHand.mutate { $0 = ObjectIdentifier(Thread.current) }
                    if spin >= 0 { operation.start() }
                    operation.insideStartByHand.mutate { $0 = nil }
                }
            }
            handles.append(try XCTUnwrap(handle.value, "trial \(trial): the chain was refused"))
        }
        for handle in handles {
            XCTAssertEqual(try handle.wait(timeout: .seconds(testTimeout)) as? Int, 1)
        }
        var ranByHand = 0
        for operation in operations {
            XCTAssertEqual(operation.runs.value, 1, "\(operation.name!) ran \(operation.runs.value) times")
            if operation.ranByHand.value { ranByHand += 1 }
            XCTAssertTrue(operation.isFinished)
        }
        XCTAssertEqual(ranByHand, 0, "\(ranByHand) of \(trials) operations ran on the thread that started them by hand")
        let reported = Set(diagnostics.allKinds)
        XCTAssertTrue(reported.isSubset(of: [Diagnostic.Kind.startedWhileClaimed, .startedTwice]), "\(reported)")
    }
}
