import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Counts live stress operations: every one enters in `init` and leaves in `deinit`, so a bounded
/// wait on the group says that memory came back.
private let liveOperations = DispatchGroup()

/// What a stress operation does when it executes, decided by the seed.
private enum Plan: Sendable {
    case succeed(Int)
    case fail(Int)
    case finishTwice(Int)
}

/// Finishes after a random short delay, from another thread, as its plan says; counts its outcomes.
private final class StressOperation: TransformOperation<Int, Int>, @unchecked Sendable {
    let plan: Plan
    let delay: Int
    let outcomes = Locked(0)

    init(plan: Plan, delay: Int) {
        self.plan = plan
        self.delay = delay
        liveOperations.enter()
        super.init()
        input = 0
        onFinish { [outcomes] _ in outcomes.increment() }
    }

    deinit { liveOperations.leave() }

    override func execute() {
        DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(delay)) { [self] in
            switch plan {
            case .succeed(let value): finish(with: value + (input ?? 0))
            case .fail(let code): finish(throwing: TestError(code: code))
            case .finishTwice(let value):
                finish(with: value)
                finish(with: value + 1)
            }
        }
    }
}

final class StressTests: BatonTestCase {
    /// The seeds that run on every test run; `BATON_STRESS_SEED` replays one.
    private var seeds: [UInt64] {
        if let text = ProcessInfo.processInfo.environment["BATON_STRESS_SEED"], let seed = UInt64(text) { return [seed] }
        return [1, 2, UInt64(Date().timeIntervalSince1970)]
    }

    func testRandomizedWorkloadsFinishEveryOperationExactlyOnce() {
        for seed in seeds {
            runWorkload(seed: seed)
        }
    }

    private func runWorkload(seed: UInt64) {
        var random = SeededRandom(seed: seed)
        let context = "seed \(seed) (replay with BATON_STRESS_SEED=\(seed))"
        var operations = [StressOperation]()
        func make() -> StressOperation {
            let roll = Int.random(in: 0..<100, using: &random)
            let plan: Plan = roll < 70 ? .succeed(roll) : roll < 90 ? .fail(roll) : .finishTwice(roll)
            let operation = StressOperation(plan: plan, delay: Int.random(in: 0...300, using: &random))
            operations.append(operation)
            return operation
        }

        var everything = [Operation]()
        var handles = [ChainHandle<any Sendable>]()
        inScope {
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = Int.random(in: 1...8, using: &random)

            // Independent operations.
            let independent = (0..<600).map { _ in make() }
            queue.addOperations(independent, waitUntilFinished: false)
            everything += independent

            // Chains.
            for _ in 0..<80 {
                let chain = (0..<Int.random(in: 1...6, using: &random)).map { _ in make() }
                do { handles.append(try queue.addChain(chain)) } catch { XCTFail("\(context): \(error)") }
                everything += chain
            }

            // Groups of sequences, and sequences of groups.
            for index in 0..<40 {
                let composite: AsyncOperation
                if index.isMultiple(of: 2) {
                    let sequences = (0..<3).map { _ in SequenceOperation<Int>(operations: (0..<3).map { _ in make() }) }
                    composite = GroupOperation(
                        operations: sequences, failurePolicy: index % 4 == 0 ? .cancelSiblingsOnFailure : .continueOnFailure)
                } else {
                    let groups = (0..<2).map { _ in GroupOperation(operations: (0..<3).map { _ in make() }) }
                    composite = SequenceOperation<Void>(operations: groups)
                }
                queue.addOperation(composite)
                everything.append(composite)
            }

            // Cancel a random fifth of everything, from other threads, at random moments.
            for operation in everything where Int.random(in: 0..<5, using: &random) == 0 {
                let delay = Int.random(in: 0...500, using: &random)
                DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(delay)) { operation.cancel() }
            }

            let drained = Gate()
            queue.addBarrierBlock { drained.open() }
            drained.wait(timeout: bulkTimeout)
        }

        for handle in handles {
            XCTAssertNoThrow(try handle.waitToOutcome(timeout: bulkTimeout), context)
        }
        XCTAssertTrue(everything.allSatisfy(\.isFinished), "\(context): an operation never finished")
        let counts = operations.map { $0.outcomes.value }
        XCTAssertEqual(counts.filter { $0 != 1 }.count, 0, "\(context): outcomes delivered other than once")
        for operation in operations where operation.isCancelled {
            XCTAssertTrue(
                operation.outcome?.isCancelled == true, "\(context): cancelled but \(String(describing: operation.outcome))")
        }

        let outcomes = operations.compactMap(\.outcome)
        XCTAssertGreaterThan(outcomes.filter(\.isSuccess).count, 0, "\(context): the workload never succeeded")
        XCTAssertGreaterThan(outcomes.filter { $0.error != nil }.count, 0, "\(context): the workload never failed")
        XCTAssertGreaterThan(outcomes.filter(\.isCancelled).count, 0, "\(context): the workload never cancelled")

        // Memory comes back once nothing holds the operations.
        operations = []
        everything = []
        handles = []
        XCTAssertEqual(
            liveOperations.wait(timeout: .now() + 30), .success, "\(context): operations still alive after the queue drained")
    }
}
