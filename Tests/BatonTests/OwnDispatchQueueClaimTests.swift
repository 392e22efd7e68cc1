import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Claims in an `OperationQueue` that runs its operations on a dispatch queue of its own
/// (`underlyingQueue`) and has no width limit. Such a queue dispatches every operation it finds ready
/// at once, and a serial dispatch queue then runs them one after the other: an operation granted its
/// categories as the queue read `isReady` held them while it waited there behind whatever ran ahead
/// of it. When that work waited for another claimant of the category (elsewhere), nothing ran until
/// the wait gave up (stop 59's note). Now such a queue is told the operation is ready without a
/// claim, and the claim is taken when the dispatch queue runs its start: granted there, it executes
/// at once; held by another, the start returns (the dispatch queue goes on with other work), and the
/// grant runs it on the same dispatch queue.
final class OwnDispatchQueueClaimTests: BatonTestCase {
    private let laneKey = DispatchSpecificKey<String>()

    /// A serial dispatch queue marked with `name`, and a queue (no width limit) that runs on it.
    private func queue(on name: String) -> (OperationQueue, DispatchQueue) {
        let lane = DispatchQueue(label: name)
        lane.setSpecific(key: laneKey, value: name)
        let queue = OperationQueue()
        queue.underlyingQueue = lane
        return (queue, lane)
    }

    /// Work on the queue's dispatch queue that waits (bounded) for `other` to execute, the way an
    /// operation waits for a result computed elsewhere; `begun` opens once it runs.
    private func waiting(for other: ManualOperation, begun: Gate, saw: Locked<Bool?>) -> BlockOperation {
        BlockOperation {
            begun.open()
            saw.mutate { $0 = other.started.wait(timeout: testTimeout) }
        }
    }

    /// The defect's shape, with the claimant added by `add`: a claimant of x waits on the serial
    /// dispatch queue behind work that waits for an operation elsewhere that claims x.
    private func checkClaimantBehindWaitingWork(
        conditions: Bool = false, add: (OperationQueue, Operation) throws -> Void
    ) throws {
        let x = OperationCategory("x", in: ExclusivityScope("own-dispatch-\(UUID())"))
        let (queue, lane) = queue(on: "own-dispatch.behind")
        defer { withExtendedLifetime(lane) {} }
        let elsewhere = ManualOperation(name: "elsewhere")
        try elsewhere.addExclusivity(x)
        let (begun, saw) = (Gate(), Locked<Bool?>(nil))
        let ahead = waiting(for: elsewhere, begun: begun, saw: saw)
        queue.addOperation(ahead)
        begun.wait()

        let behind = ManualOperation(name: "behind")
        let ranOn = Locked<String?>(nil)
        behind.onStart { [laneKey] in ranOn.mutate { $0 = DispatchQueue.getSpecific(key: laneKey) } }
        try behind.addExclusivity(x)
        if conditions { try behind.addCondition(.block("ok") { true }) }
        try add(queue, behind)
        XCTAssertTrue(
            eventually { FoundationQueueState.isDispatched(behind) == true }, "the queue never dispatched it")
        XCTAssertEqual(behind.heldLanesUpward().count, 0, "holds x while it waits behind other work")

        OperationQueue().addOperation(elsewhere)
        waitFinished(ahead)
        XCTAssertEqual(saw.value, true, "the work ahead waited for x's other claimant until it gave up")
        XCTAssertEqual(behind.executions.value, 0, "executed while the other claimant held x")
        elsewhere.finish(with: 1)
        XCTAssertTrue(behind.started.wait(), "never executed")
        XCTAssertEqual(ranOn.value, "own-dispatch.behind", "did not execute on its queue's dispatch queue")
        behind.finish(with: 2)
        waitFinished(behind)
        XCTAssertEqual(behind.outcome?.isSuccess, true)
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    func testAClaimantWaitingOnItsDispatchQueueBehindOtherWorkHoldsNothing() throws {
        try checkClaimantBehindWaitingWork { queue, operation in queue.addOperation(operation) }
    }

    func testAClaimantWithConditionsWaitingOnItsDispatchQueueHoldsNothing() throws {
        try checkClaimantBehindWaitingWork(conditions: true) { queue, operation in queue.addOperation(operation) }
    }

    /// A Baton entry point passes a gate outside a queue without a width limit, then adds the
    /// operation: not where the queue has a dispatch queue of its own, which may make it wait.
    func testAClaimantLaunchedByAChainOnSuchAQueueHoldsNothingWhileItWaits() throws {
        try checkClaimantBehindWaitingWork { queue, operation in try queue.addChain([operation]) }
    }

    /// A claimant whose category is held when its dispatch queue runs its start does not keep the
    /// dispatch queue: other work on it runs meanwhile, and the grant executes the claimant there.
    func testAClaimantThatFindsItsCategoryHeldLetsItsDispatchQueueRunOtherWork() throws {
        let x = OperationCategory("x", in: ExclusivityScope("own-dispatch-\(UUID())"))
        let (queue, lane) = queue(on: "own-dispatch.held")
        defer { withExtendedLifetime(lane) {} }
        let holder = try holding(x)
        let claimant = ManualOperation(name: "claimant")
        let ranOn = Locked<String?>(nil)
        claimant.onStart { [laneKey] in ranOn.mutate { $0 = DispatchQueue.getSpecific(key: laneKey) } }
        try claimant.addExclusivity(x)
        queue.addOperation(claimant)
        XCTAssertTrue(
            eventually { FoundationQueueState.isDispatched(claimant) == true }, "the queue never dispatched it")
        // Work added after it runs on the same serial dispatch queue: the claimant's start returned.
        let other = BlockOperation {}
        queue.addOperation(other)
        waitFinished(other)
        XCTAssertEqual(claimant.executions.value, 0)
        holder.finish(with: 0)
        XCTAssertTrue(claimant.started.wait(), "the grant never executed it")
        XCTAssertEqual(ranOn.value, "own-dispatch.held")
        claimant.finish(with: 1)
        waitFinished(claimant)
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// Executed by a grant that came after its start returned (not inside Foundation's start, so
    /// `OperationQueue.current` is `nil`), a claimant's blocking run of more work on its own queue,
    /// whose dispatch queue may be serial, is still refused at once.
    func testABlockingRunInsideAClaimantGrantedLaterOnItsOwnQueueIsRefusedAtOnce() throws {
        let x = OperationCategory("x", in: ExclusivityScope("own-dispatch-\(UUID())"))
        let (queue, lane) = queue(on: "own-dispatch.refuse")
        defer { withExtendedLifetime(lane) {} }
        let holder = try holding(x)
        let (claimant, said) = runningInnerWorkBlocking(on: queue)
        try claimant.addExclusivity(x)
        queue.addOperation(claimant)
        XCTAssertTrue(
            eventually { FoundationQueueState.isDispatched(claimant) == true }, "the queue never dispatched it")
        holder.finish(with: 0)
        waitFinished(claimant)
        XCTAssertTrue(said.value.contains("would deadlock"), said.value)
    }

    /// A dependency added while a claimant waits at its start (its queue started it, its category held
    /// elsewhere) is waited for: the grant gives the category back and the start waits for the
    /// dependency, then asks again (the second review found it executed first).
    func testADependencyAddedWhileAClaimantWaitsAtItsStartIsWaitedFor() throws {
        let x = OperationCategory("x", in: ExclusivityScope("own-dispatch-\(UUID())"))
        let (queue, lane) = queue(on: "own-dispatch.late")
        defer { withExtendedLifetime(lane) {} }
        let holder = try holding(x)
        let claimant = ManualOperation(name: "claimant")
        try claimant.addExclusivity(x)
        queue.addOperation(claimant)
        XCTAssertTrue(eventually { claimant.gateWaitDescription() != nil }, "not waiting for x")
        let dependency = ManualOperation(name: "dependency")
        claimant.addDependency(dependency)
        holder.finish(with: 0)
        // The grant lands (and is given back) on the claimant's dispatch queue: a block queued there
        // after it runs after it.
        let landed = Gate()
        XCTAssertTrue(eventually { claimant.gateWaitDescription() == nil }, "never granted")
        lane.async { landed.open() }
        landed.wait()
        XCTAssertEqual(claimant.executions.value, 0, "executed before its dependency finished")
        XCTAssertEqual(diagnostics.kinds(for: claimant), [])
        OperationQueue().addOperation(dependency)
        XCTAssertTrue(dependency.started.wait())
        dependency.finish(with: 0)
        XCTAssertTrue(claimant.started.wait(), "never executed once its dependency finished")
        claimant.finish(with: 1)
        waitFinished(claimant)
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// A start by hand of a claimant its queue started, while it waits for its grant or once the
    /// grant's start is on its way to the busy dispatch queue, is refused: it executes once, on its
    /// dispatch queue (the second review saw it execute on the caller's thread, then `startedTwice`).
    func testAStartByHandOfAClaimantItsQueueStartedIsRefused() throws {
        let x = OperationCategory("x", in: ExclusivityScope("own-dispatch-\(UUID())"))
        let (queue, lane) = queue(on: "own-dispatch.hand")
        defer { withExtendedLifetime(lane) {} }
        let holder = try holding(x)
        let ranOn = Locked<[String]>([])
        let claimant = AsyncBlockOperation { [laneKey] operation in
            ranOn.mutate { $0.append(DispatchQueue.getSpecific(key: laneKey) ?? "elsewhere") }
            operation.finish()
        }
        try claimant.addExclusivity(x)
        queue.addOperation(claimant)
        XCTAssertTrue(eventually { claimant.gateWaitDescription() != nil }, "not waiting for x")
        claimant.start()
        XCTAssertEqual(diagnostics.kinds(for: claimant), [.startedWhileInQueue])
        let unblock = DispatchSemaphore(value: 0)
        lane.async { _ = unblock.wait(timeout: .now() + testTimeout) }
        holder.finish(with: 0)
        XCTAssertTrue(eventually { claimant.gateWaitDescription() == nil }, "never granted")
        claimant.start()
        unblock.signal()
        waitFinished(claimant)
        XCTAssertEqual(ranOn.value, ["own-dispatch.hand"])
        XCTAssertEqual(diagnostics.kinds(for: claimant), [.startedWhileInQueue, .startedWhileInQueue])
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// Cancelled while it waits at its start, a claimant ends unexecuted, leaves the line, and the next
    /// one gets the category.
    func testAClaimantCancelledWhileItWaitsAtItsStartLeavesTheLine() throws {
        let x = OperationCategory("x", in: ExclusivityScope("own-dispatch-\(UUID())"))
        let (queue, lane) = queue(on: "own-dispatch.cancel")
        defer { withExtendedLifetime(lane) {} }
        let holder = try holding(x)
        let (first, second) = (ManualOperation(name: "first"), ManualOperation(name: "second"))
        for operation in [first, second] {
            try operation.addExclusivity(x)
            queue.addOperation(operation)
        }
        XCTAssertTrue(
            eventually { [first, second].allSatisfy { FoundationQueueState.isDispatched($0) == true } },
            "the queue never dispatched them")
        first.cancel()
        waitFinished(first)
        XCTAssertTrue(first.isCancelled)
        XCTAssertEqual(first.executions.value, 0)
        holder.finish(with: 0)
        XCTAssertTrue(second.started.wait(), "the next one never got x")
        second.finish(with: 2)
        waitFinished(second)
        XCTAssertEqual(first.executions.value, 0)
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// Claimants that found the category held are granted in the order their starts asked (the order
    /// the queue dispatched them), one executing at a time, each on the queue's dispatch queue.
    func testClaimantsWaitingAtTheirStartsAreGrantedFirstComeFirstServed() throws {
        let x = OperationCategory("x", in: ExclusivityScope("own-dispatch-\(UUID())"))
        let (queue, lane) = queue(on: "own-dispatch.order")
        defer { withExtendedLifetime(lane) {} }
        let holder = try holding(x)
        let order = Locked<[Int]>([])
        let lanes = Locked<Set<String>>([])
        let operations = try (0..<6).map { index -> AsyncBlockOperation in
            let operation = AsyncBlockOperation { [laneKey] operation in
                order.mutate { $0.append(index) }
                lanes.mutate { _ = $0.insert(DispatchQueue.getSpecific(key: laneKey) ?? "elsewhere") }
                operation.finish()
            }
            try operation.addExclusivity(x)
            queue.addOperation(operation)
            XCTAssertTrue(eventually { FoundationQueueState.isDispatched(operation) == true }, "never dispatched")
            return operation
        }
        holder.finish(with: 0)
        for operation in operations { waitFinished(operation) }
        XCTAssertEqual(order.value, Array(0..<6))
        XCTAssertEqual(lanes.value, ["own-dispatch.order"])
        XCTAssertTrue(eventually { Gatekeeper.isIdle }, "something stays held")
    }

    /// Claimants on several queues with dispatch queues of their own and on a plain queue, cancelled
    /// and finished from threads released together: every one ends, none executes after a `cancel()`
    /// that returned first, never two holders execute at once, and nothing stays held.
    func testClaimantsOnQueuesWithTheirOwnDispatchQueuesUnderCancellationHammer() throws {
        let trials = Int(ProcessInfo.processInfo.environment["GATE_ATTACK_TRIALS"] ?? "") ?? 150
        for trial in 0..<trials {
            let x = OperationCategory("x", in: ExclusivityScope("own-dispatch-hammer-\(trial)"))
            let meter = ConcurrencyMeter()
            let violations = Locked<[String]>([])
            let holder = try holding(x)
            let lanes = (0..<2).map { DispatchQueue(label: "own-dispatch.hammer.\($0)") }
            let queues = lanes.map { lane -> OperationQueue in
                let queue = OperationQueue()
                queue.underlyingQueue = lane
                return queue
            }
            let plain = OperationQueue()
            let claimants = try (0..<9).map { index -> HammeredClaimant in
                let claimant = HammeredClaimant([meter], violations: violations, name: "c\(index)")
                try claimant.addExclusivity(x)
                if index % 4 == 1 { try claimant.addCondition(.block("ok") { true }) }
                return claimant
            }
            for (index, claimant) in claimants.enumerated() {
                let queue = index % 3 == 2 ? plain : queues[index % 2]
                if index % 3 == 0 { try queue.addChain([claimant]) } else { queue.addOperation(claimant) }
            }
            let line = StartingLine()
            line.thread { holder.finish(with: 0) }
            line.thread { for index in stride(from: 0, to: 9, by: 3) { claimants[index].cancelChecked() } }
            line.thread { for index in stride(from: 1, to: 9, by: 4) { claimants[index].cancelChecked() } }
            XCTAssertTrue(line.release(timeout: testTimeout), "trial \(trial): a thread never returned")
            assertClaimantHammerTrialEnded(
                claimants, meter: meter, violations: violations, queues: queues + [plain], trial: trial)
            withExtendedLifetime(lanes) {}
        }
    }
}
