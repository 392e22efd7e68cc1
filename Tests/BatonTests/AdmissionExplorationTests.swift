import XCTest

@testable import Baton

/// Explores every order of gate events up to a bounded depth and checks the gate's invariants on every
/// path. `Admission` is pure, so what the threads around a gate can do to it (a queue beginning it, a
/// condition answering, the claim table granting a request, a dependency added at any moment, a queue
/// suspended just before a grant is decided, a cancel, a finish) is fed one event at a time, in every order,
/// with no thread.
///
/// The world models the claim table beside the machine: a request the machine returns is asked of the
/// table (or refused as a deadlock, or declined before it is asked because the operation cannot
/// start); the table may grant a request it holds at any later moment, and the grant is delivered to
/// the machine later still (a cancel can land in between): with `granted`, or with `declined` when
/// the operation cannot start then. A withdrawal removes a request the table still holds. What must
/// hold everywhere:
/// - with no grant on its way, the operation holds its categories exactly while the gate is open, and
///   once it has finished it holds nothing;
/// - no request stays in the table once the gate is refused, released, open or closed again, and
///   there is at most one request under way;
/// - each passage (from a begin out of `closed`) goes on along its path at most once, and a reopened
///   gate holds nothing and is begun anew;
/// - a refused or released gate never opens, and a released one never changes;
/// - the conditions are evaluated at most once, also when the gate begins anew;
/// - while a dependency added before the operation started is unfinished, the gate is not open
///   (unless the operation was started by hand, or its queue had already taken a worker for it), and
///   an operation starts only through an open gate;
/// - once its queue has taken a worker for it, an open gate stays open until it is released.
final class AdmissionExplorationTests: XCTestCase {
    struct World: Hashable {
        var gate = Admission()
        let hasConditions: Bool
        /// A request the machine returned that the shell has not yet asked the table for.
        var toAsk: UInt64?
        /// Requests the table holds, not yet granted.
        var inTable: Set<UInt64> = []
        /// Grants the table made that are on their way to the machine.
        var inFlight: Set<UInt64> = []
        /// Whether the table counts the categories as the operation's.
        var holds = false
        /// Conditions under evaluation, answered with this token.
        var evaluating: UInt64?
        /// How often the conditions were asked to evaluate.
        var evaluations = 0
        /// How often the current passage went on along its path.
        var proceeds = 0
        var finished = false
        /// The operation started executing (only from an open gate).
        var started = false
        /// A dependency added to it has not finished: no queue begins its gate until it has.
        var dependencyUnfinished = false
        /// Its queue took a worker for it (the gate open, its dependencies finished as the queue last
        /// read them): it will be started whatever `isReady` says from now on.
        var dispatched = false
        // Budgets.
        var begins = 3
        var cancels = 1
        var finishes = 1
        var declines = 2
        var dependenciesToAdd = 1
        var yields = 1

        init(hasConditions: Bool) { self.hasConditions = hasConditions }
    }

    enum Event: Hashable {
        case begin(Admission.Path, settled: Bool)
        /// Its queue starts it (from a readiness it cached), whatever the gate says: it holds a worker.
        case queueStarts
        /// An operation holding a worker of its queue waits for what this one holds.
        case yieldAsked
        case answer(satisfied: Bool)
        case ask, refuseAsDeadlock, declineBeforeAsking
        case tableGrants(UInt64)
        case deliver(UInt64, blocked: Bool)
        case cancel, finish
        case startExecuting, addDependency, dependencyFinishes, dispatch
    }

    private func events(in world: World) -> [Event] {
        var events: [Event] = []
        if world.begins > 0 && !world.finished {
            // A queue or a Baton entry point begins the gate only once the dependencies have finished;
            // a start by hand, whenever it is called.
            if !world.dependencyUnfinished {
                for path in [Admission.Path.announce, .launch] { events.append(.begin(path, settled: false)) }
                events.append(.begin(.announce, settled: true))
            }
            events.append(.begin(.start, settled: false))
            if !world.started { events.append(.queueStarts) }
        }
        // Asked while it holds, or while the table's grant is on its way to it.
        if world.yields > 0 && !world.finished && world.holds { events.append(.yieldAsked) }
        if world.gate.stage == .open && !world.started { events.append(.startExecuting) }
        if world.gate.stage == .open && world.gate.path != .start && !world.dependencyUnfinished && !world.dispatched
            && !world.started
        {
            events.append(.dispatch)
        }
        if world.dependenciesToAdd > 0 && !world.started && !world.finished { events.append(.addDependency) }
        if world.dependencyUnfinished { events.append(.dependencyFinishes) }
        if world.evaluating != nil {
            events.append(.answer(satisfied: true))
            events.append(.answer(satisfied: false))
        }
        if world.toAsk != nil {
            events.append(.ask)
            events.append(.refuseAsDeadlock)
            // Started by hand, the request is asked whatever the dependencies say.
            if world.declines > 0 && world.gate.path != .start { events.append(.declineBeforeAsking) }
        }
        for token in world.inTable.sorted() { events.append(.tableGrants(token)) }
        for token in world.inFlight.sorted() {
            events.append(.deliver(token, blocked: false))
            if world.declines > 0 { events.append(.deliver(token, blocked: true)) }
        }
        if world.cancels > 0 && !world.finished { events.append(.cancel) }
        if world.finishes > 0 && !world.finished { events.append(.finish) }
        return events
    }

    /// Applies what the shell does with an action the machine returned.
    private func perform(_ action: Admission.Action, in world: inout World) {
        switch action {
        case .none:
            break
        case .evaluate(let token):
            world.evaluating = token
            world.evaluations += 1
        case .request(let token):
            XCTAssertNil(world.toAsk, "a second request before the first was asked")
            world.toAsk = token
        case .proceed:
            world.proceeds += 1
        case .abandon:
            world.evaluating = nil
            world.proceeds += 1
        case .withdraw(let token, _):
            // A grant already on its way is given back when it arrives.
            world.inTable.remove(token)
            if world.toAsk == token { world.toAsk = nil }
            world.proceeds += 1
        case .giveBack, .reopen:
            break
        case .revoke:
            world.holds = false
        case .putFirst(let token):
            // The table moves the request it holds; one not asked yet is asked first (the ask reads
            // `holdsWorker` in the step that asks). Nothing else changes.
            XCTAssertTrue(
                world.inTable.contains(token) || world.inFlight.contains(token) || world.toAsk == token, "put first, unknown")
        }
    }

    private func apply(_ event: Event, to old: World) throws -> World {
        var world = old
        switch event {
        case .begin(let path, let settled):
            world.begins -= 1
            if world.gate.isClosed { world.proceeds = 0 }
            perform(world.gate.begin(path, settled: settled, hasConditions: world.hasConditions), in: &world)
        case .queueStarts:
            world.begins -= 1
            if world.gate.isClosed { world.proceeds = 0 }
            perform(world.gate.beginByStart(hasConditions: world.hasConditions, holdsWorker: true), in: &world)
            XCTAssertTrue(world.gate.holdsWorker || world.gate.isPassed, "a queue's start that waits holds a worker")
        case .yieldAsked:
            world.yields -= 1
            // The shell asks only while the operation has not started and its queue has not taken a
            // worker for it.
            if !world.started && world.gate.yield(dispatched: world.dispatched) { world.holds = false }
        case .answer(let satisfied):
            let token = try XCTUnwrap(world.evaluating)
            world.evaluating = nil
            perform(world.gate.answered(token, satisfied: satisfied), in: &world)
        case .ask:
            // As `request` does: a dependency added since the gate began declines before asking.
            let token = try XCTUnwrap(world.toAsk)
            world.toAsk = nil
            if world.gate.mustLookAgain && world.gate.path != .start {
                perform(world.gate.declined(token), in: &world)
            } else {
                world.inTable.insert(token)
            }
        case .refuseAsDeadlock:
            let token = try XCTUnwrap(world.toAsk)
            world.toAsk = nil
            perform(world.gate.refuse(token), in: &world)
        case .declineBeforeAsking:
            let token = try XCTUnwrap(world.toAsk)
            world.toAsk = nil
            world.declines -= 1
            let action = world.gate.declined(token)
            XCTAssertTrue(action == .giveBack || action == .reopen(world.gate.path), "\(action)")
            perform(action, in: &world)
        case .tableGrants(let token):
            world.inTable.remove(token)
            world.inFlight.insert(token)
            world.holds = true
        case .deliver(let token, let blocked):
            world.inFlight.remove(token)
            if blocked { world.declines -= 1 }
            let action = blocked ? world.gate.declined(token) : world.gate.granted(token)
            switch action {
            case .proceed: break   // it keeps them
            case .giveBack, .reopen: world.holds = false
            default: XCTFail("a grant answered with \(action)")
            }
            perform(action, in: &world)
        case .startExecuting:
            world.started = true
        case .addDependency:
            world.dependenciesToAdd -= 1
            world.dependencyUnfinished = true
            // The shell tells the gate only while the operation has not started.
            perform(world.gate.dependencyAdded(dispatched: world.dispatched), in: &world)
        case .dispatch:
            world.dispatched = true
        case .dependencyFinishes:
            world.dependencyUnfinished = false
        case .cancel:
            world.cancels -= 1
            perform(world.gate.cancel(), in: &world)
        case .finish:
            world.finishes -= 1
            world.finished = true
            switch world.gate.finish() {
            case .none: break
            case .lanes: world.holds = false
            case .withdraw(let token):
                world.inTable.remove(token)
                if world.toAsk == token { world.toAsk = nil }
            case .abandon: world.evaluating = nil
            }
        }
        check(world, after: event, from: old)
        return world
    }

    private func check(_ world: World, after event: Event, from old: World) {
        let stage = world.gate.stage
        let context = "\(event) took \(old.gate.stage) to \(stage) (conditions: \(world.hasConditions))"
        if world.inFlight.isEmpty {
            XCTAssertEqual(world.holds, stage == .open, "holds its categories exactly while open: \(context)")
        }
        if world.finished && world.inFlight.isEmpty { XCTAssertFalse(world.holds, "finished holding: \(context)") }
        let underWay = world.inTable.count + world.inFlight.count + (world.toAsk == nil ? 0 : 1)
        XCTAssertLessThanOrEqual(underWay, 1, "two requests under way: \(context)")
        switch stage {
        case .refused, .released, .open, .closed:
            XCTAssertTrue(world.inTable.isEmpty && world.toAsk == nil, "a request left: \(context)")
        case .evaluating, .waiting:
            break
        }
        XCTAssertLessThanOrEqual(world.proceeds, 1, "went on twice in one passage: \(context)")
        switch old.gate.stage {
        case .refused: XCTAssertTrue(stage == .refused || stage == .released, context)
        case .released: XCTAssertEqual(stage, .released, context)
        case .open:
            // Closed again only by a dependency added, or a yield, before the operation started.
            let revoked =
                stage == .closed && (event == .addDependency || event == .yieldAsked) && !old.started
                && !old.dispatched && old.gate.path != .start
            XCTAssertTrue(stage == .open || stage == .released || revoked, context)
        default: break
        }
        if world.finished { XCTAssertEqual(stage, .released, context) }
        XCTAssertLessThanOrEqual(world.evaluations, 1, "conditions evaluated twice: \(context)")
        if world.started { XCTAssertTrue(stage == .open || stage == .released, "started unadmitted: \(context)") }
        if world.dependencyUnfinished && world.gate.path != .start && !world.started && !world.dispatched {
            XCTAssertNotEqual(stage, .open, "open while a dependency runs: \(context)")
        }
        // Its queue will start it from the worker it took: it keeps what it holds until it finishes.
        if world.dispatched { XCTAssertTrue(stage == .open || stage == .released, "dispatched, then closed: \(context)") }
        // Holding a worker, it waits along the start path, and never gives back what it holds.
        if world.gate.holdsWorker { XCTAssertEqual(world.gate.path, .start, context) }
    }

    func testEveryOrderOfGateEventsKeepsTheGatesInvariants() throws {
        let starts = [World(hasConditions: true), World(hasConditions: false)]
        var seen = Set(starts)
        var frontier = starts
        var transitions = 0
        var reopened = 0
        var openedAgain = 0
        var yielded = 0
        var putFirst = 0
        while !frontier.isEmpty {
            var next: [World] = []
            for world in frontier {
                for event in events(in: world) {
                    let after = try apply(event, to: world)
                    transitions += 1
                    if case .waiting = world.gate.stage, after.gate.stage == .closed { reopened += 1 }
                    if after.gate.stage == .open, world.gate.stage != .open, after.begins < 2 { openedAgain += 1 }
                    if event == .yieldAsked, world.gate.stage == .open, after.gate.stage == .closed { yielded += 1 }
                    if case .waiting = world.gate.stage, event == .queueStarts, !world.gate.holdsWorker,
                        after.gate.holdsWorker
                    {
                        putFirst += 1
                    }
                    if seen.insert(after).inserted { next.append(after) }
                }
            }
            frontier = next
        }
        // The exploration reached what it is for.
        XCTAssertGreaterThan(reopened, 0, "no path reopened the gate")
        XCTAssertGreaterThan(openedAgain, 0, "no reopened gate opened again")
        XCTAssertGreaterThan(yielded, 0, "no open gate yielded")
        XCTAssertGreaterThan(putFirst, 0, "no waiting request was put first")
        XCTAssertGreaterThan(seen.count, 500, "\(seen.count) worlds, \(transitions) transitions")
    }
}
