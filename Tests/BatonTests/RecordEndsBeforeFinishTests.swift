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
            let watched = watchEachFinish(of: operations, in: recorder) { operation, record in
                let name = operation.name ?? "?"
                // A queue records what starts on it: a cancelled operation may finish unrecorded.
                guard let record else {
                    if operation !== cancelled { unended.append("\(name): no record") }
                    return
                }
                if !record.status.isFinished { unended.append("\(name): \(record.status)") }
            }
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

    /// Attack on the record's end moved ahead of the finish ("outcome decided" then "finished
    /// announced"): operations on a recorded queue whose outcome is raced by a timeout of 0–200 µs, a
    /// `finish()` and a `cancel()` from two other threads released together. When an operation reads
    /// finished, its record (if it executed, it has one) has ended with the outcome the operation
    /// reads, and no operation is recorded twice.
    func testARecordEndsWithTheOutcomeWhenATimeoutAFinishAndACancelRace() throws {
        let trials = ProcessInfo.processInfo.environment["BATON_TRIALS"].flatMap(Int.init) ?? 150
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 4
        let recorder = FlightRecorder()
        recorder.attach(to: queue)
        defer { recorder.detach(from: queue) }
        var random = SplitMix(state: 53)
        for trial in 0..<trials {
            let executed = Locked(Set<String>())
            let started = (0..<8).map { _ in DispatchSemaphore(value: 0) }
            let operations = (0..<8).map { index in
                let operation = AsyncBlockOperation { operation in
                    executed.mutate { _ = $0.insert(operation.name ?? "?") }
                    // Twice: the racers finish and cancel it while it executes.
                    started[index].signal()
                    started[index].signal()
                }
                operation.name = "\(trial)-\(index)"
                operation.timeout = .microseconds(random.next(200))
                // Timed out before it started, it never executes: nothing for the racers to wait for.
                operation.onFinish { _ in
                    started[index].signal()
                    started[index].signal()
                }
                return operation
            }
            let wrong = Locked([String]())
            let watched = watchEachFinish(of: operations, in: recorder) { operation, record in
                let name = operation.name ?? "?"
                let expected: FlightRecord.Status? =
                    switch operation.outcome {
                    case .succeeded?: .succeeded
                    case .failed?: nil
                    case .cancelled?: .cancelled
                    case nil: .pending
                    }
                guard let record else {
                    if executed.value.contains(name) { wrong.append("\(name): executed, no record") }
                    return
                }
                switch (record.status, expected) {
                case (.failed, nil), (.succeeded, .succeeded?), (.cancelled, .cancelled?): break
                default: wrong.append("\(name): recorded \(record.status), reads \(String(describing: operation.outcome))")
                }
            }
            let racing = DispatchGroup()
            for (index, operation) in operations.enumerated() {
                let spins = (random.next(400), random.next(400))
                let cancelsFirst = random.next(8) == 0
                // Threads of their own: blocked on a pool's workers, they would starve the queue.
                racing.enter()
                Thread {
                    defer { racing.leave() }
                    _ = started[index].wait(timeout: .now() + testTimeout)
                    spinRounds(spins.0)
                    operation.finish()
                }.start()
                racing.enter()
                Thread {
                    defer { racing.leave() }
                    // Now and then before it starts: it then ends cancelled, unexecuted and unrecorded.
                    if !cancelsFirst { _ = started[index].wait(timeout: .now() + testTimeout) }
                    spinRounds(spins.1)
                    operation.cancel()
                    if cancelsFirst { started[index].signal() }
                }.start()
            }
            queue.addOperations(operations, waitUntilFinished: false)
            XCTAssertEqual(racing.wait(timeout: .now() + testTimeout), .success, "trial \(trial)")
            XCTAssertEqual(watched.wait(timeout: .now() + testTimeout), .success, "trial \(trial)")
            XCTAssertTrue(operations.allSatisfy(\.isFinished), "trial \(trial)")
            XCTAssertEqual(wrong.value, [], "trial \(trial)")
        }
        let records = recorder.records
        let names = records.compactMap(\.name)
        XCTAssertEqual(Set(names).count, names.count, "an operation recorded twice")
        // The race is had: most operations executed, and each way of ending occurred.
        XCTAssertGreaterThan(records.count, trials * 4)
        for status in [FlightRecord.Status.succeeded, .cancelled] {
            XCTAssertTrue(records.contains { $0.status == status }, "no record \(status)")
        }
        XCTAssertTrue(records.contains { if case .failed = $0.status { true } else { false } }, "no timeout")
    }
}

/// Sweeps `operations` on a thread of its own (not a pool's: spinning there would starve the queue's
/// workers) and calls `check` with each one and its record in `recorder` (found by name; `nil` when it
/// has none) the moment it reads finished. The returned semaphore is signalled once every operation was
/// checked, or after `testTimeout`.
private func watchEachFinish(
    of operations: [AsyncOperation], in recorder: FlightRecorder,
    _ check: @escaping @Sendable (AsyncOperation, FlightRecord?) -> Void
) -> DispatchSemaphore {
    let watched = DispatchSemaphore(value: 0)
    Thread {
        defer { watched.signal() }
        var waiting = operations
        let deadline = DispatchTime.now() + testTimeout
        while !waiting.isEmpty, DispatchTime.now() < deadline {
            guard let index = waiting.firstIndex(where: \.isFinished) else { continue }
            let operation = waiting.remove(at: index)
            let name = operation.name
            check(operation, recorder.records.first { $0.name == name })
        }
    }.start()
    return watched
}
