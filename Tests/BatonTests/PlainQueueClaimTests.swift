import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Claims in a plain `OperationQueue` (no width limit, no dispatch queue of its own). Such a queue is
/// told a claimant is ready without a claim, and the claim is taken as the queue starts it: granted,
/// it executes inside that start; held by another, the start returns and the queue no longer lists
/// the claimant as waiting (Linux's queue walked and re-read every waiter each time a grant was
/// announced: quadratic), and the grant executes it on a global queue, marked as its queue's. The
/// rules of `OwnDispatchQueueClaimTests` hold here too.
final class PlainQueueClaimTests: BatonTestCase {
    func scope() -> ExclusivityScope { ExclusivityScope("plain-queue-\(UUID())") }

    /// Waiting at its start (its queue started it, the category held elsewhere).
    func waitingAtItsStart(_ operation: AsyncOperation, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(
            eventually { operation.gateWaitDescription() != nil && FoundationQueueState.isDispatched(operation) == true },
            "not waiting at its start", file: file, line: line)
    }

    func testAClaimantGrantedAfterItsStartReturnedExecutesOnce() throws {
        let x = OperationCategory("x", in: scope())
        let holder = try holding(x)
        let claimant = ManualOperation(name: "claimant")
        try claimant.addExclusivity(x)
        let queue = OperationQueue()
        queue.addOperation(claimant)
        waitingAtItsStart(claimant)
        XCTAssertEqual(claimant.executions.value, 0)
        XCTAssertEqual(queue.operationCount, 1, "its queue let go of it")
        holder.finish(with: 0)
        XCTAssertTrue(claimant.started.wait(), "the grant never executed it")
        claimant.finish(with: 1)
        waitFinished(claimant)
        XCTAssertEqual(claimant.executions.value, 1)
        XCTAssertEqual(diagnostics.kinds(for: claimant), [])
        XCTAssertTrue(eventually { queue.operationCount == 0 }, "its queue still lists it")
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// Executed by a grant that came after its start returned (`OperationQueue.current` is `nil`
    /// there), a claimant's blocking run of more work on its own queue that needs its category is
    /// still refused at once: the thread is marked as running for that queue.
    func testABlockingWaitInsideAClaimantGrantedLaterIsRefusedAtOnce() throws {
        let x = OperationCategory("x", in: scope())
        let holder = try holding(x)
        let queue = OperationQueue()
        let inner = ManualOperation(name: "inner")
        try inner.addExclusivity(x)
        let said = Locked("")
        let claimant = AsyncBlockOperation { operation in
            queue.addOperation(inner)
            do {
                _ = try inner.wait(timeout: .seconds(testTimeout))
                said.mutate { $0 = "waited" }
            } catch {
                said.mutate { $0 = "\(error)" }
            }
            operation.finish()
        }
        try claimant.addExclusivity(x)
        queue.addOperation(claimant)
        waitingAtItsStart(claimant)
        holder.finish(with: 0)
        waitFinished(claimant)
        XCTAssertTrue(said.value.contains("would deadlock"), said.value)
        XCTAssertTrue(inner.started.wait(), "the inner operation never got x")
        inner.finish(with: 0)
        waitFinished(inner)
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// A dependency added while a claimant waits at its start is waited for: the grant gives the
    /// category back, and the claimant asks again once the dependency has finished.
    func testADependencyAddedWhileAClaimantWaitsAtItsStartIsWaitedFor() throws {
        let x = OperationCategory("x", in: scope())
        let holder = try holding(x)
        let claimant = ManualOperation(name: "claimant")
        try claimant.addExclusivity(x)
        OperationQueue().addOperation(claimant)
        waitingAtItsStart(claimant)
        let dependency = ManualOperation(name: "dependency")
        try dependency.addExclusivity(x)
        claimant.addDependency(dependency)
        holder.finish(with: 0)
        OperationQueue().addOperation(dependency)
        XCTAssertTrue(dependency.started.wait(), "the dependency never got x: the claimant holds it")
        XCTAssertEqual(claimant.executions.value, 0, "executed before its dependency finished")
        dependency.finish(with: 0)
        XCTAssertTrue(claimant.started.wait(), "never executed once its dependency finished")
        claimant.finish(with: 1)
        waitFinished(claimant)
        XCTAssertEqual(diagnostics.kinds(for: claimant), [])
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// A start by hand of a claimant its queue started is refused while it waits, and again after
    /// the grant: it executes once.
    func testAStartByHandOfAClaimantItsQueueStartedIsRefused() throws {
        let x = OperationCategory("x", in: scope())
        let holder = try holding(x)
        let executions = Locked(0)
        let claimant = AsyncBlockOperation { operation in
            _ = executions.increment()
            operation.finish()
        }
        try claimant.addExclusivity(x)
        OperationQueue().addOperation(claimant)
        waitingAtItsStart(claimant)
        claimant.start()
        XCTAssertEqual(diagnostics.kinds(for: claimant), [.startedWhileInQueue])
        holder.finish(with: 0)
        waitFinished(claimant)
        claimant.start()
        XCTAssertEqual(executions.value, 1)
        XCTAssertEqual(diagnostics.kinds(for: claimant).first, .startedWhileInQueue)
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// Cancelled while it waits at its start, a claimant ends unexecuted, its queue lets go of it, it
    /// leaves the line, and the next one gets the category.
    func testAClaimantCancelledWhileItWaitsAtItsStartLeavesTheLine() throws {
        let x = OperationCategory("x", in: scope())
        let holder = try holding(x)
        let queue = OperationQueue()
        let (first, second) = (ManualOperation(name: "first"), ManualOperation(name: "second"))
        for operation in [first, second] {
            try operation.addExclusivity(x)
            queue.addOperation(operation)
            waitingAtItsStart(operation)
        }
        first.cancel()
        waitFinished(first)
        XCTAssertTrue(first.isCancelled)
        holder.finish(with: 0)
        XCTAssertTrue(second.started.wait(), "the next one never got x")
        second.finish(with: 2)
        waitFinished(second)
        XCTAssertEqual(first.executions.value, 0)
        XCTAssertTrue(eventually { queue.operationCount == 0 }, "its queue still lists one")
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// Claimants that found the category held are granted in the order their starts asked.
    func testClaimantsWaitingAtTheirStartsAreGrantedFirstComeFirstServed() throws {
        let x = OperationCategory("x", in: scope())
        let holder = try holding(x)
        let queue = OperationQueue()
        let order = Locked<[Int]>([])
        let operations = try (0..<8).map { index -> AsyncBlockOperation in
            let operation = AsyncBlockOperation { operation in
                order.mutate { $0.append(index) }
                operation.finish()
            }
            try operation.addExclusivity(x)
            queue.addOperation(operation)
            waitingAtItsStart(operation)
            return operation
        }
        holder.finish(with: 0)
        for operation in operations { waitFinished(operation) }
        XCTAssertEqual(order.value, Array(0..<8))
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// Claimants in plain queues (some with conditions, some through a chain), cancelled, started by
    /// hand and finished from threads released together: every one ends once, none executes twice or
    /// after a `cancel()` that returned first, never two holders execute at once, nothing stays held.
    func testClaimantsInPlainQueuesUnderCancellationAndStartByHandHammer() throws {
        let trials = Int(ProcessInfo.processInfo.environment["GATE_ATTACK_TRIALS"] ?? "") ?? 150
        for trial in 0..<trials {
            let x = OperationCategory("x", in: ExclusivityScope("plain-queue-hammer-\(trial)"))
            let meter = ConcurrencyMeter()
            let violations = Locked<[String]>([])
            let holder = try holding(x)
            let queues = [OperationQueue(), OperationQueue()]
            let claimants = try (0..<10).map { index -> HammeredClaimant in
                let claimant = HammeredClaimant([meter], violations: violations, name: "c\(index)")
                try claimant.addExclusivity(x)
                if index % 4 == 1 { try claimant.addCondition(.block("ok") { true }) }
                return claimant
            }
            for (index, claimant) in claimants.enumerated() {
                let queue = queues[index % 2]
                if index % 5 == 0 { try queue.addChain([claimant]) } else { queue.addOperation(claimant) }
            }
            let line = StartingLine()
            line.thread { holder.finish(with: 0) }
            line.thread { for index in stride(from: 0, to: 10, by: 3) { claimants[index].cancelChecked() } }
            line.thread { for index in stride(from: 1, to: 10, by: 4) { claimants[index].start() } }
            line.thread { for index in stride(from: 2, to: 10, by: 4) { claimants[index].cancelChecked() } }
            XCTAssertTrue(line.release(timeout: testTimeout), "trial \(trial): a thread never returned")
            assertClaimantHammerTrialEnded(claimants, meter: meter, violations: violations, queues: queues, trial: trial)
        }
    }
}
