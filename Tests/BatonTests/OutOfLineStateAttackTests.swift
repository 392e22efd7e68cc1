import Foundation
import XCTest

@testable import Baton

/// Attacks on what stop 47 moved out of line: an operation's observers, waits, delegate and timeout
/// (now in a box made on first use), and a recorder's names, failures and waits (now in a record's
/// out-of-line part). Each registers, fires and reads them from many threads at once, released by
/// gates and trial-dependent spins, never by sleeps.
final class OutOfLineStateAttackTests: BatonTestCase {
    private var trials: Int {
        ProcessInfo.processInfo.environment["BATON_OUT_OF_LINE_TRIALS"].flatMap(Int.init) ?? 300
    }

    /// Counts what a delegate is told.
    private final class CountingDelegate: AsyncOperationDelegate {
        let started = Locked(0)
        let ended = Locked(0)
        func operationDidStart(_ operation: AsyncOperation) { started.mutate { $0 += 1 } }
        func operation(_ operation: AsyncOperation, didSucceedWith output: Any?) { ended.mutate { $0 += 1 } }
        func operation(_ operation: AsyncOperation, didFailWith error: any Error) { ended.mutate { $0 += 1 } }
        func operationDidCancel(_ operation: AsyncOperation) { ended.mutate { $0 += 1 } }
    }

    private static func spin(_ count: Int) {
        var value = 0
        for _ in 0..<count { value &+= 1 }
        if value < 0 { print(value) }
    }

    /// Start observers, outcome observers, a delegate and waits that time out at once, all added from
    /// other threads while the operation starts and finishes: each outcome observer is told exactly
    /// once, each start observer and the delegate at most once, and no wait is left registered.
    func testObserversWaitsAndADelegateRacingTheStartAndTheFinish() throws {
        for trial in 0..<trials {
            let operation = AsyncBlockOperation { _ in }
            let finishedTold = (0..<8).map { _ in Locked(0) }
            let startedTold = (0..<4).map { _ in Locked(0) }
            let delegate = CountingDelegate()
            let leftBehind = Locked(-1)
            let timedOutWaits = Locked(-1)
            let waitsReturned = Gate()
            let go = Gate()
            DispatchQueue.concurrentPerform(iterations: 5) { side in
                switch side {
                case 0:
                    for _ in 0..<4 { go.open() }
                    OperationQueue().addOperation(operation)
                    // Every other trial finishes only once the waits have returned: each must have
                    // timed out, and left nothing behind.
                    if trial % 2 == 0 { _ = waitsReturned.wait(timeout: 5) }
                    Self.spin(trial % 32 * 40)
                    operation.finish()
                case 1:
                    _ = go.wait()
                    for told in finishedTold { operation.onFinish { _ in told.mutate { $0 += 1 } } }
                case 2:
                    _ = go.wait()
                    for told in startedTold { operation.onStart { told.mutate { $0 += 1 } } }
                case 3:
                    _ = go.wait()
                    operation.delegate = delegate
                default:
                    _ = go.wait()
                    var timedOut = 0
                    for _ in 0..<20 {
                        do { try operation.wait(timeout: .nanoseconds(1)) } catch BatonError.timedOut { timedOut += 1 } catch {}
                    }
                    // Each wait that returned took its registration with it, finished or not.
                    leftBehind.mutate { $0 = operation.core.withLock { $0.waitCount } }
                    timedOutWaits.mutate { $0 = timedOut }
                    waitsReturned.open()
                }
            }
            XCTAssertTrue(eventually { operation.isFinished }, "trial \(trial): not finished")
            for (index, told) in finishedTold.enumerated() {
                XCTAssertEqual(told.value, 1, "trial \(trial): outcome observer \(index) told \(told.value) times")
            }
            for told in startedTold { XCTAssertLessThanOrEqual(told.value, 1, "trial \(trial)") }
            XCTAssertLessThanOrEqual(delegate.started.value, 1, "trial \(trial)")
            XCTAssertLessThanOrEqual(delegate.ended.value, 1, "trial \(trial)")
            XCTAssertEqual(leftBehind.value, 0, "trial \(trial): waits that returned left registrations behind")
            if trial % 2 == 0 {
                XCTAssertEqual(timedOutWaits.value, 20, "trial \(trial): a wait on an unfinished operation did not time out")
            }
            XCTAssertEqual(operation.core.withLock { $0.waitCount }, 0, "trial \(trial): a wait was left registered")
            XCTAssertNil(operation.core.withLock { $0.timeoutTimer })
        }
    }

    /// A timeout that runs out as the operation finishes from another thread: one outcome, told once,
    /// either the success or the timeout's failure, and no timer left behind.
    func testATimeoutRunningOutAsTheOperationFinishes() throws {
        for trial in 0..<trials {
            let operation = AsyncBlockOperation(
                { operation in
                    DispatchQueue.global().async {
                        Self.spin(trial % 50 * 200)
                        operation.finish()
                    }
                }, onCancel: { $0.finish() })
            operation.timeout = .microseconds(1 + trial % 20)
            let told = Locked<[String]>([])
            operation.onFinish { outcome in told.mutate { $0.append("\(outcome)") } }
            OperationQueue().addOperation(operation)
            XCTAssertTrue(eventually { operation.isFinished }, "trial \(trial): not finished")
            XCTAssertEqual(told.value.count, 1, "trial \(trial): \(told.value)")
            let outcome = try XCTUnwrap(told.value.first)
            XCTAssertTrue(outcome == "succeeded(())" || outcome.contains("timed out after"), "trial \(trial): \(outcome)")
            if ProcessInfo.processInfo.environment["BATON_OUT_OF_LINE_REPORT"] != nil {
                print("timeout trial \(trial): \(outcome)")
            }
            XCTAssertNil(operation.core.withLock { $0.timeoutTimer }, "trial \(trial): a timer was left behind")
        }
    }

    /// A small recorder read and exported in every format, over and over, while a group's children
    /// record into it from the workers, half of them failing, every name and message full of what the
    /// formats interpret: the records kept are exactly the most recent ones, whole.
    func testRecordsReadWhileChildrenRecordFromManyThreads() throws {
        let capacity = 64
        let children = 2_000
        let special = "\"quoted\"\n<b>&amp;#9829;\\tab\t"
        let recorder = try FlightRecorder(capacity: capacity)
        let operations: [ResultBlockOperation<Int>] = (0..<children).map { index in
            let operation = ResultBlockOperation<Int> { operation in
                if index % 2 == 0 {
                    operation.finish(with: index)
                } else {
                    operation.finish(throwing: Failure(message: "\(special) \(index)"))
                }
            }
            operation.name = "child \(index) \(special)"
            return operation
        }
        let group = GroupOperation(operations: operations)
        recorder.attach(to: group)
        let done = Locked(false)
        let reader = Thread {
            while !done.value {
                _ = recorder.records
                for format in [FlightRecorder.ExportFormat.chromeTrace, .graphviz, .mermaid, .textTree] {
                    _ = recorder.export(format)
                }
            }
        }
        reader.start()
        XCTAssertThrowsError(try group.run(timeout: .seconds(testTimeout)))
        done.mutate { $0 = true }

        let records = recorder.records
        let total = children + 1
        XCTAssertEqual(records.map(\.id), Array((total - capacity + 1)...total))
        XCTAssertEqual(recorder.droppedCount, total - capacity)
        let byName = Dictionary(uniqueKeysWithValues: operations.map { ($0.name!, $0) })
        for record in records {
            let operation = try XCTUnwrap(
                byName[record.name ?? ""], "record \(record.id) named \(String(describing: record.name))")
            XCTAssertEqual(record.typeName, "ResultBlockOperation<Int>")
            XCTAssertNotNil(record.startedAt)
            XCTAssertNotNil(record.finishedAt)
            XCTAssertNotNil(record.thread)
            XCTAssertEqual(record.parentID, 1, "placed in the group, whose own record was dropped")
            switch operation.outcome {
            case .succeeded?: XCTAssertEqual(record.status, .succeeded)
            case .failed(let error)?: XCTAssertEqual(record.status, .failed(String(describing: error)))
            default: XCTFail("\(record.id): \(String(describing: operation.outcome))")
            }
        }
        XCTAssertTrue(recorder.export(.chromeTrace).contains("child"))
    }

    private struct Failure: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }
}
