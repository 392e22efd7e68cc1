import Dispatch
import Foundation
import XCTest

@testable import Baton

/// An operation that its queue starts before its gate has opened, and that keeps one of the queue's
/// workers while it waits for its categories (Linux's queue can start an operation from a readiness it
/// cached before a dependency was added: see ``Admission/holdsWorker``). Its request goes first in its
/// lines, and a holder that waits in a queue for a worker gives its categories back to it: otherwise
/// each waits for the other for ever in a queue of one worker (the CI failure of stop 43, where
/// `testClaimantsOnAHeldUnderlyingQueueWithBarriersAndLateDependencies` hung about once in 4,000 trials).
final class WorkerHolderTests: BatonTestCase {
    private let scope = ObjectIdentifier(ExclusivityScope.process)
    private func lane(_ category: String) -> Lane { Lane(name: .init(scope: scope, category: category), under: 0) }

    // MARK: - The table

    /// Put first, a request is granted when its lanes have room, whoever waits (the others can give
    /// back what they hold; it cannot give back its worker); otherwise it goes ahead of every request
    /// in its lines, and the table names the holders to ask.
    func testARequestPutFirstGoesAheadOfTheLineAndNamesTheHolders() throws {
        let (a, b) = (lane("a"), lane("b"))
        var table = ClaimTable<String>()
        _ = table.setLimit(2, of: a.name)
        XCTAssertTrue(table.request(1, lanes: [a, b], waiter: "one"))
        XCTAssertFalse(table.request(2, lanes: [a, b], waiter: "two"), "b is held")
        XCTAssertFalse(table.request(3, lanes: [a], waiter: "three"), "a has room, but two is ahead")
        XCTAssertNil(table.requestFirst(4, lanes: [a], waiter: "four"), "a has room: granted, ahead of two and three")
        XCTAssertEqual(table.requestFirst(5, lanes: [a, b], waiter: "five").map { $0.sorted() }, ["four", "one"])
        // One gives a and b back: five is first in both lines, a has room for it.
        XCTAssertEqual(table.release([a, b], by: 1).map(\.1), ["five"])
        XCTAssertEqual(table.release([a], by: 4).map(\.1), [], "two waits for b, three behind it")
        XCTAssertEqual(table.release([a, b], by: 5).map(\.1).sorted(), ["three", "two"])
        _ = table.release([a, b], by: 2)
        _ = table.release([a], by: 3)
        XCTAssertTrue(table.isIdle)
    }

    /// Two requests put first keep one order in every line they share (the later one first), so neither
    /// waits for the other.
    func testRequestsPutFirstKeepOneOrderInEveryLine() {
        let (a, b) = (lane("a"), lane("b"))
        var table = ClaimTable<String>()
        XCTAssertTrue(table.request(1, lanes: [a, b], waiter: "one"))
        XCTAssertEqual(table.requestFirst(2, lanes: [a, b], waiter: "two"), ["one"])
        XCTAssertEqual(table.requestFirst(3, lanes: [b, a], waiter: "three"), ["one"])
        XCTAssertEqual(table.release([a, b], by: 1).map(\.1), ["three"])
        XCTAssertEqual(table.release([a, b], by: 3).map(\.1), ["two"])
        _ = table.release([a, b], by: 2)
        XCTAssertTrue(table.isIdle)
    }

    /// A waiting request moved first (its queue started its operation since it asked) is granted at
    /// once when its lanes have room, or waits first and names the holders; a request not waiting is
    /// left alone.
    func testAWaitingRequestMovedFirst() {
        let (a, b) = (lane("a"), lane("b"))
        var table = ClaimTable<String>()
        _ = table.setLimit(2, of: a.name)
        XCTAssertTrue(table.request(1, lanes: [b], waiter: "one"))
        XCTAssertFalse(table.request(2, lanes: [a, b], waiter: "two"))
        XCTAssertFalse(table.request(3, lanes: [a], waiter: "three"), "behind two")
        XCTAssertFalse(table.request(4, lanes: [a], waiter: "four"), "behind two")
        let moved = table.putFirst(4)
        XCTAssertEqual(moved.granted.map(\.1), ["four"], "a has room")
        XCTAssertEqual(moved.holders, [])
        let waiting = table.putFirst(2)
        XCTAssertEqual(waiting.granted.map(\.1), [])
        XCTAssertEqual(waiting.holders, ["one"], "b is held by one")
        XCTAssertEqual(table.putFirst(1).holders, [], "one holds: nothing to move")
        XCTAssertEqual(table.release([b], by: 1).map(\.1), ["two"])
        XCTAssertEqual(table.release([a], by: 4).map(\.1), ["three"])
        _ = table.release([a, b], by: 2)
        _ = table.release([a], by: 3)
        XCTAssertTrue(table.isIdle)
    }

    // MARK: - Operations

    /// One worker, held by a blocker; H claims X and is granted it while it waits in the queue (its
    /// readiness read); U, of higher priority, lies that it is ready, so the queue starts it first
    /// with its gate closed, as Linux's queue does from a stale readiness. U then waits for X with the
    /// only worker; H, which holds X, waits for a worker. H gives X back to U, U executes, then H.
    func testAnOperationStartedByItsQueueBeforeItsGateOpenedIsNotKeptWaitingByAHolderThatWaitsForAWorker() throws {
        try runStartedBeforeItsGate(readsFirst: false)
    }

    /// The same, with U already waiting in X's line (behind H) when its queue starts it: its request
    /// moves first.
    func testAWaitingRequestWhoseQueueStartsItMovesFirst() throws {
        try runStartedBeforeItsGate(readsFirst: true)
    }

    private func runStartedBeforeItsGate(readsFirst: Bool) throws {
        #if canImport(Darwin)
        throw XCTSkip("Baton reads Foundation's record of a queue's operations on Linux only")
        #else
        let x = OperationCategory("X", in: ExclusivityScope("worker-holder"))
        let (queue, release) = oneWorkerQueueHeldByABlocker()
        let order = Locked<[String]>([])
        let holder = AsyncBlockOperation { operation in
            order.append("H")
            operation.finish()
        }
        try holder.addExclusivity(x)
        queue.addOperation(holder)
        // The read a queue makes as it walks: the gate begins, and X is granted at once.
        XCTAssertTrue(holder.isReady, "granted X while it waits for a worker")
        let eager = LiesAboutReadiness { order.append("U") }
        eager.readsReadiness = readsFirst
        eager.queuePriority = .veryHigh
        try eager.addExclusivity(x)
        queue.addOperation(eager)
        if readsFirst {
            XCTAssertTrue(eager.isReady, "it says so")
            XCTAssertNotNil(eager.gateWaitDescription(), "waiting for X behind the holder")
        }
        release.signal()
        XCTAssertTrue(
            eventually { holder.isFinished && eager.isFinished },
            "stuck: U \(eager.gateWaitDescription() ?? "not waiting"), H finished \(holder.isFinished)")
        XCTAssertEqual(order.value, ["U", "H"], "the holder gave X to the operation with the worker")
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
        #endif
    }
}

/// Which reads of `isReady` are an announcement's own: Linux's queue reads once as it is told, stores
/// the answer, then walks. A second read on the announcing thread (the walk found the `true` just
/// stored replaced by a stale `false`, and re-read it, which only caches it) and any read on another
/// thread are not, and announce again (the other CI hang of stop 43, about once in 2,000 trials of the
/// same test once the first was fixed).
final class AnnouncersTests: XCTestCase {
    func testOnlyTheFirstReadOnEachAnnouncingThreadIsItsOwn() {
        var announcers = Announcers()
        XCTAssertTrue(announcers.isEmpty)
        XCTAssertFalse(announcers.isOwnRead(on: 1), "nobody announces")
        announcers.begin(1)
        XCTAssertFalse(announcers.isOwnRead(on: 2), "another thread")
        XCTAssertTrue(announcers.isOwnRead(on: 1), "the announcement's read")
        XCTAssertFalse(announcers.isOwnRead(on: 1), "its walk's re-read")
        announcers.begin(2)
        announcers.begin(3)
        XCTAssertTrue(announcers.isOwnRead(on: 3))
        XCTAssertTrue(announcers.isOwnRead(on: 2))
        XCTAssertFalse(announcers.isOwnRead(on: 2))
        announcers.end(1)
        XCTAssertFalse(announcers.isOwnRead(on: 1), "ended")
        XCTAssertFalse(announcers.isOwnRead(on: 3), "read already")
        announcers.end(3)
        announcers.end(2)
        XCTAssertTrue(announcers.isEmpty)
        // A thread announcing again (nested, through a queue's walk) gets a read of its own again.
        announcers.begin(4)
        XCTAssertTrue(announcers.isOwnRead(on: 4))
        announcers.begin(4)
        XCTAssertTrue(announcers.isOwnRead(on: 4))
        announcers.end(4)
        announcers.end(4)
        XCTAssertTrue(announcers.isEmpty)
    }
}
