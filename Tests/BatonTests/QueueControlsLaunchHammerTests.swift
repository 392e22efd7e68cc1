import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Stop 45's final attack on the barrier take-back and the dependency flag, along the attack surfaces
/// it touches: claimants of a final class added by Foundation and launched by Baton (`addChain`,
/// `runForOutcome`), some with a condition, on a queue that may run on a serial `underlyingQueue` and
/// starts with a width of 0 (raised to 1 to 3 while suspended), behind two barriers whose blocks
/// launch further claimants onto the same queue, with a failed dependency added from another thread
/// while the launches race, and cancels. Everything finishes, the limit holds, nothing executes twice,
/// nothing stays held. 7,500 trials over five seeds when written: no failure.
final class QueueControlsLaunchHammerTests: BatonTestCase {
    func testLaunchedClaimantsAmongFoundationsQueueControls() throws {
        let env = ProcessInfo.processInfo.environment
        let trials = env["BATON_TRIALS"].flatMap(Int.init) ?? 100
        var random = SplitMix(state: UInt64(env["BATON_SEED"].flatMap(Int.init) ?? 9))
        var failures: [String] = []
        for trial in 0..<trials {
            let scope = ExclusivityScope("queue-controls-launch-\(trial)")
            let limit = 1 + random.next(2)
            if limit > 1 { try scope.setLimit(limit, for: "X") }
            let x = OperationCategory("X", in: scope)
            let meter = ConcurrencyMeter()
            let serial = DispatchQueue(label: "queue-controls-launch.\(trial)")
            let queue = OperationQueue()
            if random.next(2) == 0 { queue.underlyingQueue = serial }
            let width = 1 + random.next(3)
            queue.maxConcurrentOperationCount = 0
            let count = 10
            let failedDependency = ImmediateOperation(.failure(TestError(code: 9)))
            _ = try? failedDependency.runForOutcome(timeout: .seconds(10))
            let executions = Locked([Int](repeating: 0, count: count))
            let ops = try (0..<count).map { index -> AsyncBlockOperation in
                let op = AsyncBlockOperation { op in
                    executions.mutate { $0[index] += 1 }
                    meter.enter()
                    DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(Int.random(in: 0...200))) {
                        meter.leave()
                        op.finish()
                    }
                }
                try op.addExclusivity(x)
                if random.next(4) == 0 { try op.addCondition(.block("ok") { true }) }
                return op
            }
            // Claimants launched from inside the queue's barrier blocks (re-entrant launches).
            let extras = try (0..<2).map { _ -> AsyncBlockOperation in
                let op = AsyncBlockOperation { op in
                    meter.enter()
                    DispatchQueue.global().async {
                        meter.leave()
                        op.finish()
                    }
                }
                try op.addExclusivity(x)
                return op
            }
            let hows = (0..<count).map { _ in random.next(3) }
            let spins = (0..<count).map { _ in random.next(3000) }
            let lateFails = (0..<2).map { _ in (random.next(count), random.next(4000)) }
            let cancels = (0..<2).map { _ in (random.next(count), random.next(6000)) }
            let widthSpin = random.next(6000)
            let barrierSpins = (0..<2).map { _ in random.next(6000) }
            let line = StartingLine()
            for half in 0..<2 {
                line.thread {
                    for index in stride(from: half, to: count, by: 2) {
                        spinRounds(spins[index])
                        let op = ops[index]
                        switch hows[index] {
                        case 0: queue.addOperation(op)
                        case 1: _ = try? queue.addChain(first: op) { _ in nil }
                        default: DispatchQueue.global().async { _ = try? op.runForOutcome(on: queue, timeout: .seconds(60)) }
                        }
                    }
                }
            }
            line.thread {
                for (index, spin) in lateFails {
                    spinRounds(spin)
                    // A failed dependency added to an operation that may not have started: if it starts
                    // after this returns, it must not execute.
                    ops[index].addDependency(failedDependency)
                }
            }
            line.thread {
                for (index, spin) in cancels {
                    spinRounds(spin)
                    ops[index].cancel()
                }
            }
            line.thread {
                for (spin, extra) in zip(barrierSpins, extras) {
                    spinRounds(spin)
                    queue.addBarrierBlock { _ = try? queue.addChain(first: extra) { _ in nil } }
                }
                spinRounds(widthSpin)
                queue.isSuspended = true
                queue.maxConcurrentOperationCount = width
                queue.isSuspended = false
            }
            XCTAssertTrue(line.release(timeout: 30))
            defer { withExtendedLifetime(serial) {} }
            let finished = eventually(timeout: 15) { (ops + extras).allSatisfy(\.isFinished) }
            if !finished || meter.most > limit {
                failures.append(
                    "trial \(trial): finished \(finished) most \(meter.most) limit \(limit) width \(width) hows \(hows)\n"
                        + (ops + extras).enumerated().map { index, op in
                            let (admission, held) = op.core.withLock { ($0.gate?.admission, $0.gate?.held ?? []) }
                            return "\(index < count ? "op \(index)" : "extra \(index - count)") \(op.reference): "
                                + "finished \(op.isFinished) cancelled \(op.isCancelled) executions "
                                + "\(index < count ? executions.value[index] : -1) "
                                + "\(op.gateWaitDescription() ?? "-") \(String(describing: FoundationQueueState.of(op))) "
                                + "\(String(describing: admission)) holds \(held.count) "
                                + "dependencies finished \(op.dependencies.map(\.isFinished)) "
                                + FoundationDump.of(op)
                        }.joined(separator: "\n") + "\nqueue: " + FoundationDump.of(queue))
                print(failures.last!)
                for op in ops + extras { op.cancel() }
                _ = eventually(timeout: 10) { (ops + extras).allSatisfy(\.isFinished) }
            }
            if executions.value.contains(where: { $0 > 1 }) { failures.append("trial \(trial): double execution") }
            if !eventually(timeout: 5, { Gatekeeper.isIdle }) {
                failures.append("trial \(trial): not idle")
                break
            }
        }
        XCTAssertEqual(failures.count, 0, "\(failures.count) failures in \(trials) trials")
    }
}
