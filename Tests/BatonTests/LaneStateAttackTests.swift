import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Attacks on the lane record's out-of-line part (more holders, a pace, a lender's hold; commit 2ddef80)
/// through operations: threads claim, cancel and group while others raise and lower limits and set,
/// change and remove rates, so that records gain and lose the part while held, waited for and kept
/// idle. `LANESTATE_ATTACK_TRIALS` raises the trials.
final class LaneStateAttackTests: XCTestCase {
    private static var scale: Int { Int(ProcessInfo.processInfo.environment["LANESTATE_ATTACK_TRIALS"] ?? "") ?? 1 }

    private final class Meter: @unchecked Sendable {
        private let lock = NSLock()
        private var now = 0
        private(set) var most = 0
        func enter() {
            lock.lock()
            now += 1
            most = max(most, now)
            lock.unlock()
        }
        func leave() {
            lock.lock()
            now -= 1
            lock.unlock()
        }
        func note(_ count: Int) {
            lock.lock()
            most = max(most, count)
            lock.unlock()
        }
        var peak: Int {
            lock.lock()
            defer { lock.unlock() }
            return most
        }
    }

    private final class Gate: @unchecked Sendable {
        private let semaphore = DispatchSemaphore(value: 0)
        func wait() { _ = semaphore.wait(timeout: .now() + 30) }
        func open(_ count: Int) { for _ in 0..<count { semaphore.signal() } }
    }

    private func eventually(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            if condition() { return true }
            usleep(1_000)
        }
        return condition()
    }

    /// Threads add operations holding a category (some together with a second one), groups whose
    /// children claim it under them, cancel them, while others raise and lower its limit and set,
    /// change and remove its rate: every operation finishes, no more than the highest limit ever set
    /// hold it at once at the top or under one group, nothing stays in the table, and the scope, once
    /// let go, is freed (its lanes kept idle or cooling go with it).
    func testLimitsAndRatesChangedWhileOperationsClaimFromManyThreads() throws {
        let trials = 6 * Self.scale
        for trial in 0..<trials {
            weak var weakScope: ExclusivityScope?
            do {
                let scope = ExclusivityScope("lane-state attack \(trial)")
                weakScope = scope
                try scope.setLimit(3, for: "api")
                let api = OperationCategory("api", in: scope)
                let other = OperationCategory("other", in: scope)
                let apiLane = Lane(name: Lane.Name(scope: ObjectIdentifier(scope), category: "api"), under: 0)
                let top = Meter()
                let viewed = Meter()
                let finished = DispatchGroup()
                func claimant(_ meter: Meter) -> AsyncBlockOperation {
                    let operation = AsyncBlockOperation { operation in
                        meter.enter()
                        DispatchQueue.global().async {
                            meter.leave()
                            operation.finish()
                        }
                    }
                    finished.enter()
                    operation.completionBlock = { finished.leave() }
                    return operation
                }
                var operations: [Operation] = []
                var childMeters: [Meter] = []
                for index in 0..<160 {
                    if index % 10 == 9 {
                        let meter = Meter()
                        childMeters.append(meter)
                        let children = (0..<6).map { _ in claimant(meter) }
                        for child in children { try child.addExclusivity(api) }
                        let group = GroupOperation(operations: children)
                        try group.addExclusivity(api)
                        finished.enter()
                        group.completionBlock = { finished.leave() }
                        operations.append(group)
                    } else {
                        let operation = claimant(top)
                        if index % 7 == 3 { try operation.addExclusivity(api, other) } else { try operation.addExclusivity(api) }
                        operations.append(operation)
                    }
                }
                let all = operations
                let queue = OperationQueue()
                queue.maxConcurrentOperationCount = 8
                let start = Gate()
                let workers = DispatchGroup()
                let changers = 2
                let stop = Meter()
                for slice in 0..<4 {
                    DispatchQueue.global().async(group: workers) {
                        start.wait()
                        for index in stride(from: slice, to: all.count, by: 4) { queue.addOperation(all[index]) }
                    }
                }
                DispatchQueue.global().async(group: workers) {
                    start.wait()
                    for index in stride(from: 5, to: all.count, by: 11) { all[index].cancel() }
                }
                for changer in 0..<changers {
                    DispatchQueue.global().async(group: workers) {
                        start.wait()
                        var round = 0
                        while true {
                            if stop.peak > 0 { break }
                            round += 1
                            // The live view copies the lane's state out of the table while it changes.
                            viewed.note(Gatekeeper.holdersAndPace(of: apiLane).holders.count)
                            if changer == 0 {
                                try? scope.setLimit(round % 2 == 0 ? 2 : 4, for: "api")
                                try? scope.setLimit(round % 3 + 1, for: "other")
                            } else {
                                switch round % 4 {
                                case 0: try? scope.setRate(50, per: .milliseconds(5), for: "api")
                                case 1: try? scope.setRate(3, per: .milliseconds(1), for: "api")
                                case 2: scope.removeRate(for: "api")
                                default: try? scope.setRate(2, per: .microseconds(300), for: "other")
                                }
                            }
                            if round > 400 { break }
                        }
                    }
                }
                start.open(5 + changers)
                let allFinished = finished.wait(timeout: .now() + 60)
                stop.enter()
                XCTAssertEqual(workers.wait(timeout: .now() + 30), .success, "trial \(trial): the threads never ended")
                XCTAssertEqual(allFinished, .success, "trial \(trial): not every operation finished")
                guard allFinished == .success else { return }
                XCTAssertLessThanOrEqual(top.peak, 4, "trial \(trial): more than the highest limit held it at the top")
                XCTAssertLessThanOrEqual(viewed.peak, 4, "trial \(trial): the live view saw more holders than the highest limit")
                for meter in childMeters { XCTAssertLessThanOrEqual(meter.peak, 4, "trial \(trial): under a group") }
                scope.removeRate(for: "api")
                scope.removeRate(for: "other")
                XCTAssertTrue(eventually(10) { Gatekeeper.isIdle }, "trial \(trial): something stays held")
            }
            XCTAssertTrue(eventually(10) { weakScope == nil }, "trial \(trial): the scope is kept")
        }
    }

    /// A count threads wait on: a holder keeps its category until the rate's changer has changed the
    /// rate twice more (so every hold spans a rate set and removed), with a timeout.
    private final class Rounds: @unchecked Sendable {
        private let condition = NSCondition()
        private var count = 0
        private var over = false
        var value: Int {
            condition.lock()
            defer { condition.unlock() }
            return count
        }
        var isOver: Bool {
            condition.lock()
            defer { condition.unlock() }
            return over
        }
        func bump() {
            condition.lock()
            count += 1
            condition.broadcast()
            condition.unlock()
        }
        func end() {
            condition.lock()
            over = true
            condition.broadcast()
            condition.unlock()
        }
        func wait(past target: Int) {
            let end = Date().addingTimeInterval(5)
            condition.lock()
            while count < target && !over && condition.wait(until: end) {}
            condition.unlock()
        }
    }

    /// Under an exclusive category (limit 1, the lane kept idle between claims while no rate is set)
    /// threads claim and cancel at once while another sets and removes a rate on it, each hold
    /// spanning two changes: its record gains the out-of-line part while held and while kept idle, and
    /// loses its pace. Never two at once, every operation finishes, nothing stays held.
    func testAnExclusiveLaneGainingAndLosingARateWhileHeldStaysExclusive() throws {
        let trials = 6 * Self.scale
        for trial in 0..<trials {
            let scope = ExclusivityScope("lane-state exclusive \(trial)")
            let category = OperationCategory("x", in: scope)
            let meter = Meter()
            let rounds = Rounds()
            let finished = DispatchGroup()
            let operations = (0..<60).map { _ -> AsyncBlockOperation in
                let operation = AsyncBlockOperation { operation in
                    meter.enter()
                    let seen = rounds.value
                    DispatchQueue.global().async {
                        rounds.wait(past: seen + 2)
                        meter.leave()
                        operation.finish()
                    }
                }
                finished.enter()
                operation.completionBlock = { finished.leave() }
                return operation
            }
            for operation in operations { try operation.addExclusivity(category) }
            let queue = OperationQueue()
            let start = Gate()
            let workers = DispatchGroup()
            for slice in 0..<3 {
                DispatchQueue.global().async(group: workers) {
                    start.wait()
                    for index in stride(from: slice, to: operations.count, by: 3) { queue.addOperation(operations[index]) }
                }
            }
            DispatchQueue.global().async(group: workers) {
                start.wait()
                for index in stride(from: 2, to: operations.count, by: 9) { operations[index].cancel() }
            }
            DispatchQueue.global().async(group: workers) {
                start.wait()
                var round = 0
                while !rounds.isOver && round < 100_000 {
                    round += 1
                    if round % 2 == 0 {
                        try? scope.setRate(1 + round % 3, per: .microseconds(100), for: "x")
                    } else {
                        scope.removeRate(for: "x")
                    }
                    rounds.bump()
                }
                scope.removeRate(for: "x")
            }
            start.open(5)
            let allFinished = finished.wait(timeout: .now() + 60)
            rounds.end()
            XCTAssertEqual(workers.wait(timeout: .now() + 30), .success, "trial \(trial)")
            XCTAssertEqual(allFinished, .success, "trial \(trial): not every operation finished")
            XCTAssertEqual(meter.peak, 1, "trial \(trial): two held an exclusive category at once")
            XCTAssertTrue(eventually(10) { Gatekeeper.isIdle }, "trial \(trial): something stays held")
        }
    }
}
