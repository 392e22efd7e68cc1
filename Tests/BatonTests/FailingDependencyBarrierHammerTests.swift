import Dispatch
import Foundation
import XCTest

@testable import Baton

/// From the second review of stop 45 (its hammer): claimants of X of a final class (which skip
/// reading `dependencies` until one is added), a quarter of them with an unfinished dependency that
/// fails while they wait, a third with a condition, added by Foundation, `addChain` and
/// `runForOutcome`, behind one to three barriers on a queue of width 1, 2 or unlimited that is
/// suspended and resumed twice, limits 1 to 3, and a holder of X released at a random moment. Nothing
/// hangs, the limit holds, nothing executes twice, nothing whose dependency failed executes, and
/// nothing stays held.
final class FailingDependencyBarrierHammerTests: BatonTestCase {
    func testBarriersSuspensionAndFailingDependencies() throws {
        let env = ProcessInfo.processInfo.environment
        let trials = env["BATON_TRIALS"].flatMap(Int.init) ?? 60
        var random = SplitMix(state: UInt64(env["BATON_SEED"].flatMap(Int.init) ?? 451))
        var failures: [String] = []
        for trial in 0..<trials {
            let scope = ExclusivityScope("failing-dependency-barrier-\(trial)")
            let limit = 1 + random.next(3)
            if limit > 1 { try scope.setLimit(limit, for: "X") }
            let x = OperationCategory("X", in: scope)
            let meter = ConcurrencyMeter()
            let queue = OperationQueue()
            let m = random.next(3)
            queue.maxConcurrentOperationCount = m == 0 ? 1 : (m == 1 ? 2 : -1)
            let (holder, holderRelease) = try holderReleasedLater(claiming: x)
            let count = 10
            var ops: [AsyncBlockOperation] = []
            var doomed: [Bool] = []
            var deps: [ManualOperation?] = []
            let executions = Locked([Int](repeating: 0, count: count))
            for index in 0..<count {
                let op = AsyncBlockOperation { op in
                    executions.mutate { $0[index] += 1 }
                    meter.enter()
                    DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(Int.random(in: 0...300))) {
                        meter.leave()
                        op.finish()
                    }
                }
                op.name = "op\(index)"
                try op.addExclusivity(x)
                if random.next(3) == 0 { try op.addCondition(.block("ok") { true }) }
                let kind = random.next(4)
                if kind == 0 {
                    let dep = ManualOperation()
                    op.addDependency(dep)
                    OperationQueue().addOperation(dep)
                    deps.append(dep)
                    doomed.append(true)
                } else {
                    deps.append(nil)
                    doomed.append(false)
                }
                ops.append(op)
            }
            let hows = (0..<count).map { _ in random.next(3) }
            let spins = (0..<count).map { _ in random.next(3000) }
            let barriers = (0..<(1 + random.next(3))).map { _ in random.next(6000) }
            let suspends = (0..<2).map { _ in (random.next(6000), random.next(6000)) }
            let failSpins = (0..<count).map { _ in random.next(8000) }
            let holderSpin = random.next(20000)
            let line = StartingLine()
            let allOps = ops
            let allDeps = deps
            for half in 0..<2 {
                line.thread {
                    for index in stride(from: half, to: count, by: 2) {
                        spinRounds(spins[index])
                        let op = allOps[index]
                        switch hows[index] {
                        case 0: queue.addOperation(op)
                        case 1: _ = try? queue.addChain(first: op) { _ in nil }
                        default: DispatchQueue.global().async { _ = try? op.runForOutcome(on: queue, timeout: .seconds(60)) }
                        }
                    }
                }
            }
            line.thread {
                for spin in barriers {
                    spinRounds(spin)
                    queue.addBarrierBlock {}
                }
            }
            line.thread {
                for (a, b) in suspends {
                    spinRounds(a)
                    queue.isSuspended = true
                    spinRounds(b)
                    queue.isSuspended = false
                }
            }
            line.thread {
                for (dep, spin) in zip(allDeps, failSpins) {
                    guard let dep else { continue }
                    spinRounds(spin)
                    _ = eventually(timeout: 5) { dep.isExecuting }
                    dep.finish(with: .failure(TestError(code: 7)))
                }
                spinRounds(holderSpin)
                holderRelease.signal()
            }
            XCTAssertTrue(line.release(timeout: 30))
            queue.isSuspended = false
            let finished = eventually(timeout: 15) { allOps.allSatisfy(\.isFinished) && holder.isFinished }
            let ex = executions.value
            let wrong = (0..<count).filter { doomed[$0] ? ex[$0] != 0 : ex[$0] > 1 }
            if !finished || meter.most > limit || !wrong.isEmpty {
                let message =
                    "trial \(trial) limit \(limit) m \(queue.maxConcurrentOperationCount) hows \(hows) doomed \(doomed): finished \(finished), most \(meter.most), wrong \(wrong) ex \(ex)\n"
                    + allOps.map {
                        "\($0.name!): finished \($0.isFinished) \($0.gateWaitDescription() ?? "-") fq \(String(describing: FoundationQueueState.of($0))) outcome \(String(describing: $0.outcome))"
                    }.joined(separator: "\n")
                print(message)
                failures.append(message)
                for op in allOps { op.cancel() }
                _ = eventually(timeout: 10) { allOps.allSatisfy(\.isFinished) }
            }
            if !eventually(timeout: 5, { Gatekeeper.isIdle }) {
                failures.append("trial \(trial): table not idle")
                break
            }
        }
        XCTAssertEqual(failures.count, 0, "\(failures.count) failures in \(trials) trials")
    }
}
