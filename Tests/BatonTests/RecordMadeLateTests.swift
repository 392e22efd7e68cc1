import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Records made late, found by stop 54's review: a recorder attached to an operation that has finished,
/// attached while its queue starts it (two records made at once), and a recorder set while a chain
/// with a Foundation stage runs. Each left a record that never ended.
final class RecordMadeLateTests: BatonTestCase {
    /// Attached once the operation has finished, its record ends at once, with the outcome.
    func testARecorderAttachedToAFinishedOperationRecordsItFinished() throws {
        let operation = AsyncBlockOperation { $0.finish() }
        operation.name = "done"
        try operation.run(timeout: .seconds(testTimeout))
        let recorder = FlightRecorder()
        recorder.attach(to: operation)
        let records = recorder.records.filter { $0.name == "done" }
        XCTAssertEqual(records.count, 1)
        XCTAssertEqual(records.first?.status, .succeeded)
    }

    /// Attached from one thread while the queue starts the operation on another (both record it into
    /// the global recorder): one record, ended.
    func testAttachingTheGlobalRecorderAsTheQueueStartsTheOperationRecordsItOnce() throws {
        let trials = ProcessInfo.processInfo.environment["BATON_TRIALS"].flatMap(Int.init) ?? 1_000
        let recorder = try FlightRecorder(capacity: 2 * trials)
        FlightRecorder.global = recorder
        defer { FlightRecorder.global = nil }
        let queue = OperationQueue()
        var random = SplitMix(state: 5404)
        for trial in 0..<trials {
            let operation = AsyncBlockOperation { $0.finish() }
            operation.name = "once-\(trial)"
            let spins = (random.next(2000), random.next(2000))
            let line = StartingLine()
            line.thread {
                spinRounds(spins.0)
                queue.addOperation(operation)
            }
            line.thread {
                spinRounds(spins.1)
                recorder.attach(to: operation)
            }
            XCTAssertTrue(line.release(timeout: testTimeout))
            waitFinished(operation)
        }
        FlightRecorder.global = nil
        var byName = [String: [FlightRecord.Status]]()
        for record in recorder.records { if let name = record.name { byName[name, default: []].append(record.status) } }
        let bad = byName.filter { $0.value != [.succeeded] }.map { "\($0.key): \($0.value)" }.sorted()
        XCTAssertEqual(byName.count, trials)
        XCTAssertEqual(bad, [], "\(bad.count) operations recorded more than once or not ended")
    }

    /// A recorder set as the global one, and one attached to the chain's queue, while a chain whose
    /// second stage is a Foundation operation runs: no record is left executing.
    func testARecorderSetWhileAChainWithAFoundationStageRunsLeavesNoRecordExecuting() throws {
        for attachToQueue in [false, true] {
            let recorder = FlightRecorder()
            let queue = OperationQueue()
            let proceed = DispatchSemaphore(value: 0)
            let first = AsyncBlockOperation { operation in
                DispatchQueue.global().async {
                    _ = proceed.wait(timeout: .now() + testTimeout)
                    operation.finish()
                }
            }
            first.name = "first"
            let foundation = BlockOperation {}
            foundation.name = "foundation stage"
            let handle = try queue.addChain([first, foundation])
            if attachToQueue { recorder.attach(to: queue) } else { FlightRecorder.global = recorder }
            proceed.signal()
            try handle.wait(timeout: .seconds(testTimeout))
            queue.waitUntilAllOperationsAreFinished()
            if attachToQueue { recorder.detach(from: queue) } else { FlightRecorder.global = nil }
            let unended = recorder.records.filter { !$0.status.isFinished }.map { "\($0.name ?? "?") \($0.status)" }
            XCTAssertEqual(unended, [], "attached to the queue: \(attachToQueue)")
        }
    }
}
