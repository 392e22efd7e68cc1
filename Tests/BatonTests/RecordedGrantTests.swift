import Foundation
import XCTest

@testable import Baton

/// Recorded waits for a contended category: group children (launch path) and plain-queue claimants
/// (announce path), some cancelled from another thread while they wait, some given a late
/// dependency: each record has at most one wait for the categories, labelled with them.
/// Waits recorded through the one-step grant (17e0bd8): contended claims on both paths, with cancels
/// and late dependencies. Written by the review of that change.
final class RecordedGrantTests: BatonTestCase {
    func testEveryContendedClaimRecordsOneLabelledWait() throws {
        let trials = Int(ProcessInfo.processInfo.environment["BATON_TRIALS"] ?? "") ?? 40
        var waitsSeen = 0
        for trial in 0..<trials {
            let scope = ExclusivityScope("rec")
            let x = OperationCategory("X", in: scope)
            let violations = Locked<[String]>([])
            let meter = ConcurrencyMeter()
            let recorder = FlightRecorder()
            let children = try (0..<10).map { i -> HammeredClaimant in
                let op = HammeredClaimant([meter], violations: violations, name: "c\(i)")
                try op.addExclusivity(x)
                return op
            }
            let plain = try (0..<10).map { i -> HammeredClaimant in
                let op = HammeredClaimant([meter], violations: violations, name: "p\(i)")
                try op.addExclusivity(x)
                return op
            }
            let group = GroupOperation(operations: children)
            let queue = OperationQueue()
            recorder.attach(to: group)
            recorder.attach(to: queue)
            let go = DispatchSemaphore(value: 0)
            let done = DispatchSemaphore(value: 0)
            Thread {
                _ = go.wait(timeout: .now() + 10)
                var random = SplitMix(state: UInt64(trial))
                for _ in 0..<3 { (children + plain)[random.next(20)].cancelChecked() }
                for _ in 0..<2 { plain[1 + random.next(9)].addDependency(plain[0]) }
                done.signal()
            }.start()
            queue.addOperation(group)
            for op in plain { queue.addOperation(op) }
            go.signal()
            XCTAssertEqual(done.wait(timeout: .now() + testTimeout), .success)
            for op in children + plain { waitFinished(op) }
            waitFinished(group)
            drain(queue)
            XCTAssertLessThanOrEqual(meter.most, 1)
            XCTAssertEqual(violations.value, [])
            for record in recorder.records where record.name?.first == "c" || record.name?.first == "p" {
                waitsSeen += record.waits.count
                XCTAssertLessThanOrEqual(record.waits.count, 2, "trial \(trial) \(record.name!): \(record.waits)")
                for wait in record.waits {
                    XCTAssertEqual(wait.what, "'X' in rec", "trial \(trial) \(record.name!)")
                    XCTAssertLessThanOrEqual(wait.began, wait.ended)
                }
            }
            XCTAssertTrue(eventually { Gatekeeper.isIdle })
        }
        XCTAssertGreaterThan(waitsSeen, 0, "contended claims recorded their waits")
    }
}
