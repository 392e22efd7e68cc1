import Dispatch
import Foundation
import XCTest

@testable import Baton

/// From the second review of the worker-holder fixes: worker holders inside composites (children claim categories their group
/// holds, in lanes under it), several categories, limits lowered and raised, late dependencies and
/// cancels.
final class WorkerHolderCompositeHammerTests: BatonTestCase {
    func testWorkerHoldersAmongChildrenOfAHoldingGroup() throws {
        let trials = ProcessInfo.processInfo.environment["BATON_TRIALS"].flatMap(Int.init) ?? 100
        var random = SplitMix(state: UInt64(ProcessInfo.processInfo.environment["BATON_SEED"].flatMap(Int.init) ?? 11))
        var failures: [String] = []
        for trial in 0..<trials {
            let scope = ExclusivityScope("worker-holder-composite-group-hammer-\(trial)")
            let limit = 1 + random.next(2)
            if limit > 1 { try scope.setLimit(limit, for: "X") }
            let x = OperationCategory("X", in: scope)
            let y = OperationCategory("Y", in: scope)
            let meter = ConcurrencyMeter()
            let outerMeter = ConcurrencyMeter()
            let count = 8
            let children = try (0..<count).map { index -> MeteredLiar in
                let operation = MeteredLiar(meter, lies: random.next(3) == 0, name: "child\(index)")
                if random.next(3) == 0 { try operation.addExclusivity(x, y) } else { try operation.addExclusivity(x) }
                return operation
            }
            let group = GroupOperation(operations: children, maxConcurrentOperationCount: 1 + random.next(2))
            group.name = "group"
            try group.addExclusivity(x, y)
            let outsiders = try (0..<3).map { index -> MeteredLiar in
                let operation = MeteredLiar(outerMeter, lies: random.next(2) == 0, name: "outsider\(index)")
                try operation.addExclusivity(x)
                return operation
            }
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 1 + random.next(2)
            let lateDeps = (0..<3).map { _ in (random.next(count), random.next(count), random.next(3000)) }
            let cancels = (0..<1).map { _ in (random.next(count), random.next(5000)) }
            let lowers = random.next(2) == 0
            let limitSpin = random.next(4000)
            let line = StartingLine()
            line.thread {
                queue.addOperation(group)
                for outsider in outsiders { queue.addOperation(outsider) }
            }
            line.thread {
                for (a, b, spin) in lateDeps where a > b {
                    spinRounds(spin)
                    children[a].addDependency(children[b])
                }
            }
            line.thread {
                for (index, spin) in cancels {
                    spinRounds(spin)
                    children[index].cancel()
                }
            }
            line.thread {
                spinRounds(limitSpin)
                if lowers { try? scope.setLimit(1, for: "X") }
                spinRounds(limitSpin)
                if lowers { try? scope.setLimit(limit, for: "X") }
            }
            XCTAssertTrue(line.release(timeout: 30))
            let all = children + outsiders
            let finished = eventually(timeout: 10) { all.allSatisfy(\.isFinished) && group.isFinished }
            if !finished || meter.most > limit || outerMeter.most + 0 > limit {
                let message =
                    "trial \(trial) limit \(limit): finished \(finished) (group \(group.isFinished)), most \(meter.most) outer \(outerMeter.most)\n"
                    + all.map(\.dump).joined(separator: "\n")
                print(message)
                failures.append(message)
                for operation in all { operation.cancel() }
                group.cancel()
                _ = eventually(timeout: 10) { all.allSatisfy(\.isFinished) }
            }
            if all.contains(where: { $0.executions.value > 1 }) { failures.append("trial \(trial): double execution") }
            if !eventually(timeout: 5, { Gatekeeper.isIdle }) {
                failures.append("trial \(trial): table not idle")
                break
            }
        }
        XCTAssertEqual(failures.count, 0, "\(failures.count) failures in \(trials) trials")
    }
}
