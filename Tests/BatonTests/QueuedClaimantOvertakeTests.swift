import Dispatch
import Foundation
import XCTest

@testable import Baton

/// From stop 57's review, against a version that put requests made in width-limited queues behind
/// all others (taken back): a claimant in an idle serial queue keeps its place in line, first come,
/// first served, and the operation that waits for it ends.
final class QueuedClaimantOvertakeTests: BatonTestCase {
    /// E (holds x, executing) waits, without blocking, for S: S is alone in an idle serial queue and
    /// waits for y, held by D for a moment. M, from a queue without a width limit, asks for {x, y}
    /// after S asked: it passes S in y's line, and waits there for x, which E holds. D ends: y goes
    /// to nobody (M heads the line and cannot have x), S never runs, E never ends. FIFO gives y to S.
    func testALaterMultiCategoryRequestDoesNotPassASerialQueuesClaimant() throws { try run(serialWidth: 1) }
    /// Control: the same with S's queue without a width limit: passes.
    func testOvertakeControlUnlimited() throws { try run(serialWidth: -1) }

    func run(serialWidth: Int) throws {
        var stuck = 0
        let trials = 5
        for _ in 0..<trials {
            let scope = ExclusivityScope("overtake-\(UUID())")
            let x = OperationCategory("x", in: scope)
            let y = OperationCategory("y", in: scope)
            let p = OperationQueue()
            let serial = OperationQueue()
            serial.maxConcurrentOperationCount = serialWidth
            let dStarted = Gate()
            let eStarted = Gate()
            let dRelease = Gate()
            let s = AsyncBlockOperation { $0.finish() }
            s.name = "S"
            try s.addExclusivity(y)
            let d = AsyncBlockOperation { op in
                dStarted.open()
                DispatchQueue.global().async {
                    dRelease.wait()
                    op.finish()
                }
            }
            d.name = "D"
            try d.addExclusivity(y)
            let e = AsyncBlockOperation { op in
                s.onFinish { _ in op.finish() }
                eStarted.open()
            }
            e.name = "E"
            try e.addExclusivity(x)
            let m = AsyncBlockOperation { $0.finish() }
            m.name = "M"
            try m.addExclusivity(x, y)
            p.addOperation(d)
            p.addOperation(e)
            dStarted.wait()
            eStarted.wait()
            serial.addOperation(s)
            // Asked for y: in its queue's read of `isReady` (width-limited), or as its queue started it.
            XCTAssertTrue(eventually { s.gateWaitDescription() != nil }, "S does not wait for y, which D holds")
            p.addOperation(m)
            XCTAssertTrue(eventually { m.gateWaitDescription() != nil }, "M does not wait for x, which E holds")
            dRelease.open()
            waitFinished(d)
            if !eventually(timeout: 5, { s.isFinished }) {
                stuck += 1
                s.cancel()   // unblocks E, then M
            }
            waitFinished(s)
            waitFinished(e)
            waitFinished(m)
        }
        XCTAssertEqual(stuck, 0, "S never got y in \(stuck) of \(trials) trials: E (holding x) waited for it for good")
        XCTAssertTrue(Gatekeeper.isIdle)
    }
}
