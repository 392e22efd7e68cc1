import Foundation
import XCTest

@testable import Baton

/// Rates (``ExclusivityScope/setRate(_:per:for:)``): at most N grants of a category in any window.
final class RateTests: BatonTestCase {
    private let paced = Lane.Name(scope: ObjectIdentifier(ExclusivityScope.process), category: "paced")
    private var lane: Lane { Lane(name: paced, under: 0) }

    /// A table on a clock the test moves.
    private func pacedTable(_ count: Int, per interval: UInt64, limit: Int) -> (ClaimTable<Int>, Locked<UInt64>) {
        let now = Locked<UInt64>(1_000)
        var table = ClaimTable<Int>()
        table.clock = { now.value }
        _ = table.setLimit(limit, of: paced)
        _ = table.setPace(Pace(count: count, interval: interval), of: paced)
        return (table, now)
    }

    // MARK: - The table, on a clock of its own

    func testAPaceHoldsTheThirdGrantUntilTheFirstLeavesTheWindow() {
        var (table, now) = pacedTable(2, per: 100, limit: 10)
        XCTAssertTrue(table.request(1, lanes: [lane], waiter: 1))
        now.mutate { $0 = 1_030 }
        XCTAssertTrue(table.request(2, lanes: [lane], waiter: 2))
        XCTAssertFalse(table.request(3, lanes: [lane], waiter: 3), "two grants in the window already")
        XCTAssertEqual(table.deadlineToArm(), 1_100, "timed for when the first grant leaves the window")
        XCTAssertNil(table.deadlineToArm(), "armed already")
        XCTAssertEqual(table.release([lane], by: 1).count, 0, "room is not enough: the pace holds it back")
        now.mutate { $0 = 1_099 }
        XCTAssertEqual(table.advance().count, 0, "not yet")
        now.mutate { $0 = 1_100 }
        XCTAssertEqual(table.advance().map(\.1), [3])
        XCTAssertFalse(table.request(4, lanes: [lane], waiter: 4))
        XCTAssertEqual(table.deadlineToArm(), 1_130, "the second grant leaves the window next")
        now.mutate { $0 = 1_130 }
        XCTAssertEqual(table.advance().map(\.1), [4])
        for id in [2, 3, 4] as [UInt64] { _ = table.release([lane], by: id) }
        XCTAssertTrue(table.isIdle)
    }

    func testAnUnusedPacedLaneRemembersItsGrantsUntilTheyLeaveTheWindow() {
        var (table, now) = pacedTable(1, per: 50, limit: 1)
        XCTAssertTrue(table.request(1, lanes: [lane], waiter: 1))
        XCTAssertEqual(table.release([lane], by: 1).count, 0)
        XCTAssertEqual(table.lanes.count, 1, "kept: forgetting it would forget the grant")
        XCTAssertEqual(table.deadlineToArm(), 1_050)
        XCTAssertFalse(table.request(2, lanes: [lane], waiter: 2), "one a window")
        now.mutate { $0 = 1_050 }
        XCTAssertEqual(table.advance().map(\.1), [2])
        XCTAssertEqual(table.release([lane], by: 2).count, 0)
        now.mutate { $0 = 1_100 }
        XCTAssertEqual(table.deadlineToArm(), 1_100)
        XCTAssertEqual(table.advance().count, 0)
        XCTAssertEqual(table.lanes.count, 0, "forgotten once its grants left the window")
        XCTAssertNil(table.deadlineToArm(), "nothing left to time")
    }

    func testAPacedLaneInARequestForSeveralIsGrantedAllOrNone() {
        let other = Lane(name: .init(scope: ObjectIdentifier(ExclusivityScope.process), category: "free"), under: 0)
        var (table, now) = pacedTable(1, per: 100, limit: 5)
        XCTAssertTrue(table.request(1, lanes: [lane], waiter: 1))
        XCTAssertFalse(table.request(2, lanes: [other, lane], waiter: 2), "the paced lane holds it back")
        XCTAssertFalse(table.request(3, lanes: [other], waiter: 3), "no barging past two in other's line")
        XCTAssertEqual(table.deadlineToArm(), 1_100)
        now.mutate { $0 = 1_100 }
        XCTAssertEqual(table.advance().map(\.1), [2], "two gets both lanes at once")
        XCTAssertEqual(table.release([other, lane], by: 2).map(\.1), [3], "then three, behind it in other's line")
        _ = table.release([lane], by: 1)
        _ = table.release([other], by: 3)
        now.mutate { $0 = 1_200 }
        _ = table.advance()
        XCTAssertTrue(table.isIdle)
    }

    func testRemovingAPaceLetsItsWaitersThroughAtOnceAndLoweringItKeepsTheNewestGrants() {
        var (table, now) = pacedTable(3, per: 100, limit: 10)
        for id in 1...3 as ClosedRange<UInt64> {
            now.mutate { $0 += 10 }
            XCTAssertTrue(table.request(id, lanes: [lane], waiter: Int(id)))
        }
        XCTAssertFalse(table.request(4, lanes: [lane], waiter: 4))
        XCTAssertEqual(table.setPace(Pace(count: 1, interval: 100), of: paced).count, 0)
        now.mutate { $0 = 1_110 }
        XCTAssertEqual(table.advance().count, 0, "the newest grant (at 1,030) is the one kept: in the window")
        XCTAssertEqual(table.setPace(nil, of: paced).map(\.1), [4])
        XCTAssertNil(table.pace(of: paced))
    }

    /// Random requests, releases and withdrawals on a moving clock, paces of 1 to 3 per window on
    /// two of three lanes: no lane is ever granted more than its pace in any window, nobody holds a
    /// lane beyond its limit, and once everything is released and time has passed every request was
    /// granted or withdrawn and the table is empty.
    func testRandomTrafficNeverExceedsAPace() {
        let scope = ObjectIdentifier(ExclusivityScope.process)
        let lanes = ["a", "b", "c"].map { Lane(name: .init(scope: scope, category: $0), under: 0) }
        for seed in 0..<40 as Range<UInt64> {
            var random = SplitMix(state: seed &+ 20_261_125)
            let now = Locked<UInt64>(0)
            var table = ClaimTable<Int>()
            table.clock = { now.value }
            let paces = [Pace(count: 1 + random.next(3), interval: 50), Pace(count: 1 + random.next(3), interval: 80)]
            _ = table.setPace(paces[0], of: lanes[0].name)
            _ = table.setPace(paces[1], of: lanes[1].name)
            for lane in lanes { _ = table.setLimit(1 + random.next(2), of: lane.name) }
            var grants: [Lane: [UInt64]] = [:]
            var holding: [UInt64: [Lane]] = [:]
            var waiting: [UInt64: [Lane]] = [:]
            var nextID: UInt64 = 1
            // The timers the gatekeeper would arm: taken after every change, fired when the time comes.
            var alarms: [UInt64] = []
            func granted(_ list: [(UInt64, Int)]) {
                for (id, _) in list {
                    let wanted = waiting.removeValue(forKey: id)!
                    holding[id] = wanted
                    for lane in wanted { grants[lane, default: []].append(now.value) }
                }
                if let deadline = table.deadlineToArm() { alarms.append(deadline) }
            }
            func pass(_ time: UInt64) {
                now.mutate { $0 += time }
                while let due = alarms.firstIndex(where: { $0 <= now.value }) {
                    alarms.remove(at: due)
                    granted(table.advance())
                }
            }
            for _ in 0..<600 {
                switch random.next(10) {
                case 0..<4:
                    var wanted = lanes.filter { _ in random.next(2) == 0 }
                    if wanted.isEmpty { wanted = [lanes[random.next(3)]] }
                    let id = nextID
                    nextID += 1
                    waiting[id] = wanted
                    granted(table.request(id, lanes: wanted, waiter: Int(id)) ? [(id, Int(id))] : [])
                case 4..<7:
                    guard !holding.isEmpty else { continue }
                    let id = holding.keys.sorted()[random.next(holding.count)]
                    granted(table.release(holding.removeValue(forKey: id)!, by: id))
                case 7:
                    guard !waiting.isEmpty else { continue }
                    let id = waiting.keys.sorted()[random.next(waiting.count)]
                    let list = table.withdraw(id)
                    if list != nil { waiting[id] = nil }
                    granted(list ?? [])
                default:
                    pass(UInt64(random.next(40)))
                    // A stale timer (armed for a deadline since moved) may fire at any time.
                    if random.next(4) == 0 { granted(table.advance()) }
                }
                for lane in lanes {
                    let holders = holding.values.filter { $0.contains(lane) }.count
                    XCTAssertLessThanOrEqual(holders, table.limit(of: lane.name), "seed \(seed)")
                }
            }
            // Drain: release everything, let time pass (only the timers asked for advance it), repeat.
            for _ in 0..<200 where !(holding.isEmpty && waiting.isEmpty) {
                for id in holding.keys.sorted() { granted(table.release(holding.removeValue(forKey: id)!, by: id)) }
                pass(100)
            }
            XCTAssertTrue(waiting.isEmpty && holding.isEmpty, "seed \(seed): \(waiting.count) still waiting")
            pass(1_000)
            XCTAssertTrue(table.isIdle, "seed \(seed)")
            XCTAssertEqual(table.lanes.count, 0, "seed \(seed): every lane forgotten once cooled")
            for (index, pace) in paces.enumerated() {
                let times = grants[lanes[index]] ?? []
                for start in times.indices where start + pace.count < times.count {
                    XCTAssertGreaterThanOrEqual(
                        times[start + pace.count] - times[start], pace.interval,
                        "seed \(seed): more than \(pace.count) grants of \(index) within \(pace.interval)")
                }
            }
        }
    }

    // MARK: - Operations

    /// Fifteen operations at five per window: the last five cannot start before two windows have
    /// passed since the first (a lower bound the pace guarantees, whatever the machine's speed).
    func testOperationsStartNoFasterThanTheRate() throws {
        let scope = ExclusivityScope("rate")
        try scope.setLimit(5, for: "api")
        try scope.setRate(5, per: .milliseconds(150), for: "api")
        let rate = try XCTUnwrap(scope.rate(of: "api"))
        XCTAssertEqual(rate.count, 5)
        XCTAssertEqual(rate.interval, .milliseconds(150))
        let meter = ConcurrencyMeter()
        let operations = (0..<15).map { _ in MeteredOperation(meter) }
        for operation in operations { try operation.addExclusivity(OperationCategory("api", in: scope)) }
        let began = ContinuousClock.now
        try GroupOperation(operations: operations).run(timeout: .seconds(testTimeout))
        XCTAssertGreaterThanOrEqual(ContinuousClock.now - began, .milliseconds(300))
        XCTAssertEqual(meter.total, 15)
        XCTAssertLessThanOrEqual(meter.most, 5)
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
    }

    func testCancellingAnOperationHeldBackByTheRateEndsItWithoutWaitingForTheWindow() throws {
        let scope = ExclusivityScope("rate cancel")
        try scope.setLimit(10, for: "api")
        try scope.setRate(1, per: .seconds(3_600), for: "api")
        let category = OperationCategory("api", in: scope)
        let first = AsyncBlockOperation { $0.finish() }
        try first.addExclusivity(category)
        try first.run(timeout: .seconds(testTimeout))
        let second = AsyncBlockOperation { $0.finish() }
        try second.addExclusivity(category)
        let queue = OperationQueue()
        queue.addOperation(second)
        // The rate is named once the request is in the table, a step after the operation began waiting.
        let expected = "waiting for 'api' in rate cancel (rate 1 per 3600.0 seconds)"
        XCTAssertTrue(
            eventually { second.gateWaitDescription() == expected }, String(describing: second.gateWaitDescription()))
        second.cancel()
        waitFinished(second)
        XCTAssertEqual(second.outcome?.isCancelled, true)
        XCTAssertTrue(eventually { Gatekeeper.isIdle })
        scope.removeRate(for: "api")
        XCTAssertNil(scope.rate(of: "api"))
    }

    func testBadRatesAreRefusedWithTheCategoryNamed() {
        let scope = ExclusivityScope("s")
        for (count, interval) in [(0, Duration.seconds(1)), (2, .zero), (2, .seconds(-1))] {
            XCTAssertThrowsError(try scope.setRate(count, per: interval, for: "db")) { error in
                guard case BatonError.invalidRate(let category, count, interval) = error else { return XCTFail("\(error)") }
                XCTAssertEqual(category, "'db' in s")
                XCTAssertTrue("\(error)".contains("'db' in s"), "\(error)")
            }
        }
        XCTAssertThrowsError(try scope.setRate(2, per: .seconds(1), for: ""))
        XCTAssertNil(scope.rate(of: "db"), "nothing set by a refused call")
        // Beyond what `Duration.components` can give (it traps): taken as about a century, no crash.
        let huge = Duration.seconds(Int64.max) + .seconds(Int64.max)
        XCTAssertNoThrow(try scope.setRate(1, per: huge, for: "db"))
        XCTAssertGreaterThanOrEqual(scope.rate(of: "db")?.interval ?? .zero, .seconds(3_000_000_000))
        XCTAssertNoThrow(try scope.setRate(1, per: .nanoseconds(1) / 4, for: "db"))
        XCTAssertEqual(scope.rate(of: "db")?.interval, .nanoseconds(1), "a window below a nanosecond is one")
    }
}

extension RateTests {
    /// A scope's rates go with it, and so do its lanes still counting recent grants: a scope made later
    /// at the same address starts afresh.
    func testAScopesRatesAndRememberedGrantsGoWithIt() {
        let scope = ExclusivityScope("gone")
        let name = Lane.Name(scope: ObjectIdentifier(scope), category: "api")
        let now = Locked<UInt64>(1_000)
        var table = ClaimTable<Int>()
        table.clock = { now.value }
        _ = table.setPace(Pace(count: 1, interval: 1_000), of: name)
        XCTAssertTrue(table.request(1, lanes: [Lane(name: name, under: 0)], waiter: 1))
        _ = table.release([Lane(name: name, under: 0)], by: 1)
        XCTAssertEqual(table.lanes.count, 1, "cooling")
        table.forgetLimits(of: ObjectIdentifier(scope))
        XCTAssertNil(table.pace(of: name))
        XCTAssertEqual(table.lanes.count, 0)
        XCTAssertTrue(table.request(2, lanes: [Lane(name: name, under: 0)], waiter: 2), "no pace, nothing remembered")
    }
}

extension RateTests {
    /// Operations added from several threads to a paced, limited category while others cancel them
    /// from yet other threads: every one finishes (the cancelled ones cancelled or run), the limit
    /// holds, and nothing stays in the table.
    func testPacedOperationsAddedAndCancelledFromManyThreadsAllFinish() throws {
        for trial in 0..<5 {
            let scope = ExclusivityScope("rate hammer \(trial)")
            try scope.setLimit(3, for: "api")
            try scope.setRate(20, per: .milliseconds(10), for: "api")
            let meter = ConcurrencyMeter()
            let operations = (0..<200).map { _ in MeteredOperation(meter) }
            for operation in operations { try operation.addExclusivity(OperationCategory("api", in: scope)) }
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 8
            let start = Gate()
            let group = DispatchGroup()
            for slice in 0..<4 {
                DispatchQueue.global().async(group: group) {
                    start.wait()
                    for index in stride(from: slice, to: operations.count, by: 4) { queue.addOperation(operations[index]) }
                }
                DispatchQueue.global().async(group: group) {
                    start.wait()
                    for index in stride(from: slice, to: operations.count, by: 8) { operations[index].cancel() }
                }
            }
            for _ in 0..<8 { start.open() }
            XCTAssertEqual(group.wait(timeout: .now() + testTimeout), .success)
            for operation in operations { waitFinished(operation) }
            XCTAssertLessThanOrEqual(meter.most, 3, "trial \(trial)")
            for (index, operation) in operations.enumerated() where index % 8 >= 4 {
                XCTAssertEqual(operation.outcome?.isSuccess, true, "trial \(trial): #\(index), never cancelled, ran")
            }
            XCTAssertTrue(eventually { Gatekeeper.isIdle }, "trial \(trial)")
        }
    }
}

extension RateTests {
    /// A timer that fires with lanes still timed for later asks for the next one itself: no other
    /// change may come to ask for it.
    func testATimerThatLeavesLanesTimedForLaterArmsTheNext() {
        var (table, now) = pacedTable(1, per: 50, limit: 1)
        let deeper = Lane(name: paced, under: 7)
        XCTAssertTrue(table.request(1, lanes: [lane], waiter: 1))
        _ = table.release([lane], by: 1)
        XCTAssertEqual(table.deadlineToArm(), 1_050)
        now.mutate { $0 = 1_020 }
        XCTAssertTrue(table.request(2, lanes: [deeper], waiter: 2))
        _ = table.release([deeper], by: 2)
        XCTAssertNil(table.deadlineToArm(), "timed for 1,070, after the armed 1,050")
        now.mutate { $0 = 1_050 }
        XCTAssertEqual(table.advance().count, 0)
        XCTAssertEqual(table.lanes.count, 1, "the first lane forgotten, the deeper one still cooling")
        XCTAssertEqual(table.deadlineToArm(), 1_070, "the timer that fired asks for the next")
        now.mutate { $0 = 1_070 }
        _ = table.advance()
        XCTAssertEqual(table.lanes.count, 0)
    }

    /// A pace on thousands of categories (one per host, each used once) cools each lane at its own
    /// time: every timer takes the one lane due and arms the next, and each lane is forgotten. (The
    /// timed lanes were a dictionary that every timer scanned: quadratic, 13 s at 16,000 in a debug
    /// build; the speed lives in this shape's linear heap, the test pins what each timer does.)
    func testManyCoolingLanesAreTakenOneTimerEachEarliestFirst() {
        let now = Locked<UInt64>(1_000)
        var table = ClaimTable<Int>()
        table.clock = { now.value }
        let hosts = (0..<4_000).map {
            Lane(name: Lane.Name(scope: ObjectIdentifier(ExclusivityScope.process), category: "host \($0)"), under: 0)
        }
        for host in hosts { _ = table.setPace(Pace(count: 1, interval: 1_000_000), of: host.name) }
        for (index, host) in hosts.enumerated() {
            now.mutate { $0 += 1 }
            XCTAssertTrue(table.request(UInt64(index + 1), lanes: [host], waiter: index))
            XCTAssertEqual(table.release([host], by: UInt64(index + 1)).count, 0)
        }
        XCTAssertEqual(table.lanes.count, hosts.count, "each remembers its grant until it leaves the window")
        var deadlines: [UInt64] = []
        while let deadline = table.deadlineToArm() {
            deadlines.append(deadline)
            now.mutate { $0 = deadline }
            _ = table.advance()
            XCTAssertEqual(table.lanes.count, hosts.count - deadlines.count, "one lane forgotten per timer")
        }
        XCTAssertEqual(deadlines, (1...hosts.count).map { 1_000 + UInt64($0) + 1_000_000 }, "earliest first, one each")
        XCTAssertEqual(table.timed.heapCount, 0)
    }

    /// The timeline against a dictionary and a scan, under random timing, re-timing and dropping: the
    /// same lanes come out, earliest first, the same earliest time is reported, and stale entries never
    /// make the heap more than about twice the lanes timed.
    func testTheTimelineMatchesAScanOfItsTimes() {
        let lanes = (0..<50).map {
            Lane(name: Lane.Name(scope: ObjectIdentifier(ExclusivityScope.process), category: "l\($0)"), under: 0)
        }
        for seed in 0..<20 as Range<UInt64> {
            var random = SplitMix(state: seed &+ 77)
            var timeline = Timeline()
            var model: [Lane: UInt64] = [:]
            var now: UInt64 = 0
            for _ in 0..<2_000 {
                let lane = lanes[random.next(lanes.count)]
                switch random.next(4) {
                case 0, 1:
                    let time = now + 1 + UInt64(random.next(100))
                    timeline.set(lane, at: time)
                    model[lane] = time
                case 2:
                    timeline.remove(lane)
                    model[lane] = nil
                default:
                    now += UInt64(random.next(30))
                    var taken: [Lane] = []
                    while let due = timeline.popDue(at: now) { taken.append(due) }
                    let expected = model.filter { $0.value <= now }
                    XCTAssertEqual(Set(taken), Set(expected.keys), "seed \(seed)")
                    let times = taken.map { expected[$0] ?? 0 }
                    XCTAssertEqual(times, times.sorted(), "earliest first")
                    for lane in taken { model[lane] = nil }
                }
                XCTAssertEqual(timeline.earliest(), model.values.min(), "seed \(seed)")
                XCTAssertEqual(timeline.due, model)
                XCTAssertLessThanOrEqual(timeline.heapCount, 2 * model.count + 17)
            }
        }
    }
}
