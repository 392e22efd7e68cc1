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
        let releaseHolder = DispatchSemaphore(value: 0)
        let holder = AsyncBlockOperation { operation in
            DispatchQueue.global().async {
                releaseHolder.wait()
                order.append("H")
                operation.finish()
            }
        }
        try holder.addExclusivity(x)
        let other = OperationQueue()
        other.addOperation(holder)
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
}
