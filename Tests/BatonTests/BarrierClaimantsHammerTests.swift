import Dispatch
import Foundation
import XCTest

@testable import Baton

final class MeteredClaimant: AsyncOperation, @unchecked Sendable {
    let meter: ConcurrencyMeter?
    let executions = Locked(0)
    init(_ meter: ConcurrencyMeter?, name: String) {
        self.meter = meter
        super.init()
        self.name = name
    }
    override func execute() {
        executions.increment()
        meter?.enter()
        DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(Int.random(in: 0...300))) {
            self.meter?.leave()
            self.finish()
        }
    }
    var dump: String {
        let gate = core.withLock { state in "\(state.gate.map { "\($0.admission)" } ?? "no gate"), \(state.life)" }
        return
            "\(name!): finished \(isFinished) exec \(executions.value) \(gateWaitDescription() ?? "-") \(gate) fq \(String(describing: FoundationQueueState.of(self)))"
    }
}

/// From the review of stop 45's barrier fix (its hammer): barriers (one to three, on two queues) among
/// claimants of X added by Foundation and launched by Baton (`addChain`, `runForOutcome` blocking and
/// async), some of them groups whose children claim X too, half of them with a condition in every
/// other trial, limits 1 to 3, a holder of X released at a random moment, and cancels. The meter never
/// exceeds the limit, nothing executes twice, everything finishes, nothing stays held. With
/// conditions and the fix's missed path (a grant after a condition), 3 trials in 4,000 hung.
final class BarrierClaimantsHammerTests: BatonTestCase {
    func testBarriersAmongLaunchedClaimants() throws {
        let env = ProcessInfo.processInfo.environment
        let trials = env["BATON_TRIALS"].flatMap(Int.init) ?? 60
        var random = SplitMix(state: UInt64(env["BATON_SEED"].flatMap(Int.init) ?? 45))
        var failures: [String] = []
        for trial in 0..<trials {
            let conditions = env["BATON_CONDITIONS"].map { $0 == "1" } ?? (trial % 2 == 1)
            let scope = ExclusivityScope("barrier-claimants-hammer-\(trial)")
            let limit = 1 + random.next(3)
            if limit > 1 { try scope.setLimit(limit, for: "X") }
            let x = OperationCategory("X", in: scope)
            let meter = ConcurrencyMeter()
            let queues = (0..<2).map { _ -> OperationQueue in
                let queue = OperationQueue()
                let m = random.next(3)
                queue.maxConcurrentOperationCount = m == 0 ? 1 : (m == 1 ? 2 : -1)
                return queue
            }
            let releases = queues.map { queue -> DispatchSemaphore in
                let release = DispatchSemaphore(value: 0)
                queue.addOperation { _ = release.wait(timeout: .now() + 60) }
                return release
            }
            // A holder of X elsewhere.
            let (holder, holderRelease) = try holderReleasedLater(claiming: x)

            let count = 12
            var allM: [AsyncOperation] = []
            var meteredM: [MeteredClaimant] = []
            var topM: [(op: AsyncOperation, how: Int, queue: Int, spin: Int)] = []
            for index in 0..<count {
                let isGroup = random.next(6) == 0
                let op: AsyncOperation
                if isGroup {
                    let children = (0..<2).map { c -> MeteredClaimant in
                        let child = MeteredClaimant(nil, name: "op\(index).\(c)")
                        meteredM.append(child)
                        return child
                    }
                    for child in children { try child.addExclusivity(x) }
                    let group = GroupOperation(operations: children)
                    group.name = "group\(index)"
                    op = group
                } else {
                    let m = MeteredClaimant(meter, name: "op\(index)")
                    meteredM.append(m)
                    op = m
                }
                try op.addExclusivity(x)
                if conditions && random.next(2) == 0 { try op.addCondition(.block("ok") { true }) }
                allM.append(op)
                topM.append((op, random.next(4), random.next(2), random.next(3000)))
            }
            let top = topM
            let all = allM
            let metered = meteredM
            let barriers = (0..<(1 + random.next(3))).map { _ in (random.next(2), random.next(6000)) }
            let cancels = (0..<2).map { _ in (random.next(count), random.next(6000)) }
            let releaseSpins = queues.map { _ in random.next(20000) }
            let holderSpin = random.next(20000)
            let line = StartingLine()
            for half in 0..<2 {
                line.thread {
                    for index in stride(from: half, to: count, by: 2) {
                        let entry = top[index]
                        spinRounds(entry.spin)
                        let queue = queues[entry.queue]
                        let op = entry.op
                        switch entry.how {
                        case 0: queue.addOperation(op)
                        case 1: _ = try? queue.addChain(first: op) { _ in nil }
                        case 2: DispatchQueue.global().async { _ = try? op.runForOutcome(on: queue, timeout: .seconds(60)) }
                        default: Task.detached { _ = try? await op.runForOutcome(on: queue) }
                        }
                    }
                }
            }
            line.thread {
                for (q, spin) in barriers {
                    spinRounds(spin)
                    queues[q].addBarrierBlock {}
                }
            }
            line.thread {
                for (index, spin) in cancels {
                    spinRounds(spin)
                    all[index].cancel()
                }
            }
            line.thread {
                for (release, spin) in zip(releases, releaseSpins) {
                    spinRounds(spin)
                    release.signal()
                }
                spinRounds(holderSpin)
                holderRelease.signal()
            }
            XCTAssertTrue(line.release(timeout: 30))
            let finished = eventually(timeout: 15) { all.allSatisfy(\.isFinished) && holder.isFinished }
            if !finished || meter.most > limit {
                let message =
                    "trial \(trial) limit \(limit) queues \(queues.map(\.maxConcurrentOperationCount)) barriers \(barriers) hows \(top.map(\.how)) qs \(top.map(\.queue)): finished \(finished), most \(meter.most)\n"
                    + metered.map(\.dump).joined(separator: "\n") + "\n"
                    + all.filter { !($0 is MeteredClaimant) }.map {
                        "\($0.name ?? "?"): finished \($0.isFinished) \($0.gateWaitDescription() ?? "-") fq \(String(describing: FoundationQueueState.of($0)))"
                    }.joined(separator: "\n")
                print(message)
                failures.append(message)
                for op in all { op.cancel() }
                _ = eventually(timeout: 10) { all.allSatisfy(\.isFinished) }
            }
            if metered.contains(where: { $0.executions.value > 1 }) { failures.append("trial \(trial): double execution") }
            if !eventually(timeout: 5, { Gatekeeper.isIdle }) {
                failures.append("trial \(trial): table not idle")
                break
            }
        }
        XCTAssertEqual(failures.count, 0, "\(failures.count) failures in \(trials) trials")
    }
}
