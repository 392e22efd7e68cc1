/// An operation's passage through its gate (its conditions, then its categories) as a pure state
/// machine, applied under the operation's lock beside its ``Lifecycle``. Every answer that comes back
/// later (a condition's, a grant) carries the token it was asked with, and a stale one is ignored, so
/// a cancellation that lands between a decision and its effect always wins cleanly.
///
/// ```text
/// closed ──begin──▶ evaluating ──satisfied──▶ waiting ──granted──▶ open ──finish──▶ released
///    │                  │ failed / not satisfied   │ cancel                  (lanes given back)
///    └──cancel──▶ refused ◀──────────────────────────┘   (withdrawn; a grant that raced is given back)
/// ```
///
/// An operation that cannot start when its grant arrives (a dependency added since the gate began)
/// declines it, and a dependency added once the gate is open (before the operation starts) revokes
/// it: either way the gate goes back to `closed`, holding nothing, and begins anew when the
/// operation's queue next considers it, with its categories only (its conditions answered already).
/// An open gate whose operation its queue has not started also goes back to `closed` when it
/// yields to an operation that holds a worker of its queue while it waits (see ``holdsWorker``).
struct Admission: Hashable {
    enum Stage: Hashable {
        /// Not begun: the operation waits for its dependencies, or for a queue to consider it.
        case closed
        /// Conditions are being evaluated; their answer carries this token.
        case evaluating(UInt64)
        /// Asked for its categories; the grant carries this token.
        case waiting(UInt64)
        /// Passed: it holds its categories and may execute.
        case open
        /// Will not execute (cancelled, or a condition decided so); holds nothing.
        case refused
        /// Finished: whatever it held is given back.
        case released
    }

    /// How the operation goes on once the gate opens or refuses.
    enum Path: Hashable {
        /// It waits in a queue that reads `isReady`: announce the change.
        case announce
        /// A Baton entry point holds it back from its queue: add it now.
        case launch
        /// `start()` was called: call it again.
        case start
    }

    enum Action: Hashable {
        case none
        /// Evaluate the conditions, answering with this token.
        case evaluate(UInt64)
        /// Ask for the categories, with this token.
        case request(UInt64)
        /// Go on along the path.
        case proceed(Path)
        /// Stop the evaluation, then go on along the path.
        case abandon(then: Path)
        /// Take the request back, then go on along the path (a grant that beat it is given back).
        case withdraw(UInt64, then: Path)
        /// A grant arrived for a request that was cancelled: give the categories back.
        case giveBack
        /// The operation could not start when its categories were granted (or were about to be asked
        /// for): nothing is held, the gate is closed again and begins anew when the operation's queue
        /// next considers it. Along `path`: `launch` adds it to its queue, unready; `announce` tells
        /// its queue its readiness changed.
        case reopen(Path)
        /// A dependency that has not finished was added after the gate opened, before the operation
        /// started: give back what it holds. The gate is closed again and begins anew when the
        /// operation's queue next considers it (as that dependency finishes).
        case revoke
        /// The request of this token was made before the operation's queue started it: it now holds a
        /// worker of that queue while it waits, so it goes first in its lines (see ``holdsWorker``).
        case putFirst(UInt64)
    }

    private(set) var stage = Stage.closed
    private(set) var path = Path.announce
    /// A dependency was added while the gate was in progress: whatever the answer, the operation may
    /// not be able to start, so the next grant (or request) closes the gate again instead.
    private(set) var mustLookAgain = false
    /// The conditions answered `satisfied`: a gate begun anew (after a decline or a revoke) asks for
    /// the categories at once. A condition is evaluated at most once per operation.
    private var conditionsPassed = false
    /// Its queue started it before the gate opened (Linux's queue can, from a readiness it cached
    /// before a dependency was added): it holds one of the queue's workers, which Foundation counts as
    /// executing until it finishes, while it waits. Its request goes first in every line, and a
    /// holder that has not started yet gives its categories back to it (``yield()``): otherwise that
    /// holder could wait for the very worker this operation keeps while it waits for the holder.
    private(set) var holdsWorker = false
    private var nextToken: UInt64 = 0

    /// Whether `start()` may go on: the gate is passed, or will not be (the operation ends unexecuted).
    var isPassed: Bool {
        switch stage {
        case .open, .refused, .released: return true
        case .closed, .evaluating, .waiting: return false
        }
    }

    var isClosed: Bool { stage == .closed }

    private mutating func mint() -> UInt64 {
        nextToken &+= 1
        return nextToken
    }

    /// The operation is ready but for its gate, and goes on along `path`. `settled`: it will not
    /// execute anyway (cancelled, finished early, ruled out by a dependency), so the gate refuses at once.
    mutating func begin(_ path: Path, settled: Bool, hasConditions: Bool) -> Action {
        switch stage {
        case .closed:
            self.path = path
            mustLookAgain = false
            if settled {
                stage = .refused
                return .proceed(path)
            }
            let token = mint()
            let evaluates = hasConditions && !conditionsPassed
            stage = evaluates ? .evaluating(token) : .waiting(token)
            return evaluates ? .evaluate(token) : .request(token)
        case .evaluating, .waiting:
            // A start by hand while the gate is in progress: the start goes on once it opens.
            if path == .start { self.path = .start }
            return .none
        case .open, .refused, .released:
            return .none
        }
    }

    /// `start()` was called before the gate opened: as `begin(.start, …)`. `holdsWorker`: the
    /// operation's own queue called it (see ``holdsWorker``); a request already made then goes first,
    /// and one still to be made (after the conditions) will.
    mutating func beginByStart(hasConditions: Bool, holdsWorker: Bool) -> Action {
        guard holdsWorker, !self.holdsWorker else { return begin(.start, settled: false, hasConditions: hasConditions) }
        switch stage {
        case .closed, .evaluating:
            self.holdsWorker = true
            return begin(.start, settled: false, hasConditions: hasConditions)
        case .waiting(let token):
            self.holdsWorker = true
            path = .start
            return .putFirst(token)
        case .open, .refused, .released:
            return .none
        }
    }

    /// The conditions answered. `satisfied == false`: the lifecycle was told the outcome in the same step.
    mutating func answered(_ token: UInt64, satisfied: Bool) -> Action {
        guard stage == .evaluating(token) else { return .none }
        guard satisfied else {
            stage = .refused
            return .proceed(path)
        }
        conditionsPassed = true
        let next = mint()
        stage = .waiting(next)
        return .request(next)
    }

    /// The request of `token` will not be asked (it would deadlock): the lifecycle was told the
    /// failure in the same step.
    mutating func refuse(_ token: UInt64) -> Action {
        guard stage == .waiting(token) else { return .none }
        stage = .refused
        return .proceed(path)
    }

    /// The request of `token` was granted (or is about to be made) while the operation cannot start: a
    /// dependency added while it waited has not finished. Holding its categories there would keep them from every other claimant (and from
    /// that dependency, if it claims one of them) for as long as it cannot start, so it gives them back
    /// and the gate closes again: claims are taken when the operation is about to execute. Started by
    /// hand, it goes on as granted (its `start()` was called).
    mutating func declined(_ token: UInt64) -> Action {
        guard stage == .waiting(token) else { return .giveBack }
        guard path != .start else { return granted(token) }
        stage = .closed
        mustLookAgain = false
        return .reopen(path)
    }

    /// The categories were granted to the request of `token`. Declined instead when a dependency was
    /// added since the gate began.
    mutating func granted(_ token: UInt64) -> Action {
        guard stage == .waiting(token) else { return .giveBack }
        if mustLookAgain && path != .start { return declined(token) }
        stage = .open
        return .proceed(path)
    }

    /// A dependency that has not finished was added to the operation, which has not started (the
    /// caller checks that under the same lock). While the gate is in progress, its answer is declined
    /// when it comes; once open, the operation gives back what it holds at once: holding categories
    /// while a dependency runs could keep that dependency from them for good. Started by hand, it goes
    /// on regardless (its `start()` was called). `dispatched`: its queue has already taken a worker
    /// for it (the dependency came too late for the queue, as it would for any operation), so it goes
    /// on too: given back, it would ask again from that worker, which the holder it waits for may need.
    mutating func dependencyAdded(dispatched: Bool = false) -> Action {
        guard path != .start, !(dispatched && stage == .open) else { return .none }
        switch stage {
        case .evaluating, .waiting:
            mustLookAgain = true
            return .none
        case .open:
            stage = .closed
            return .revoke
        case .closed, .refused, .released:
            return .none
        }
    }

    /// An operation that holds a worker of its queue waits for a category this one holds (see
    /// ``holdsWorker``), and this one has not started (the caller checks that under the same lock).
    /// `dispatched`: its queue has taken a worker for it (it is about to start, and will execute).
    ///
    /// `true`: the gate was open and the operation is in no queue's hands yet (not yet added to its
    /// queue, being added, or waiting there for a worker), so it gives back what it holds, and the
    /// gate is closed again and begins anew when its queue next considers it. Should its queue start
    /// it all the same (from a readiness it cached), it asks again as a holder of a worker. A grant
    /// still on its way (the table counts it as a holder, the gate still waits) is declined when it
    /// arrives, as after a dependency added meanwhile. A start by hand, or by its queue, keeps what it
    /// holds: it is about to execute.
    mutating func yield(dispatched: Bool) -> Bool {
        guard path != .start else { return false }
        switch stage {
        case .open:
            guard !dispatched else { return false }
            stage = .closed
            mustLookAgain = false
            return true
        case .waiting:
            mustLookAgain = true
            return false
        case .closed, .evaluating, .refused, .released:
            return false
        }
    }

    /// A start its queue made, resumed once granted, finds a dependency that has not finished (one
    /// added while it waited): it gives back what it holds and the gate closes, to begin anew (asking
    /// for the categories only) once that dependency has finished. `true` when the gate was open.
    mutating func returnForDependencies() -> Bool {
        guard stage == .open else { return false }
        stage = .closed
        mustLookAgain = false
        return true
    }

    /// The operation was cancelled.
    mutating func cancel() -> Action {
        switch stage {
        case .closed:
            stage = .refused
            return .none
        case .evaluating:
            stage = .refused
            return .abandon(then: path)
        case .waiting(let token):
            stage = .refused
            return .withdraw(token, then: path)
        case .open, .refused, .released:
            return .none
        }
    }

    enum Release: Hashable {
        case none
        /// Give back the categories it held.
        case lanes
        /// It finished while still asking (it never executed): take the request back.
        case withdraw(UInt64)
        /// It finished while its conditions were evaluated: stop them.
        case abandon
    }

    /// The operation finished: whatever the gate holds or has under way is given back.
    mutating func finish() -> Release {
        defer { stage = .released }
        switch stage {
        case .open: return .lanes
        case .waiting(let token): return .withdraw(token)
        case .evaluating: return .abandon
        case .closed, .refused, .released: return .none
        }
    }
}
