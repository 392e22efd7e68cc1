import Foundation
import XCTest

@testable import Baton

/// Explores every order of lifecycle events up to a bounded depth and checks the lifecycle's
/// invariants on every path. `Lifecycle` is pure, so the whole space of interleavings of the actors
/// below can be enumerated without a thread: what threads can do to an operation is exactly what this
/// test feeds the machine, one event at a time, in every order.
///
/// Actors and their budgets: the queue (a start, plus one misuse start by a stranger), the user
/// (cancel ×2, finish ×2, rerun ×2), the claimant (claim, unclaim, launch, retire), waiters (register
/// ×2, each may end early), and the echoes the shell feeds back later: the start announcement done,
/// `execute()` returning, a rerun's hop landing, a timer firing, the outcome told. The body of
/// `execute()` is covered by the user's events arriving while a call is inside.
final class LifecycleExplorationTests: XCTestCase {
    enum Result: Hashable, LifecycleOutcome {
        case succeeded, failed, cancelled
        /// What a timeout that ran out ends the operation with.
        case timedOut
        var isCancelled: Bool { self == .cancelled }
    }

    typealias Machine = Lifecycle<Result>

    /// The machine, the echoes in flight, the actors' budgets and a ledger of what the shell did.
    struct World: Hashable {
        var machine = Machine()
        // Echoes in flight.
        var announcing = false
        var inside: UInt64?
        var hops: Set<UInt64> = []
        var timers: Set<UInt64> = []
        var delivering = false
        // Budgets.
        var queueStarts = 1
        var strangerStarts = 1
        var cancels = 2
        var finishes = 2
        var reruns = 2
        var claims = 1
        var unclaims = 1
        var launches = 1
        var retires = 1
        var handOns = 1
        var waitsToRegister = 2
        /// The claimant handed the operation on (a sequence's relay): its thread starts it, or gives it
        /// to the queue after all.
        var relayed = false
        /// A parked start's dependencies finished and its resumption is on its way (`resumePark` said
        /// yes): it lands as `resumedStart`.
        var resuming = false
        // Ledger.
        var liveWaits: Set<UInt64> = []
        var told = 0
        var executesEntered = 0
        var didCancels = 0
        var executingAnnounced = 0
        var finishedAnnounced = 0
        var enqueues = 0
        /// A timer fired on the executing operation: it must end `timedOut`.
        var expired = false
    }

    /// One event an actor can feed in a world.
    enum Event: Hashable, CustomStringConvertible {
        case queueStart(skip: Result?)
        /// The queue starts the operation on a stale readiness: Foundation still counts an unfinished
        /// dependency. Later, that dependency finishes (`dependenciesFinished`, whose `isReady` read
        /// resumes the start), and the resumed start lands (`resumedStart`).
        case queueStartEarly
        /// The queue starts the operation before its gate (conditions, categories) has opened: the
        /// start waits for the gate (`admitting`). Later the gate answers (`gateAnswered`, which
        /// resumes the start), and the resumed start lands (`resumedStart`), the gate then passed.
        case queueStartGated, gateAnswered
        case dependenciesFinished, resumedStart
        case strangerStart(inFoundationQueue: Bool)
        case startAnnounced(timer: Bool)
        case executeReturned
        case hopLanded(UInt64)
        case timerFired(UInt64)
        case outcomeDelivered
        case cancel
        case finish(Result)
        case rerun
        case claim, unclaim, launch, retire
        /// The claimant hands the operation on to start on its own thread (`Relay`), which later starts
        /// it or gives it to the queue.
        case handOn, relayStart, relayEnqueue
        case registerWait
        case endWait(UInt64)

        var description: String {
            switch self {
            case .queueStart(let skip): return skip.map { "queueStart(skip: \($0))" } ?? "queueStart"
            case .queueStartEarly: return "queueStartEarly"
            case .queueStartGated: return "queueStartGated"
            case .gateAnswered: return "gateAnswered"
            case .dependenciesFinished: return "dependenciesFinished"
            case .resumedStart: return "resumedStart"
            case .strangerStart(let inQueue): return inQueue ? "strangerStart(in a Foundation queue)" : "strangerStart"
            case .startAnnounced(let timer): return timer ? "startAnnounced(timer)" : "startAnnounced"
            case .executeReturned: return "executeReturned"
            case .hopLanded(let token): return "hopLanded(\(token))"
            case .timerFired(let token): return "timerFired(\(token))"
            case .outcomeDelivered: return "outcomeDelivered"
            case .cancel: return "cancel"
            case .finish(let result): return "finish(\(result))"
            case .rerun: return "rerun"
            case .claim: return "claim"
            case .unclaim: return "unclaim"
            case .launch: return "launch"
            case .retire: return "retire"
            case .handOn: return "handOn"
            case .relayStart: return "relayStart"
            case .relayEnqueue: return "relayEnqueue"
            case .registerWait: return "registerWait"
            case .endWait(let token): return "endWait(\(token))"
            }
        }
    }

    static let queue = Machine.QueueKey(queue: ObjectIdentifier(LifecycleExplorationTests.self), onMainThread: false)

    func enabledEvents(_ world: World) -> [Event] {
        var events = [Event]()
        if world.queueStarts > 0 {
            events += [
                .queueStart(skip: nil), .queueStart(skip: .failed), .queueStart(skip: .cancelled), .queueStartEarly,
                .queueStartGated,
            ]
        }
        if world.machine.isParked { events.append(.dependenciesFinished) }
        if world.machine.parking == .admitting { events.append(.gateAnswered) }
        if world.resuming { events.append(.resumedStart) }
        if world.strangerStarts > 0 {
            events += [.strangerStart(inFoundationQueue: false), .strangerStart(inFoundationQueue: true)]
        }
        if world.announcing { events += [.startAnnounced(timer: false), .startAnnounced(timer: true)] }
        if world.inside != nil { events.append(.executeReturned) }
        events += world.hops.sorted().map(Event.hopLanded)
        events += world.timers.sorted().map(Event.timerFired)
        if world.delivering { events.append(.outcomeDelivered) }
        if world.cancels > 0 { events.append(.cancel) }
        if world.finishes > 0 { events += [.finish(.succeeded), .finish(.failed)] }
        if world.reruns > 0 { events.append(.rerun) }
        if world.claims > 0 { events.append(.claim) }
        if world.unclaims > 0 { events.append(.unclaim) }
        if world.launches > 0 { events.append(.launch) }
        if world.retires > 0 { events.append(.retire) }
        if world.handOns > 0 { events.append(.handOn) }
        if world.relayed { events += [.relayStart, .relayEnqueue] }
        if world.waitsToRegister > 0 { events.append(.registerWait) }
        events += world.liveWaits.sorted().map(Event.endWait)
        return events
    }

    struct Violation: Error, CustomStringConvertible {
        let description: String
    }

    // MARK: - Applying an event as the shell does

    func apply(_ event: Event, to world: World) throws -> World {
        var next = world
        switch event {
        case .queueStart(let skip):
            next.queueStarts -= 1
            let caller = Machine.Caller(queue: Self.queue.queue, isMainThread: false, foundation: .starting)
            try start(&next, Machine.StartFacts(caller: caller, skip: skip, ready: true))
        case .queueStartEarly:
            next.queueStarts -= 1
            let caller = Machine.Caller(queue: Self.queue.queue, isMainThread: false, foundation: .starting)
            var facts = Machine.StartFacts(caller: caller, skip: nil, ready: false)
            facts.dependenciesUnfinished = true
            try start(&next, facts)
        case .queueStartGated:
            next.queueStarts -= 1
            let caller = Machine.Caller(queue: Self.queue.queue, isMainThread: false, foundation: .starting)
            var facts = Machine.StartFacts(caller: caller, skip: nil, ready: true)
            facts.admitted = false
            facts.byQueue = true
            try start(&next, facts)
        case .gateAnswered:
            if next.machine.resumeAdmission() { next.resuming = true }
            if next.machine.resumeAdmission() { throw Violation(description: "a start held by its gate was resumed twice") }
        case .dependenciesFinished:
            if next.machine.resumePark() { next.resuming = true }
            // One resumption however many reads see the count reach zero.
            if next.machine.resumePark() { throw Violation(description: "a parked start was resumed twice") }
        case .resumedStart:
            next.resuming = false
            var facts = Machine.StartFacts(
                caller: Machine.Caller(queue: nil, isMainThread: false, foundation: nil), skip: nil, ready: true)
            facts.resumesPark = true
            try start(&next, facts)
        case .strangerStart(let inQueue):
            next.strangerStarts -= 1
            let caller = Machine.Caller(queue: nil, isMainThread: false, foundation: inQueue ? .waiting : nil)
            try start(&next, Machine.StartFacts(caller: caller, skip: nil, ready: true))
        case .startAnnounced(let timer):
            next.announcing = false
            switch next.machine.startAnnounced(armsTimer: timer) {
            case .none: throw Violation(description: "startAnnounced found no start to enter")
            case .finish: try told(&next)
            case .execute(let generation, let token):
                try enterExecute(&next, generation)
                if let token { next.timers.insert(token) }
            }
        case .executeReturned:
            next.inside = nil
            switch next.machine.executeReturned(generation: world.inside!) {
            case .none: break
            case .deliverCancel: try deliverCancel(&next)
            case .hop(let token): next.hops.insert(token)
            case .finish: try told(&next)
            }
        case .hopLanded(let token):
            next.hops.remove(token)
            if case .execute(let generation) = next.machine.hopLanded(token: token) { try enterExecute(&next, generation) }
        case .timerFired(let token):
            next.timers.remove(token)
            if case .timedOut(let action) = next.machine.timerFired(token: token, expiry: .timedOut) {
                if world.machine.decided != nil { throw Violation(description: "a timer fired on a decided operation") }
                next.expired = true
                try cancelled(&next, action)
            }
        case .outcomeDelivered:
            next.delivering = false
            guard case .announce(let wasExecuting) = next.machine.outcomeDelivered() else {
                throw Violation(description: "outcomeDelivered found nothing to commit")
            }
            if wasExecuting != (world.executingAnnounced == 1) {
                throw Violation(
                    description: "isExecuting announced \(world.executingAnnounced) times, finish says \(wasExecuting)")
            }
            next.finishedAnnounced += 1
            // Every registered wait is resumed, once.
            next.liveWaits = []
        case .cancel:
            next.cancels -= 1
            try cancelled(&next, next.machine.cancel())
        case .finish(let result):
            next.finishes -= 1
            switch next.machine.finish(result, carriesResult: true) {
            case .remembered, .report: break
            case .finish: try told(&next)
            }
        case .rerun:
            next.reruns -= 1
            if case .hop(let token) = next.machine.rerun() { next.hops.insert(token) }
        case .claim:
            next.claims -= 1
            _ = next.machine.claim()
        case .unclaim:
            next.unclaims -= 1
            next.machine.unclaim()
        case .launch:
            next.launches -= 1
            let before = next.machine.custody
            switch next.machine.launch(on: Self.queue) {
            case .none: break
            case .enqueue:
                if before != .claimed { throw Violation(description: "enqueued from custody \(before)") }
                if world.machine.cancelRequested { throw Violation(description: "a cancelled operation was enqueued") }
                next.enqueues += 1
            case .startHere:
                try start(
                    &next,
                    Machine.StartFacts(
                        caller: Machine.Caller(queue: nil, isMainThread: false, foundation: nil), skip: nil, ready: true))
            }
        case .retire:
            next.retires -= 1
            if next.machine.retire() == .startHere {
                try start(
                    &next,
                    Machine.StartFacts(
                        caller: Machine.Caller(queue: nil, isMainThread: false, foundation: nil), skip: nil, ready: true))
            }
        case .handOn:
            next.handOns -= 1
            let before = next.machine.custody
            if next.machine.launchHere(insteadOf: nil) {
                if before != .claimed { throw Violation(description: "handed on from custody \(before)") }
                if next.machine.custody != .handedOn { throw Violation(description: "handed on into \(next.machine.custody)") }
                next.relayed = true
            }
        case .relayStart:
            next.relayed = false
            guard next.machine.takeHandedOn() else { throw Violation(description: "a relayed operation was not there to take") }
            try start(
                &next,
                Machine.StartFacts(
                    caller: Machine.Caller(queue: nil, isMainThread: false, foundation: nil), skip: nil, ready: true))
        case .relayEnqueue:
            next.relayed = false
            if next.machine.enqueueInstead(on: Self.queue) {
                if !world.machine.isPending { throw Violation(description: "a started operation was enqueued") }
                next.enqueues += 1
            }
        case .registerWait:
            next.waitsToRegister -= 1
            switch next.machine.registerWait(selfBlocking: false) {
            case .registered(let token): next.liveWaits.insert(token)
            case .finished:
                if next.machine.finished == nil { throw Violation(description: "a wait saw an unfinished operation finished") }
            case .refused: throw Violation(description: "a wait was refused without a reason")
            }
        case .endWait(let token):
            next.liveWaits.remove(token)
            if !next.machine.waitEnded(token: token) { throw Violation(description: "a live wait was not registered") }
        }
        return next
    }

    private func start(_ world: inout World, _ facts: Machine.StartFacts) throws {
        let custody = world.machine.custody
        let parking = world.machine.parking
        let action = world.machine.start(facts)
        if parking != .none, !facts.resumesPark, action != .refuse(.startedWhileInQueue) {
            throw Violation(description: "a start its queue put off was taken by another start (\(action))")
        }
        switch action {
        case .refuse:
            break
        case .admit:
            if facts.admitted { throw Violation(description: "an operation past its gate was sent to its gate") }
            if facts.byQueue && world.machine.parking != .admitting {
                throw Violation(description: "a start its queue made waits for its gate unparked")
            }
        case .park:
            if !facts.dependenciesUnfinished { throw Violation(description: "parked with its dependencies finished") }
        case .finishUnexecuted:
            try told(&world)
        case .announce:
            // A resumed start is the queue's own, put off (`queueStartEarly`).
            if case .enqueued(let key) = custody, facts.caller.queue != key.queue, !facts.resumesPark {
                throw Violation(description: "a stranger started an operation its queue holds")
            }
            if custody == .claimed { throw Violation(description: "a claimed operation was started") }
            if facts.caller.foundation == .waiting && custody != .direct {
                throw Violation(description: "an operation waiting in a Foundation queue was started by hand")
            }
            world.announcing = true
            world.executingAnnounced += 1
            if world.executingAnnounced > 1 { throw Violation(description: "isExecuting announced twice") }
        }
    }

    private func enterExecute(_ world: inout World, _ generation: UInt64) throws {
        if world.inside != nil { throw Violation(description: "execute() entered while a call is inside") }
        if world.machine.decided != nil { throw Violation(description: "execute() entered on a decided operation") }
        if world.machine.cancelRequested { throw Violation(description: "execute() entered on a cancelled operation") }
        world.inside = generation
        world.executesEntered += 1
    }

    private func deliverCancel(_ world: inout World) throws {
        if world.inside != nil && !world.machine.cancelsAlongsideExecute {
            throw Violation(description: "didCancel() while execute() runs")
        }
        if world.executesEntered == 0 { throw Violation(description: "didCancel() before execute()") }
        world.didCancels += 1
        // A composite's is delivered to every `cancel()` while it executes (it is idempotent).
        if world.didCancels > 1 && !world.machine.cancelsAlongsideExecute {
            throw Violation(description: "didCancel() twice")
        }
    }

    private func cancelled(_ world: inout World, _ action: Machine.CancelAction) throws {
        switch action {
        case .none: break
        case .deliverCancel: try deliverCancel(&world)
        case .finish: try told(&world)
        case .startHere:
            // A cancel starts an operation handed on: its holder will find it taken.
            world.relayed = false
            try start(
                &world,
                Machine.StartFacts(
                    caller: Machine.Caller(queue: nil, isMainThread: false, foundation: nil), skip: nil, ready: true))
        }
    }

    private func told(_ world: inout World) throws {
        world.told += 1
        if world.told > 1 { throw Violation(description: "the outcome was told twice") }
        if world.machine.decided == nil { throw Violation(description: "told an undecided outcome") }
        world.delivering = true
    }

    // MARK: - Invariants of a world

    func check(_ world: World, after previous: World, event: Event) throws {
        if world.finishedAnnounced > 1 { throw Violation(description: "isFinished announced twice") }
        if world.machine.waits.all != world.liveWaits {
            throw Violation(description: "waits \(world.machine.waits) registered, \(world.liveWaits) live")
        }
        if world.machine.finished != nil && !world.machine.waits.isEmpty {
            throw Violation(description: "a wait outlived the finish")
        }
        if previous.machine.finished != nil && world.machine != previous.machine {
            throw Violation(description: "\(event) changed a finished operation")
        }
        if world.enqueues > 1 { throw Violation(description: "enqueued twice") }
        // A start that came before the dependencies finished neither executes nor decides until it
        // is resumed.
        if world.machine.parking != .none {
            if world.executesEntered > 0 || world.announcing || world.machine.decided != nil {
                throw Violation(description: "a parked start executed or finished before its dependencies")
            }
        }
        // The outcome kept beside the phase agrees with it.
        if (world.machine.decided != nil) != world.machine.isDecided {
            throw Violation(description: "outcome \(String(describing: world.machine.decided)) in phase \(world.machine.phase)")
        }
        if world.machine.early != nil && !(world.machine.isPending || world.machine.phase == .starting) {
            throw Violation(description: "an early finish kept in phase \(world.machine.phase)")
        }
        if case .finishing = world.machine.phase, !world.delivering {
            throw Violation(description: "an outcome is decided but nobody tells it")
        }
        if world.machine.timer != nil, world.machine.decided != nil {
            throw Violation(description: "a timer armed on a decided operation")
        }
        // A timeout that ran out ends the operation timed out, whatever finish follows, and a
        // timed-out operation does not read as cancelled.
        if world.expired, let decided = world.machine.decided, decided != .timedOut {
            throw Violation(description: "a timed-out operation decided \(decided)")
        }
        if world.machine.decided == .timedOut && world.machine.cancelRequested {
            throw Violation(description: "a timed-out operation reads as cancelled")
        }
    }

    /// Liveness: from any world, the echoes in flight, a start by the custodian and one finish by the
    /// subclass reach `finished`.
    func finishes(from world: World) throws -> Bool {
        var world = world
        world.finishes = max(world.finishes, 1)
        world.queueStarts = max(world.queueStarts, 1)
        for _ in 0..<40 {
            if world.machine.finished != nil { return true }
            let event: Event
            if world.delivering {
                event = .outcomeDelivered
            } else if world.announcing {
                event = .startAnnounced(timer: false)
            } else if world.inside != nil {
                event = .executeReturned
            } else if let hop = world.hops.sorted().last {
                event = .hopLanded(hop)
            } else if world.resuming {
                event = .resumedStart
            } else if world.machine.isParked {
                event = .dependenciesFinished
            } else if world.machine.parking == .admitting {
                event = .gateAnswered
            } else if world.machine.isPending {
                if world.relayed {
                    event = .relayStart
                } else if world.machine.custody == .claimed {
                    world.launches = 1
                    event = .launch
                } else {
                    event = .queueStart(skip: nil)
                }
            } else {
                event = .finish(.succeeded)
            }
            world = try apply(event, to: world)
        }
        return world.machine.finished != nil
    }

    // MARK: - The exploration

    func testEveryInterleavingKeepsTheInvariants() throws {
        try explore(from: World(), name: "lifecycle exploration")
    }

    /// A composite's machine: `didCancel()` may run while `execute()` does (it cancels the children
    /// the composite is still launching), and every other invariant holds as for any operation.
    func testEveryInterleavingOfACompositeKeepsTheInvariants() throws {
        var world = World()
        world.machine.cancelsAlongsideExecute = true
        try explore(from: world, name: "composite lifecycle exploration")
    }

    private func explore(from start: World, name: String) throws {
        let depth = ProcessInfo.processInfo.environment["BATON_EXPLORATION_DEPTH"].flatMap(Int.init) ?? 9
        var layer: [World: Double] = [start: 1]
        var traces: [World: [Event]] = [start: []]
        var states = 1
        var transitions = 0
        var paths = 1.0
        var finishedWorlds = 0
        for _ in 0..<depth {
            var nextLayer: [World: Double] = [:]
            var nextTraces: [World: [Event]] = [:]
            for (world, count) in layer {
                let trace = traces[world]!
                for event in enabledEvents(world) {
                    transitions += 1
                    let next: World
                    do {
                        next = try apply(event, to: world)
                        // Determinism: the same state and event give the same state.
                        XCTAssertEqual(try apply(event, to: world), next)
                        try check(next, after: world, event: event)
                    } catch {
                        return XCTFail(
                            "\(error) after \((trace + [event]).map(String.init(describing:)).joined(separator: ", "))")
                    }
                    if nextLayer[next] == nil {
                        nextTraces[next] = trace + [event]
                        do {
                            guard try finishes(from: next) else {
                                return XCTFail("cannot finish after \((trace + [event]).map(String.init(describing:)))")
                            }
                        } catch {
                            return XCTFail("\(error) while finishing after \((trace + [event]).map(String.init(describing:)))")
                        }
                        if next.machine.finished != nil { finishedWorlds += 1 }
                    }
                    nextLayer[next, default: 0] += count
                }
            }
            states += nextLayer.count
            paths = nextLayer.values.reduce(0, +)
            layer = nextLayer
            traces = nextTraces
        }
        print(
            "\(name): depth \(depth), \(states) states, \(transitions) transitions, "
                + "\(String(format: "%.3g", paths)) event orders of length \(depth), \(finishedWorlds) finished states; invariants hold"
        )
        XCTAssertGreaterThan(states, 10_000)
    }

    // MARK: - The adversaries' orders, as fixed traces

    func run(_ events: [Event]) throws -> World {
        var world = World()
        for event in events {
            let next = try apply(event, to: world)
            try check(next, after: world, event: event)
            world = next
        }
        return world
    }

    /// Defect 11: a second start while a skipped operation's outcome is being told finishes nothing.
    func testASecondStartWhileASkipIsToldIsRefused() throws {
        var world = try run([.cancel, .queueStart(skip: nil)])
        XCTAssertEqual(
            world.machine.start(.init(caller: .init(queue: nil, isMainThread: false, foundation: nil), skip: nil, ready: true)),
            .refuse(.startedTwice))
    }

    /// Defect 1: a rerun on its way to another thread is stale once a cancel has decided the outcome.
    func testACancelWhileARerunHopsFinishesCancelledAndTheHopIsStale() throws {
        let world = try run([.queueStart(skip: nil), .startAnnounced(timer: false), .executeReturned, .rerun, .cancel])
        XCTAssertEqual(world.machine.decided, .cancelled)
        XCTAssertEqual(world.executesEntered, 1)
        let token = try XCTUnwrap(world.hops.first)
        let landed = try run([
            .queueStart(skip: nil), .startAnnounced(timer: false), .executeReturned, .rerun, .cancel, .hopLanded(token),
        ])
        XCTAssertEqual(landed.executesEntered, 1, "the body ran again on a cancelled operation")
    }

    /// Defect 12: cancel, then a rerun from outside `execute()`, then the subclass's finish from
    /// `didCancel()`: one outcome, no report of a second finish.
    func testARerunAfterADeliveredCancelIsIgnored() throws {
        var world = try run([.queueStart(skip: nil), .startAnnounced(timer: false), .executeReturned, .cancel, .rerun])
        XCTAssertEqual(world.didCancels, 1)
        XCTAssertNil(world.machine.decided)
        XCTAssertEqual(world.machine.finish(.succeeded, carriesResult: false), .finish(droppedResult: false))
        XCTAssertEqual(world.machine.decided, .cancelled)
    }

    /// Defect 12: the timer's check and its cancellation are one step; a timer that fires after the
    /// outcome was decided does nothing, not even a report.
    func testATimerFiringAfterTheFinishIsStale() throws {
        let world = try run([.queueStart(skip: nil), .startAnnounced(timer: true), .finish(.succeeded)])
        var machine = world.machine
        let token = try XCTUnwrap(world.timers.first)
        XCTAssertEqual(machine.timerFired(token: token, expiry: .timedOut), .none)
    }

    /// Issue #22: a timeout ends the operation with its expiry, not `cancelled`, both when the subclass
    /// finishes from `didCancel()` and when `execute()` was still running as the timer fired.
    func testATimeoutEndsWithItsExpiryNotCancelled() throws {
        let world = try run([.queueStart(skip: nil), .startAnnounced(timer: true), .executeReturned])
        let token = try XCTUnwrap(world.timers.first)
        var idle = world.machine
        XCTAssertEqual(idle.timerFired(token: token, expiry: .timedOut), .timedOut(.deliverCancel))
        XCTAssertTrue(idle.cancelRequested, "the work must see the cancellation")
        XCTAssertEqual(idle.finish(.succeeded, carriesResult: true), .finish(droppedResult: true))
        XCTAssertEqual(idle.decided, .timedOut)
        XCTAssertFalse(idle.cancelRequested)

        let inside = try run([.queueStart(skip: nil), .startAnnounced(timer: true)])
        var machine = inside.machine
        XCTAssertEqual(machine.timerFired(token: try XCTUnwrap(inside.timers.first), expiry: .timedOut), .timedOut(.none))
        XCTAssertEqual(machine.rerun(), .none)
        XCTAssertEqual(machine.executeReturned(generation: try XCTUnwrap(inside.inside)), .finish)
        XCTAssertEqual(machine.decided, .timedOut)
    }

    /// A composite cancelled while its `execute()` launches children is told at once (its children
    /// are cancelled before `cancel()` returns), and not again when `execute()` returns; a second
    /// `cancel()` is told again, so it too returns with the children cancelled. A plain operation's
    /// cancellation waits for `execute()` to return, and a second `cancel()` does nothing.
    func testACompositeIsToldOfACancelWhileItStillExecutesAndOnlyThen() throws {
        var composite = World()
        composite.machine.cancelsAlongsideExecute = true
        for (start, expected) in [(World(), 0), (composite, 1)] {
            var world = start
            for event in [Event.queueStart(skip: nil), .startAnnounced(timer: false), .cancel] {
                let next = try apply(event, to: world)
                try check(next, after: world, event: event)
                world = next
            }
            XCTAssertEqual(world.didCancels, expected)
            world = try apply(.executeReturned, to: world)
            XCTAssertEqual(world.didCancels, 1, "didCancel() is delivered once, when execute() returns at the latest")
            XCTAssertNil(world.machine.decided, "the subclass (the composite, once its children end) finishes")
            world = try apply(.cancel, to: world)
            XCTAssertEqual(world.didCancels, 1 + expected, "a second cancel() is told to a composite only")
        }
    }

    /// Defect 7: a wait that ends early takes its registration with it.
    func testAWaitThatEndsEarlyLeavesNothingRegistered() throws {
        var machine = Machine()
        guard case .registered(let token) = machine.registerWait(selfBlocking: false) else { return XCTFail() }
        XCTAssertTrue(machine.waitEnded(token: token))
        XCTAssertTrue(machine.waits.isEmpty)
        XCTAssertFalse(machine.waitEnded(token: token), "ended twice")
        XCTAssertEqual(machine.registerWait(selfBlocking: true), .refused)
    }
}
