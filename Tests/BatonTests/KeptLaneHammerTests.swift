import Dispatch
import Foundation
import XCTest

@testable import Baton

/// The kept idle lane of the claim table (709dd69) under every control at once, from many threads.
/// Written by the review of that change.
final class KeptLaneHammerTests: BatonTestCase {
    /// Per trial a fresh scope (addresses are reused from trial to trial: a trial with limit 2 is
    /// followed by trials with limit 1), whose X is claimed by sequence steps (launch path, top lanes),
    /// a group's children, plain-queue claimants (some also claiming a process-wide category), while
    /// other threads cancel, add dependencies late, suspend the queue, toggle the limit, set and remove
    /// rates (on X, and on another category so that paces are non-empty). Checks: every operation
    /// finishes once, X never has more holders executing than the trial's largest limit, nothing stays
    /// held, every operation and the scope are freed.
    func testKeptLaneUnderScopesLimitsRatesCancelsAndLateDependencies() throws {
        let trials = Int(ProcessInfo.processInfo.environment["BATON_KEPT_LANE_TRIALS"] ?? "") ?? 60
        var executed = 0
        for trial in 0..<trials {
            let limit = trial % 3 == 0 ? 2 : 1
            let violations = Locked<[String]>([])
            let meter = ConcurrencyMeter()
            let otherMeter = ConcurrencyMeter()
            weak var weakScope: ExclusivityScope?
            var weakOps: [WeakBox] = []
            _ = try inScope { () throws -> ObjectIdentifier in
                let scope = ExclusivityScope("kept lane \(trial)")
                weakScope = scope
                let id = ObjectIdentifier(scope)
                if limit == 2 { try scope.setLimit(2, for: "X") }
                let x = OperationCategory("X", in: scope)
                let other = OperationCategory("kept lane other")
                func claimant(_ name: String, both: Bool = false) throws -> HammeredClaimant {
                    let op = HammeredClaimant(both ? [meter, otherMeter] : [meter], violations: violations, name: name)
                    try op.addExclusivity(both ? [x, other] : [x])
                    weakOps.append(WeakBox(op))
                    return op
                }
                let sequences = try (0..<3).map { s in
                    SequenceOperation<any Sendable>(operations: try (0..<5).map { try claimant("s\(s).\($0)") })
                }
                let group = GroupOperation(operations: try (0..<4).map { try claimant("g\($0)") })
                let plain = try (0..<12).map { try claimant("p\($0)", both: $0 % 4 == 0) }

                let queue = OperationQueue()
                queue.maxConcurrentOperationCount = trial % 2 == 0 ? 2 : -1
                let all: [AsyncOperation] = sequences + [group] + plain
                let go = DispatchSemaphore(value: 0)
                let done = DispatchGroup()
                let threads = 5
                for thread in 0..<threads {
                    done.enter()
                    Thread {
                        _ = go.wait(timeout: .now() + 10)
                        var random = SplitMix(state: UInt64(trial * 131 + thread))
                        switch thread {
                        case 0:
                            for _ in 0..<4 { plain[random.next(plain.count)].cancelChecked() }
                            if trial % 5 == 0 { sequences[random.next(3)].cancel() }
                        case 1:
                            for _ in 0..<6 {
                                let i = 1 + random.next(plain.count - 1)
                                plain[i].addDependency(plain[random.next(i)])
                            }
                        case 2:
                            for _ in 0..<6 {
                                queue.isSuspended = true
                                spinRounds(random.next(200) * 100)
                                queue.isSuspended = false
                            }
                        case 3:
                            for round in 0..<6 {
                                try? scope.setLimit(round % 2 == 0 ? 1 : limit, for: "X")
                                spinRounds(random.next(300) * 100)
                            }
                            try? scope.setLimit(limit, for: "X")
                        default:
                            guard trial % 4 == 1 else { break }
                            for round in 0..<4 {
                                if round % 2 == 0 {
                                    try? ExclusivityScope.process.setRate(1000, per: .milliseconds(1), for: "kept lane paced")
                                    try? scope.setRate(50, per: .milliseconds(1), for: "X")
                                } else {
                                    ExclusivityScope.process.removeRate(for: "kept lane paced")
                                    scope.removeRate(for: "X")
                                }
                                spinRounds(random.next(400) * 100)
                            }
                            ExclusivityScope.process.removeRate(for: "kept lane paced")
                            scope.removeRate(for: "X")
                        }
                        done.leave()
                    }.start()
                }
                for (index, op) in all.enumerated() {
                    queue.addOperation(op)
                    if index == 3 { for _ in 0..<threads { go.signal() } }
                }
                XCTAssertEqual(done.wait(timeout: .now() + testTimeout), .success)
                for op in all { waitFinished(op, timeout: testTimeout) }
                let leaves = weakOps.compactMap { $0.value as? HammeredClaimant }
                XCTAssertTrue(
                    eventually { leaves.allSatisfy { $0.finishes.value == 1 } },
                    "trial \(trial): \(leaves.filter { $0.finishes.value != 1 }.map(\.gateDump))")
                XCTAssertEqual(violations.value, [], "trial \(trial)")
                XCTAssertLessThanOrEqual(meter.most, limit, "trial \(trial): limit \(limit)")
                XCTAssertLessThanOrEqual(otherMeter.most, 1, "trial \(trial)")
                executed += meter.total
                drain(queue)
                return id
            }
            XCTAssertTrue(eventually { Gatekeeper.isIdle }, "trial \(trial): something stays held")
            XCTAssertTrue(eventually { weakOps.allSatisfy { $0.value == nil } }, "trial \(trial): an operation kept alive")
            XCTAssertTrue(eventually { weakScope == nil }, "trial \(trial): scope kept alive")
            if !violations.value.isEmpty || meter.most > limit { break }
        }
        XCTAssertGreaterThan(executed, 0, "claimants executed")
    }

    /// A scope with limit 4 whose X four operations hold at once (its lane then kept), freed; scopes
    /// are made until one takes its address; two operations claiming X there must not overlap.
    func testANewScopeAtAFreedScopesAddressFindsNoLimitInTheKeptLane() throws {
        let trials = Int(ProcessInfo.processInfo.environment["BATON_KEPT_LANE_TRIALS"] ?? "") ?? 60
        for trial in 0..<trials {
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = -1
            let oldID: ObjectIdentifier = try inScope {
                let scope = ExclusivityScope("old")
                try scope.setLimit(4, for: "X")
                let together = DispatchGroup()
                let ops = try (0..<4).map { _ -> AsyncBlockOperation in
                    together.enter()
                    let op = AsyncBlockOperation { op in
                        together.leave()
                        DispatchQueue.global().async {
                            _ = together.wait(timeout: .now() + testTimeout)
                            op.finish()
                        }
                    }
                    try op.addExclusivity(OperationCategory("X", in: scope))
                    return op
                }
                queue.addOperations(ops, waitUntilFinished: false)
                XCTAssertEqual(together.wait(timeout: .now() + testTimeout), .success, "limit 4 not in force")
                for op in ops { waitFinished(op) }
                drain(queue)
                return ObjectIdentifier(scope)
            }
            var keep: [ExclusivityScope] = []
            var found: ExclusivityScope?
            for _ in 0..<64 {
                let candidate = ExclusivityScope("new")
                if ObjectIdentifier(candidate) == oldID {
                    found = candidate
                    break
                }
                keep.append(candidate)
            }
            keep.removeAll()
            guard let scope = found else { continue }
            XCTAssertEqual(scope.limit(of: "X"), 1)
            let meter = ConcurrencyMeter()
            let ops = try (0..<3).map { _ -> MeteredOperation in
                let op = MeteredOperation(meter, lingers: 2_000...2_000)
                try op.addExclusivity(OperationCategory("X", in: scope))
                return op
            }
            queue.addOperations(ops, waitUntilFinished: false)
            for op in ops { waitFinished(op) }
            XCTAssertEqual(meter.most, 1, "trial \(trial): the new scope found the old limit")
            drain(queue)
        }
    }
}

final class WeakBox: @unchecked Sendable {
    weak var value: AnyObject?
    init(_ value: AnyObject) { self.value = value }
}
