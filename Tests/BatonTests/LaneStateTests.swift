import XCTest

@testable import Baton

/// A lane's state keeps what few lanes need (more holders, a pace, a lender's hold) out of line: a
/// lane that needs none of it does not make it, and a state stays a value when it does.
final class LaneStateTests: XCTestCase {
    typealias State = ClaimTable<String>.LaneState

    private let lane = Lane(name: .init(scope: ObjectIdentifier(ExclusivityScope.process), category: "lane-state"), under: 0)

    /// An exclusive lane without a pace, held and given back, never makes the out-of-line part; one
    /// with a second holder does.
    func testAnExclusiveLaneMakesNoUncommonPart() throws {
        var table = ClaimTable<String>()
        XCTAssertTrue(table.request(1, lanes: [lane], waiter: "one"))
        XCTAssertFalse(table.request(2, lanes: [lane], waiter: "two"))
        let record = try XCTUnwrap(table.lanes.record(for: lane))
        XCTAssertFalse(record.state.hasUncommon, "held, with one waiting")
        XCTAssertEqual(table.release([lane], by: 1).map(\.1), ["two"])
        XCTAssertEqual(table.release([lane], by: 2).count, 0)
        XCTAssertFalse(record.state.hasUncommon, "given back")
        XCTAssertTrue(table.isIdle)

        _ = table.setLimit(2, of: lane.name)
        XCTAssertTrue(table.request(3, lanes: [lane], waiter: "three"))
        XCTAssertTrue(table.request(4, lanes: [lane], waiter: "four"))
        XCTAssertTrue(try XCTUnwrap(table.lanes.record(for: lane)).state.hasUncommon, "a second holder")
        XCTAssertEqual(table.lanes[lane]?.held, 2)
        _ = table.release([lane], by: 3)
        _ = table.release([lane], by: 4)
        XCTAssertTrue(table.isIdle)
    }

    /// A copy of a state with holders beyond the first, a pace and a lender's hold changes apart from
    /// the original.
    func testACopyOfAStateChangesApartFromTheOriginal() {
        var original = State(limit: 3, pace: Pace(count: 2, interval: 100))
        original.addHolder(1, "one")
        original.addHolder(2, "two")
        original.noteGrant(at: 10)
        var copy = original
        copy.addHolder(3, "three")
        XCTAssertEqual(copy.takeHolder(2), "two")
        copy.noteGrant(at: 20)
        copy.noteGrant(at: 30)
        copy.lenderRelease = lane
        copy.setPace(Pace(count: 1, interval: 50))

        XCTAssertEqual(original.held, 2)
        XCTAssertTrue(original.isHeld(by: 2))
        XCTAssertFalse(original.isHeld(by: 3))
        XCTAssertEqual(original.pace, Pace(count: 2, interval: 100))
        XCTAssertNil(original.paceDue(at: 11), "one grant of two: the original's pace lets the next through")
        XCTAssertEqual(original.paceCools, 110)
        XCTAssertNil(original.lenderRelease)

        XCTAssertEqual(copy.held, 2)
        XCTAssertTrue(copy.isHeld(by: 3))
        XCTAssertFalse(copy.isHeld(by: 2))
        XCTAssertEqual(copy.pace, Pace(count: 1, interval: 50))
        XCTAssertEqual(copy.paceDue(at: 31), 80, "the copy kept its newest grant under its new pace")
        XCTAssertEqual(copy.lenderRelease, lane)
    }

    /// Giving back the holders' table a burst grew keeps the part the state owns alone: it is changed
    /// where it is, not copied.
    func testGivingBackTheHoldersTableKeepsTheUnsharedPart() throws {
        var state = State(limit: 40, pace: nil)
        for id: UInt64 in 1...20 { state.addHolder(id, "holder \(id)") }
        for id: UInt64 in 1...20 { XCTAssertEqual(state.takeHolder(id), "holder \(id)") }
        let before = try XCTUnwrap(state.uncommonIdentity)
        XCTAssertGreaterThan(state.otherHolders.capacity, 16)
        state.shrinkHolders()
        XCTAssertEqual(state.uncommonIdentity, before, "an unshared part is changed in place")
        XCTAssertEqual(state.otherHolders.capacity, 0)
    }

    /// A state without the uncommon part is small: a record per lane in use is what a burst of claims on
    /// distinct categories keeps alive, one per claim. A record (an object header, its lane and its
    /// state, each 8-aligned) fits glibc's fast bins, 120 bytes of request at most on 64-bit systems.
    func testAStateWithoutTheUncommonPartIsSmall() {
        let state = MemoryLayout<ClaimTable<Gatekeeper.Waiter>.LaneState>.size
        XCTAssertLessThanOrEqual(state, 56)
        XCTAssertLessThanOrEqual(2 * MemoryLayout<Int>.size + MemoryLayout<Lane>.stride + state, 120)
    }

    /// A limit beyond 32 bits is kept as the largest 32-bit one, which no count of holders reaches; the
    /// line's start moves as it did.
    func testALimitBeyondThirtyTwoBitsMeansNoLimit() {
        var state = State(limit: .max)
        XCTAssertEqual(state.limit, Int(Int32.max))
        state.limit = 3
        XCTAssertEqual(state.limit, 3)
        state.line = [7, 8, 9]
        state.popFirst()
        XCTAssertEqual(state.head, 1)
        XCTAssertEqual(state.first, 8)
    }

    /// A lane's lender is kept without an optional's tag, and `nil` stays `nil`, 0 stays 0.
    func testALaneKeepsItsLender() {
        XCTAssertNil(lane.lender)
        XCTAssertEqual(Lane(name: lane.name, under: 5, lender: 0).lender, 0)
        XCTAssertEqual(Lane(name: lane.name, under: 5, lender: 4).lender, 4)
        XCTAssertEqual(Lane(name: lane.name, under: 5, lender: 4), Lane(name: lane.name, under: 5), "not part of its identity")
    }
}
