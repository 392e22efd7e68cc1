import Dispatch
import Foundation
import XCTest

@testable import Baton

/// The review of 08c372d, whose tests these are: an operation that its queue starts before its gate
/// opened (it holds the queue's only worker) asked the holders of its category to yield once, and only
/// holders that Foundation recorded as `enqueued`. A holder granted on Baton's launch path (outside the
/// queue, then `addOperation`) still on its way into the same queue, or a holder that kept room until
/// a limit was lowered, was never asked again, and waited for the worker the other kept while it
/// waited for the category. Now a holder on its way in yields too (should its queue start it all the
/// same, it asks again as a holder of a worker), and a lowered limit asks the holders of lanes that
/// a holder of a worker heads.
final class WorkerHolderAttackTests: BatonTestCase {
    #if !canImport(Darwin)
    /// The window between a launch-path grant and the queue recording the operation as enqueued is
    /// natural (a grant, then `addOperation`); the holder's override of `isReady` only holds it open
    /// (Foundation reads `isReady` while it adds the operation, in state `enqueuing`).
    func testAHolderOnItsWayIntoTheQueueGivesItsCategoryToTheOperationHoldingTheWorker() throws {
        let x = OperationCategory("X", in: ExclusivityScope("worker-holder-launch-holder"))
        let lane = DispatchQueue(label: "worker-holder.serial")
        // `underlyingQueue` does not retain its dispatch queue.
        defer { withExtendedLifetime(lane) {} }
        let serial = OperationQueue()
        serial.underlyingQueue = lane
        let (queue, release) = oneWorkerQueueHeldByABlocker(serial)

        let order = Locked<[String]>([])
        // W: its queue starts it before its gate opens (the project's own double for Linux's stale
        // cached readiness).
        let eager = LiesAboutReadiness { order.append("W") }
        eager.queuePriority = .veryHigh
        try eager.addExclusivity(x)
        queue.addOperation(eager)

        // H: launched by Baton on the same queue. Before stop 57 it was granted X outside the queue,
        // then added (and gave X back to W when asked). A queue with a width limit may keep an
        // operation waiting for a worker, so Baton no longer passes a gate outside such a queue: H is
        // added holding nothing, and its queue begins its gate when it reads `isReady` with a worker
        // free (see QueuedHolderTests).
        let holder = PausesWhileBeingEnqueued { order.append("H") }
        try holder.addExclusivity(x)
        DispatchQueue.global().async { _ = try? holder.run(on: queue, timeout: .seconds(30)) }
        XCTAssertEqual(holder.reading.wait(timeout: .now() + 10), .success, "being added to the queue")
        XCTAssertEqual(Gatekeeper.holdersAndPace(of: x.topLanes[0]).holders.map(\.serialNumber), [], "H holds nothing yet")

        // The worker frees: the queue starts W (it says it is ready), W asks for X and gets it while H
        // is still being added.
        release.signal()
        let whileBeingAdded = eventually(timeout: 10) { eager.isFinished }
        XCTAssertTrue(whileBeingAdded, "W executes while H is still being added")
        XCTAssertFalse(holder.isFinished)
        holder.proceed.signal()

        let done = eventually(timeout: 10) { holder.isFinished && eager.isFinished }
        XCTAssertTrue(
            done,
            "hang: W \(eager.gateWaitDescription() ?? "not waiting") executing \(eager.isExecuting); "
                + "H finished \(holder.isFinished), state \(String(describing: FoundationQueueState.of(holder)))")
        if !done {
            // Let it go, so later tests do not see X held.
            eager.cancel()
            XCTAssertTrue(eventually { holder.isFinished && eager.isFinished })
        }
        XCTAssertEqual(order.value, ["W", "H"])
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    /// The same window without any override on the holder: a plain `AsyncBlockOperation` run on the
    /// queue by Baton (`run(on:)`), racing the queue's start of W (released together, many trials).
    func testHammerAPlainHolderLaunchedWhileItsQueueStartsAWorkerHolder() throws {
        let trials = ProcessInfo.processInfo.environment["BATON_TRIALS"].flatMap(Int.init) ?? 300
        var random = SplitMix(state: 43)
        var hangs = 0
        for trial in 0..<trials {
            let x = OperationCategory("X", in: ExclusivityScope("worker-holder-launch-hammer-\(trial)"))
            let (queue, release) = oneWorkerQueueHeldByABlocker()
            let eager = LiesAboutReadiness {}
            eager.queuePriority = .veryHigh
            try eager.addExclusivity(x)
            queue.addOperation(eager)
            let holder = AsyncBlockOperation { $0.finish() }
            try holder.addExclusivity(x)
            let line = StartingLine()
            let (spinA, spinB) = (random.next(4000), random.next(4000))
            line.thread {
                spinRounds(spinA)
                _ = try? holder.run(on: queue, timeout: .seconds(20))
            }
            line.thread {
                spinRounds(spinB)
                release.signal()
            }
            let returned = line.release(timeout: 3)
            if !returned || !eventually(timeout: 3, { holder.isFinished && eager.isFinished }) {
                hangs += 1
                let state = String(describing: FoundationQueueState.of(holder))
                print("trial \(trial): hang; W \(eager.gateWaitDescription() ?? "not waiting"), H state \(state)")
                eager.cancel()
                XCTAssertTrue(eventually { holder.isFinished && eager.isFinished }, "not even a cancel frees it")
            }
            if !returned { XCTAssertTrue(line.release(timeout: 30)) }
        }
        XCTAssertEqual(hangs, 0, "\(hangs) hangs in \(trials) trials")
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    /// Deterministic, public API only: W, started by its one-worker queue before its gate opened,
    /// claims X and Y. X has room (limit 2, H holds one), Y is held by G, which executes elsewhere: W
    /// waits first in both lines and asks only G (Y's holder) to yield. X's limit is then lowered to 1:
    /// H, which waits in W's queue for the worker W keeps, now blocks W, and the lowered limit asks it
    /// to yield (before, nothing did).
    func testALimitLoweredUnderAnOperationHoldingTheWorkerAsksTheHolderThatNowBlocksIt() throws {
        let scope = ExclusivityScope("worker-holder-limit-lowered")
        try scope.setLimit(2, for: "X")
        let x = OperationCategory("X", in: scope)
        let y = OperationCategory("Y", in: scope)
        let g = try holding(y)
        let (queue, release) = oneWorkerQueueHeldByABlocker()
        let holder = AsyncBlockOperation { $0.finish() }
        try holder.addExclusivity(x)
        queue.addOperation(holder)
        XCTAssertTrue(holder.isReady, "granted X (room for two) while it waits for the worker")
        let eager = LiesAboutReadiness {}
        eager.queuePriority = .veryHigh
        try eager.addExclusivity(x, y)
        queue.addOperation(eager)
        release.signal()
        XCTAssertTrue(eventually { eager.gateWaitDescription() != nil }, "W waits for Y with the only worker")
        try scope.setLimit(1, for: "X")
        g.finish(with: 0)
        let done = eventually(timeout: 10) { holder.isFinished && eager.isFinished }
        XCTAssertTrue(
            done,
            "hang: W \(eager.gateWaitDescription() ?? "not waiting"); H finished \(holder.isFinished), "
                + "state \(String(describing: FoundationQueueState.of(holder)))")
        if !done {
            eager.cancel()
            XCTAssertTrue(eventually { holder.isFinished && eager.isFinished })
        }
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }
    #endif
}

/// Holds the read of `isReady` that Foundation makes while it adds the operation (state `enqueuing`)
/// until `proceed` is signalled, the first time only.
final class PausesWhileBeingEnqueued: AsyncOperation, @unchecked Sendable {
    let work: @Sendable () -> Void
    let reading = DispatchSemaphore(value: 0)
    let proceed = DispatchSemaphore(value: 0)
    private let armed = Locked(true)
    init(_ work: @escaping @Sendable () -> Void) {
        self.work = work
        super.init()
    }
    override var isReady: Bool {
        #if !canImport(Darwin)
        if FoundationQueueState.of(self) == .waiting, FoundationQueueState.isEnqueued(self) == false,
            armed.mutate({ armed -> Bool in
                defer { armed = false }
                return armed
            })
        {
            reading.signal()
            proceed.wait()
        }
        #endif
        return super.isReady
    }
    override func execute() {
        work()
        finish()
    }
}
