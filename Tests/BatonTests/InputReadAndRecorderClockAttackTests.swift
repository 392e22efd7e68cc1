import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Attacks on stop 51's two trims: a step's input read without `Optional.flatMap` (read under the
/// lock, cast outside it) while other threads set it and start the operation, and a recorder whose
/// clock is read directly (`Uptime`) by many threads at once, whose times must stay in the order the
/// events happened across threads.
final class InputReadAndRecorderClockAttackTests: BatonTestCase {
    /// Readers, a setter and a starter released together on one operation: a read sees nothing or the
    /// value set, never another; an operation that succeeded computed from the value every later read
    /// sees; one that started first failed for its missing input, and the value set after its start
    /// was ignored (reads stay `nil`) and reported.
    func testAnInputReadByManyThreadsWhileItIsSetAndTheOperationStartsIsNothingOrTheValue() {
        let queue = OperationQueue()
        for trial in 0..<400 {
            let step = TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! + 1) }
            let strays = Locked([Int]())
            let go = DispatchSemaphore(value: 0)
            let ready = DispatchGroup()
            let done = DispatchGroup()
            for side in 0..<4 {
                ready.enter()
                done.enter()
                DispatchQueue.global().async {
                    ready.leave()
                    go.wait()
                    switch side {
                    case 0: step.input = trial
                    case 1: queue.addOperation(step)
                    default:
                        while !step.isFinished {
                            if let read = step.input, read != trial { strays.mutate { $0.append(read) } }
                        }
                    }
                    done.leave()
                }
            }
            XCTAssertEqual(ready.wait(timeout: .now() + testTimeout), .success)
            for _ in 0..<4 { go.signal() }
            XCTAssertEqual(done.wait(timeout: .now() + testTimeout), .success, "trial \(trial)")
            XCTAssertEqual(strays.value, [], "trial \(trial)")
            switch step.outcome {
            case .succeeded(let output)?:
                XCTAssertEqual(output, trial + 1, "trial \(trial)")
                XCTAssertEqual(step.input, trial, "trial \(trial)")
            case .failed(let error)?:
                guard case .missingInput? = error as? BatonError else {
                    return XCTFail("trial \(trial): \(error)")
                }
                XCTAssertNil(step.input, "trial \(trial)")
                XCTAssertTrue(diagnostics.kinds(for: step).contains(.inputAfterStart), "trial \(trial)")
            default:
                XCTFail("trial \(trial): \(String(describing: step.outcome))")
            }
        }
    }

    /// Eight chains and eight groups recorded by one recorder, run at once from eight threads released
    /// together: every record's times are in order (enqueued, started, finished), a chain's step
    /// starts no earlier than its predecessor finished (it is handed on after), a child starts no
    /// earlier than its group started and finishes no later than it finished, though each time was
    /// read on another thread.
    func testRecordedTimesTakenOnManyThreadsStayInTheOrderOfEvents() throws {
        for round in 0..<8 {
            let recorder = FlightRecorder()
            let chains: [[Operation]] = (0..<8).map { _ in
                [ResultBlockOperation<Int> { $0.finish(with: 0) } as Operation]
                    + (1..<40).map { _ in TransformBlockOperation<Int, Int> { $0.finish(with: $0.input! + 1) } }
            }
            let groups = (0..<8).map { _ in GroupOperation(operations: (0..<40).map { JitterOperation($0) }) }
            for chain in chains { recorder.attach(to: chain) }
            for group in groups { recorder.attach(to: group) }
            let go = DispatchSemaphore(value: 0)
            let ready = DispatchGroup()
            let done = DispatchGroup()
            for index in 0..<16 {
                ready.enter()
                done.enter()
                DispatchQueue.global().async {
                    ready.leave()
                    go.wait()
                    do {
                        if index < 8 {
                            let output = try OperationQueue().addChain(chains[index]).wait(timeout: .seconds(testTimeout))
                            XCTAssertEqual(output as? Int, 39)
                        } else {
                            try groups[index - 8].run(timeout: .seconds(testTimeout))
                        }
                    } catch {
                        XCTFail("round \(round), \(index): \(error)")
                    }
                    done.leave()
                }
            }
            XCTAssertEqual(ready.wait(timeout: .now() + testTimeout), .success)
            for _ in 0..<16 { go.signal() }
            XCTAssertEqual(done.wait(timeout: .now() + testTimeout), .success, "round \(round)")

            let records = recorder.records
            let byID = Dictionary(uniqueKeysWithValues: records.map { ($0.id, $0) })
            XCTAssertEqual(records.count, 8 * 41 + 8 * 41, "round \(round)")
            for record in records where record.kind != .chain {
                let started = try XCTUnwrap(record.startedAt, "round \(round): \(record.label)")
                let finished = try XCTUnwrap(record.finishedAt, "round \(round): \(record.label)")
                XCTAssertGreaterThanOrEqual(started, .zero, "round \(round): \(record.label)")
                if let enqueued = record.enqueuedAt {
                    XCTAssertLessThanOrEqual(enqueued, started, "round \(round): \(record.label)")
                }
                XCTAssertLessThanOrEqual(started, finished, "round \(round): \(record.label)")
                if record.link == .adapter, let predecessor = record.predecessorID.flatMap({ byID[$0] }) {
                    let before = try XCTUnwrap(predecessor.finishedAt)
                    XCTAssertLessThanOrEqual(before, started, "round \(round): \(record.label) after \(predecessor.label)")
                }
                if let parent = record.parentID.flatMap({ byID[$0] }), parent.kind == .composite {
                    XCTAssertLessThanOrEqual(try XCTUnwrap(parent.startedAt), started, "round \(round)")
                    XCTAssertLessThanOrEqual(finished, try XCTUnwrap(parent.finishedAt), "round \(round)")
                }
            }
        }
    }
}
