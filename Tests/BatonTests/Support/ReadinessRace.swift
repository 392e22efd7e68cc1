import Dispatch
import Foundation
import XCTest

@testable import Baton

/// The race of readiness hammers: `operation` is added to `queue` while two threads make it depend
/// on `dependency` (finished), a third reads `isReady` and, when `cancels`, a fourth cancels it, each
/// after a random spin drawn from `random`.
func raceAdding(
    _ operation: AsyncOperation, to queue: OperationQueue, dependingOn dependency: Operation, cancels: Bool,
    _ random: inout SplitMix
) {
    let spins = (0..<5).map { _ in random.next(3000) }
    let line = StartingLine()
    line.thread {
        spinRounds(spins[0])
        queue.addOperation(operation)
    }
    for adder in 1...2 {
        line.thread {
            spinRounds(spins[adder])
            operation.addDependency(dependency)
        }
    }
    line.thread {
        spinRounds(spins[3])
        for _ in 0..<50 { _ = operation.isReady }
    }
    if cancels {
        line.thread {
            spinRounds(spins[4])
            operation.cancel()
        }
    }
    XCTAssertTrue(line.release(timeout: testTimeout))
}
