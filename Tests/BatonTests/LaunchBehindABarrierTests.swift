import Dispatch
import Foundation
import XCTest

@testable import Baton

/// Stop 45: an operation granted its category on Baton's launch path (outside its queue), then added
/// to a queue with a pending barrier. Linux's queue makes it depend on the barrier without
/// `addDependency`, and `dependencies` does not list the barrier, so the gate never heard of it: the
/// operation held its category until the barrier had run, the barrier waited for an operation added
/// before it, and that one waited for the category. Found by `WorkerHolderHammerTests` once Foundation's
/// own controls were on (10 hangs in 300 trials with the fix disabled, none in 3,000 with it).
final class LaunchBehindABarrierTests: BatonTestCase {
    func testAGrantAddedBehindAPendingBarrierIsGivenBackToTheOperationTheBarrierWaitsFor() throws {
        let x = OperationCategory("X", in: ExclusivityScope("launch-behind-a-barrier"))
        let order = Locked<[String]>([])

        // H holds X, on a queue of its own, until it is released.
        let (holder, releaseHolder) = try holderReleasedLater(claiming: x) { order.append("H") }
        XCTAssertTrue(eventually(timeout: 10) { holder.isExecuting })

        // L asks first, on Baton's launch path: it waits outside Q.
        let queue = OperationQueue()
        let launched = AsyncBlockOperation { operation in
            order.append("L")
            operation.finish()
        }
        try launched.addExclusivity(x)
        DispatchQueue.global().async { _ = try? launched.run(on: queue, timeout: .seconds(30)) }
        XCTAssertTrue(eventually(timeout: 10) { launched.gateWaitDescription() != nil }, "L waits for X")

        // A asks second, from inside Q; then a barrier, which waits for A.
        let added = AsyncBlockOperation { operation in
            order.append("A")
            operation.finish()
        }
        try added.addExclusivity(x)
        queue.addOperation(added)
        XCTAssertTrue(eventually(timeout: 10) { added.gateWaitDescription() != nil }, "A waits for X")
        queue.addBarrierBlock { order.append("barrier") }

        // X goes to L, which enters Q behind the barrier: it gives X back, so A can execute and the
        // barrier run, and then L asks again.
        releaseHolder.signal()
        let done = eventually(timeout: 10) { launched.isFinished && added.isFinished }
        XCTAssertTrue(
            done,
            "hang: L \(launched.gateWaitDescription() ?? "not waiting") executing \(launched.isExecuting); "
                + "A \(added.gateWaitDescription() ?? "not waiting")")
        if !done {
            launched.cancel()
            added.cancel()
            XCTAssertTrue(eventually(timeout: 10) { launched.isFinished && added.isFinished })
        }
        XCTAssertEqual(order.value, ["H", "A", "barrier", "L"])
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    /// From the review of this fix: an operation with a condition is granted after the condition
    /// answers, in the request that follows (not in `admitForLaunch`), and that path added it with a
    /// plain `addOperation`, keeping X behind the barrier (every run hung). Through `run(on:)` and
    /// through `addChain`.
    func testAGrantAfterAConditionAddedBehindAPendingBarrierIsGivenBack() throws {
        try conditionScenario(name: "run") { operation, queue in
            DispatchQueue.global().async { _ = try? operation.run(on: queue, timeout: .seconds(30)) }
            return operation
        }
        try conditionScenario(name: "chain") { operation, queue in
            try queue.addChain(first: operation) { _ in nil }
            return operation
        }
    }

    private func conditionScenario(
        name: String, launch: (AsyncBlockOperation, OperationQueue) throws -> AsyncOperation
    ) throws {
        let x = OperationCategory("X", in: ExclusivityScope("launch-behind-a-barrier-\(name)"))
        let order = Locked<[String]>([])
        let queue = OperationQueue()
        let other = OperationQueue()

        // A claims X and waits in Q for D, so it has not asked for X yet; the barrier waits for A.
        let releaseDependency = DispatchSemaphore(value: 0)
        let dependency = BlockOperation { _ = releaseDependency.wait(timeout: .now() + 60) }
        let added = AsyncBlockOperation { operation in
            order.append("A")
            operation.finish()
        }
        try added.addExclusivity(x)
        added.addDependency(dependency)
        other.addOperation(dependency)
        queue.addOperation(added)
        queue.addBarrierBlock { order.append("barrier") }

        // L claims X and has a condition; launched by Baton, it is granted X (free) once the condition
        // passes, and enters Q behind the barrier.
        let flag = ConditionFlag("go")
        let launchedBlock = AsyncBlockOperation { operation in
            order.append("L")
            operation.finish()
        }
        try launchedBlock.addExclusivity(x)
        try launchedBlock.addCondition(.waitUntil(flag, timeout: .seconds(60)))
        let launched = try launch(launchedBlock, queue)
        XCTAssertTrue(eventually(timeout: 10) { launched.gateWaitDescription() == "waiting for conditions" })
        flag.set()
        // In Q, it gives X back (its gate closes) before A asks.
        let gaveBack = eventually(timeout: 10) {
            FoundationQueueState.isEnqueued(launched) == true && launched.core.withLock { $0.gate?.admission.isClosed } == true
        }
        XCTAssertTrue(gaveBack, "\(name): L in Q, X given back")
        releaseDependency.signal()
        let done = eventually(timeout: 10) { launched.isFinished && added.isFinished }
        XCTAssertTrue(done, "\(name): hang: A \(added.gateWaitDescription() ?? "not waiting"); order \(order.value)")
        if !done {
            launched.cancel()
            added.cancel()
            XCTAssertTrue(eventually(timeout: 10) { launched.isFinished && added.isFinished })
        }
        XCTAssertEqual(order.value, ["A", "barrier", "L"], name)
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    /// From the review of this fix: each of a line of claimants waiting on the launch path is granted
    /// X in turn, enters Q behind the barrier and gives X back. Woken from inside the grant, the next
    /// one recursed once per claimant: 9,000 overflowed the stack of a debug build (SIGSEGV). The
    /// grants taken back now go back to `Gatekeeper.wake`'s loop, so every claimant is added at the
    /// same depth. Measured directly, without a crash: each claimant notes how deep the stack is when
    /// its queue reads `isReady` behind the barrier (on the thread that adds it), and the spread on any
    /// one thread stays within a few frames (it was about 1 KB per claimant before).
    func testALineOfLaunchedClaimantsGivingBackBehindABarrierDoesNotRecurse() throws {
        let count = 600
        let x = OperationCategory("X", in: ExclusivityScope("launch-behind-a-barrier-line"))
        let (holder, releaseHolder) = try holderReleasedLater(claiming: x)
        XCTAssertTrue(eventually(timeout: 10) { holder.isExecuting })

        let queue = OperationQueue()
        let releaseBlocker = DispatchSemaphore(value: 0)
        queue.addOperation(BlockOperation { _ = releaseBlocker.wait(timeout: .now() + 60) })
        queue.addBarrierBlock {}

        let depths = Locked<[UInt: (low: UInt, high: UInt)]>([:])
        let claimants = try (0..<count).map { _ in
            let operation = NotesStackDepthBehindABarrier(depths)
            try operation.addExclusivity(x)
            try queue.addChain(first: operation) { _ in nil }
            return operation
        }
        XCTAssertTrue(eventually(timeout: 30) { claimants.last?.gateWaitDescription() != nil }, "the line waits for X")
        releaseHolder.signal()
        // Each is granted X in turn, enters Q behind the barrier and gives X back.
        XCTAssertTrue(
            eventually(timeout: 60) { claimants.allSatisfy { FoundationQueueState.isEnqueued($0) == true } }, "all in Q")
        releaseBlocker.signal()
        XCTAssertTrue(eventually(timeout: 60) { claimants.allSatisfy(\.isFinished) })
        let spread = depths.value.values.map { $0.high - $0.low }.max() ?? 0
        XCTAssertFalse(depths.value.isEmpty)
        XCTAssertLessThan(spread, 64 * 1024, "the stack grew by \(spread) bytes across \(count) claimants")
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }
}

/// Notes, per thread, the lowest and highest stack address at which its queue read `isReady` while a
/// dependency (the barrier) was unfinished.
private final class NotesStackDepthBehindABarrier: AsyncOperation, @unchecked Sendable {
    let depths: Locked<[UInt: (low: UInt, high: UInt)]>

    init(_ depths: Locked<[UInt: (low: UInt, high: UInt)]>) {
        self.depths = depths
        super.init()
    }

    override var isReady: Bool {
        let ready = super.isReady
        if !ready {
            var marker = 0
            let address = withUnsafeMutablePointer(to: &marker) { UInt(bitPattern: $0) }
            let thread = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(Unmanaged.passUnretained(Thread.current).toOpaque())))
            depths.mutate { depths in
                let old = depths[thread] ?? (address, address)
                depths[thread] = (min(old.low, address), max(old.high, address))
            }
        }
        return ready
    }

    override func execute() { finish() }
}
