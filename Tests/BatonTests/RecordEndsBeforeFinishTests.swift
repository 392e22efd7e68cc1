import Dispatch
import Foundation
import XCTest

@testable import Baton

/// An operation's record ends before the operation reads as finished: whoever polls `isFinished` and
/// then reads the recorder finds the record ended. CI failed once on this window
/// (`ContentionAttackTests`, "a record never ended"): the operation flipped to finished under its lock,
/// and its record ended just after.
final class RecordEndsBeforeFinishTests: BatonTestCase {
    /// Operations, a group and a cancelled operation on a recorded queue, watched by a thread that
    /// spins on their `isFinished` and reads a record the moment its operation turns finished.
    func testAnOperationThatReadsFinishedHasItsRecordEnded() throws {
        let trials = ProcessInfo.processInfo.environment["BATON_TRIALS"].flatMap(Int.init) ?? 100
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 2
        let recorder = FlightRecorder()
        recorder.attach(to: queue)
        defer { recorder.detach(from: queue) }
        for trial in 0..<trials {
            let group = GroupOperation(operations: [ImmediateOperation(.success(0))])
            group.name = "\(trial)-group"
            let cancelled = ImmediateOperation(.success(0), name: "\(trial)-cancelled")
            let operations: [AsyncOperation] =
                (0..<6).map { ImmediateOperation(.success($0), name: "\(trial)-\($0)") } + [group, cancelled]
            let unended = Locked([String]())
            // One thread of its own (not a pool's: spinning there would starve the queue's workers)
            // sweeps the operations, and reads a record the moment its operation reads finished.
            let watched = DispatchSemaphore(value: 0)
            Thread {
                defer { watched.signal() }
                var waiting = operations
                let deadline = DispatchTime.now() + testTimeout
                while !waiting.isEmpty, DispatchTime.now() < deadline {
                    guard let index = waiting.firstIndex(where: \.isFinished) else { continue }
                    let operation = waiting.remove(at: index)
                    let name = operation.name
                    // A queue records what starts on it: a cancelled operation may finish unrecorded.
                    guard let record = recorder.records.first(where: { $0.name == name }) else {
                        if operation !== cancelled { unended.append("\(name ?? "?"): no record") }
                        continue
                    }
                    if !record.status.isFinished { unended.append("\(name ?? "?"): \(record.status)") }
                }
            }.start()
            let cancelsFirst = Bool.random()
            for operation in operations.shuffled() {
                if operation === cancelled, cancelsFirst { operation.cancel() }
                queue.addOperation(operation)
            }
            cancelled.cancel()
            XCTAssertEqual(watched.wait(timeout: .now() + testTimeout), .success, "trial \(trial)")
            XCTAssertTrue(operations.allSatisfy(\.isFinished), "trial \(trial)")
            XCTAssertEqual(unended.value, [], "trial \(trial): read as finished before its record ended")
        }
    }
}
