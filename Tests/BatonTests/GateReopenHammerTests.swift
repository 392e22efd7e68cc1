import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Gates closed again and begun anew (a grant declined or taken back as a dependency is added late),
/// hammered along each path: waiters in a plain queue (announce), children of a group held back until
/// granted (launch), and a chain's steps, while holders give the category back, operations and
/// groups are cancelled, queues and groups are suspended and resumed, and (`GATE_ATTACK_STARTS` set)
/// waiters are started by hand. Each trial ends, nothing executes twice or after a `cancel()` that
/// returned first, no dependency added in time is overtaken, and the category never has more holders
/// executing than its limit. The launch-path hammer hung in about one run in four at 800 trials
/// before a dependency added to an operation its queue had already dispatched left the grant.
final class GateReopenHammerTests: BatonTestCase {
    private func trials(_ fallback: Int) -> Int {
        Int(ProcessInfo.processInfo.environment["GATE_ATTACK_TRIALS"] ?? "") ?? fallback
    }

    /// Announce path: waiters parked at their gate in a plain queue; dependencies (claiming nothing)
    /// added while the holder gives X back, cancels, suspension toggles and second starts.
    func testReopenAlongTheAnnouncePathRacingDependenciesCancelsSuspensionAndStarts() throws {
        for trial in 0..<trials(60) {
            let x = OperationCategory("X", in: ExclusivityScope("attack-reopen-announce-\(trial)"))
            let limit = trial % 3 == 2 ? 2 : 1
            if limit > 1 { try x.scope.setLimit(limit, for: "X") }
            let meter = ConcurrencyMeter()
            let violations = Locked<[String]>([])
            let holders = try (0..<limit).map { _ in try holding(x) }
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = trial % 2 == 0 ? 1 : 1_000
            let waiters = try (0..<12).map { index -> HammeredClaimant in
                let waiter = HammeredClaimant([meter], violations: violations, name: "w\(index)", checksDependencies: true)
                try waiter.addExclusivity(x)
                if index % 3 == 1 { try waiter.addCondition(.block("ok") { true }) }
                return waiter
            }
            for waiter in waiters { queue.addOperation(waiter) }
            XCTAssertTrue(
                eventually(timeout: testTimeout) {
                    waiters.allSatisfy { $0.gateWaitDescription()?.hasPrefix("waiting for '") == true }
                })
            let dependencies = (0..<12).map { index in
                HammeredClaimant([], violations: violations, name: "d\(index)", checksDependencies: true)
            }
            let dependencyQueue = OperationQueue()
            let line = StartingLine()
            var seed = SplitMix(state: UInt64(trial))
            let order = (0..<12).map { _ in seed.next(12) }
            // Even trials: every dependency is added while its waiter waits at the gate (before the holder
            // gives X back), so it must never execute before it finished. Odd trials: added racing the
            // grants (Foundation itself may then start an operation whose dependency came too late).
            let early = trial % 2 == 0
            if early {
                for index in order { waiters[index].addDependency(dependencies[index]) }
                for dependency in dependencies { dependencyQueue.addOperation(dependency) }
            } else {
                for waiter in waiters { waiter.checksDependencies = false }
            }
            line.thread {
                guard !early else { return }
                for index in order {
                    waiters[index].addDependency(dependencies[index])
                }
                for dependency in dependencies { dependencyQueue.addOperation(dependency) }
            }
            line.thread { for holder in holders { holder.finish(with: 0) } }
            line.thread {
                var random = SplitMix(state: UInt64(trial * 31 + 1))
                for _ in 0..<4 { waiters[random.next(12)].cancelChecked() }
                if trial % 5 == 0 {
                    queue.cancelAllOperations()
                    for waiter in waiters {
                        let notExecuting = waiter.core.withLock { !$0.life.isExecuting }
                        if notExecuting && waiter.executions.value == 0 { waiter.cancelledBeforeExecuting.mutate { $0 = true } }
                    }
                }
            }
            line.thread {
                for _ in 0..<5 {
                    queue.isSuspended = true
                    queue.isSuspended = false
                }
            }
            line.thread {
                var random = SplitMix(state: UInt64(trial * 17 + 3))
                if ProcessInfo.processInfo.environment["GATE_ATTACK_STARTS"] != nil {
                    for _ in 0..<3 { waiters[random.next(12)].start() }
                }
            }
            XCTAssertTrue(line.release(timeout: 10), "trial \(trial): a thread never returned")
            guard eventually(timeout: testTimeout, { (waiters + dependencies).allSatisfy(\.isFinished) }) else {
                XCTFail("trial \(trial): never finished\n" + waiters.map(\.gateDump).joined(separator: "\n"))
                break
            }
            XCTAssertTrue(
                eventually(timeout: testTimeout) { (waiters + dependencies).allSatisfy { $0.finishes.value == 1 } },
                "trial \(trial): finishes \(waiters.map { $0.finishes.value })")
            XCTAssertTrue(waiters.allSatisfy { $0.executions.value <= 1 }, "trial \(trial)")
            XCTAssertEqual(violations.value, [], "trial \(trial) diagnostics \(diagnostics.allKinds)")
            XCTAssertLessThanOrEqual(meter.most, limit, "trial \(trial)")
            drain(queue)
            XCTAssertTrue(eventually(timeout: testTimeout) { Gatekeeper.isIdle }, "trial \(trial): something stays held")
            if !violations.value.isEmpty || meter.most > limit || waiters.contains(where: { !$0.isFinished }) { break }
        }
    }

    /// Launch path: children of a group (which holds nothing) parked outside its queue, waiting for X;
    /// the group suspended and resumed from one thread, dependencies (claiming nothing) added to
    /// children, children and sometimes the group cancelled, while the holder gives X back.
    func testReopenAlongTheLaunchPathRacingGroupSuspensionDependenciesAndCancels() throws {
        for trial in 0..<trials(400) {
            let x = OperationCategory("X", in: ExclusivityScope("attack-reopen-launch-\(trial)"))
            let limit = trial % 3 == 2 ? 2 : 1
            if limit > 1 { try x.scope.setLimit(limit, for: "X") }
            let meter = ConcurrencyMeter()
            let violations = Locked<[String]>([])
            let holders = try (0..<limit).map { _ in try holding(x) }
            let children = try (0..<10).map { index -> HammeredClaimant in
                let child = HammeredClaimant([meter], violations: violations, name: "c\(index)", checksDependencies: true)
                try child.addExclusivity(x)
                if index % 3 == 1 { try child.addCondition(.block("ok") { true }) }
                return child
            }
            let group = GroupOperation(
                operations: children,
                maxConcurrentOperationCount: trial % 4 == 3 ? 1 : OperationQueue.defaultMaxConcurrentOperationCount)
            let groupQueue = OperationQueue()
            groupQueue.addOperation(group)
            XCTAssertTrue(
                eventually(timeout: testTimeout) {
                    children.allSatisfy { $0.gateWaitDescription()?.hasPrefix("waiting for '") == true }
                })
            let dependencies = (0..<10).map { index in
                HammeredClaimant([], violations: violations, name: "d\(index)", checksDependencies: true)
            }
            let dependencyQueue = OperationQueue()
            let line = StartingLine()
            let cancelsGroup = trial % 5 == 4
            let early = trial % 2 == 0
            if early {
                for index in 0..<10 where index % 3 != 0 { children[index].addDependency(dependencies[index]) }
                for dependency in dependencies { dependencyQueue.addOperation(dependency) }
            } else {
                for child in children { child.checksDependencies = false }
            }
            line.thread {
                guard !early else { return }
                for index in 0..<10 where index % 3 != 0 { children[index].addDependency(dependencies[index]) }
                for dependency in dependencies { dependencyQueue.addOperation(dependency) }
            }
            line.thread { for holder in holders { holder.finish(with: 0) } }
            line.thread {
                for _ in 0..<6 {
                    group.suspend()
                    group.resume()
                }
            }
            line.thread {
                var random = SplitMix(state: UInt64(trial * 13 + 5))
                for _ in 0..<3 { children[random.next(10)].cancelChecked() }
                if cancelsGroup { group.cancel() }
            }
            line.thread {
                var random = SplitMix(state: UInt64(trial * 19 + 7))
                if ProcessInfo.processInfo.environment["GATE_ATTACK_STARTS"] != nil {
                    for _ in 0..<2 { children[random.next(10)].start() }
                }
            }
            XCTAssertTrue(line.release(timeout: 10), "trial \(trial): a thread never returned")
            group.resume()
            guard eventually(timeout: testTimeout, { group.isFinished }) else {
                XCTFail("trial \(trial): the group never finished\n" + children.map(\.gateDump).joined(separator: "\n"))
                break
            }
            for operation in children + dependencies { waitFinished(operation, timeout: testTimeout) }
            XCTAssertTrue(
                eventually(timeout: testTimeout) { (children + dependencies).allSatisfy { $0.finishes.value == 1 } },
                "trial \(trial): finishes \(children.map { $0.finishes.value })")
            XCTAssertTrue(children.allSatisfy { $0.executions.value <= 1 }, "trial \(trial)")
            XCTAssertEqual(violations.value, [], "trial \(trial) diagnostics \(diagnostics.allKinds)")
            XCTAssertLessThanOrEqual(meter.most, limit, "trial \(trial)")
            if !cancelsGroup, group.outcome?.isSuccess == true {
                XCTAssertTrue(children.allSatisfy { $0.executions.value == 1 || $0.isCancelled }, "trial \(trial)")
            }
            XCTAssertTrue(eventually(timeout: testTimeout) { Gatekeeper.isIdle }, "trial \(trial): something stays held")
            if !violations.value.isEmpty || meter.most > limit || !group.isFinished { break }
        }
    }

    /// A chain's steps claim X on a user queue whose suspension is toggled from one thread while the
    /// holder gives X back and a step or the chain is cancelled.
    func testReopenOfAChainsStepsOnAQueueWhoseSuspensionIsToggled() throws {
        for trial in 0..<trials(80) {
            let x = OperationCategory("X", in: ExclusivityScope("attack-reopen-chain-\(trial)"))
            let meter = ConcurrencyMeter()
            let violations = Locked<[String]>([])
            let holder = try holding(x)
            let steps = try (0..<4).map { index -> HammeredClaimant in
                let step = HammeredClaimant([meter], violations: violations, name: "s\(index)", checksDependencies: true)
                try step.addExclusivity(x)
                if index % 2 == 1 { try step.addCondition(.block("ok") { true }) }
                return step
            }
            let queue = OperationQueue()
            if trial % 2 == 0 { queue.maxConcurrentOperationCount = 1 }
            let handle = try queue.addChain(steps)
            XCTAssertTrue(eventually(timeout: testTimeout) { steps[0].gateWaitDescription()?.hasPrefix("waiting for '") == true })
            let line = StartingLine()
            let suspendedFirst = (trial / 4) % 2 == 0
            if suspendedFirst { queue.isSuspended = true }
            line.thread { holder.finish(with: 0) }
            line.thread {
                if suspendedFirst {
                    var spin = 0
                    for index in 0..<Int.random(in: 0...3_000) { spin &+= index }
                    queue.isSuspended = false
                    _ = spin
                }
                for _ in 0..<20 {
                    queue.isSuspended = true
                    queue.isSuspended = false
                }
            }
            let mode = trial % 4
            line.thread {
                if mode == 1 { steps[1].cancelChecked() }
                if mode == 2 { handle.cancel() }
                if mode == 3 { steps[0].cancelChecked() }
            }
            XCTAssertTrue(line.release(timeout: 10), "trial \(trial): a thread never returned")
            queue.isSuspended = false
            let outcome = try? handle.waitToOutcome(timeout: testTimeout)
            XCTAssertNotNil(outcome, "trial \(trial): the chain never ended: \(steps.map { $0.gateWaitDescription() ?? "-" })")
            for step in steps { waitFinished(step, timeout: testTimeout) }
            XCTAssertTrue(steps.allSatisfy { $0.executions.value <= 1 }, "trial \(trial)")
            XCTAssertEqual(violations.value, [], "trial \(trial)")
            XCTAssertLessThanOrEqual(meter.most, 1, "trial \(trial)")
            if mode == 0 { XCTAssertEqual(steps.map { $0.executions.value }, [1, 1, 1, 1], "trial \(trial)") }
            XCTAssertTrue(eventually(timeout: testTimeout) { Gatekeeper.isIdle }, "trial \(trial): something stays held")
            if outcome == nil || !violations.value.isEmpty { break }
        }
    }
}
