/// What the lifecycle needs to know of an outcome: how to make a cancelled one, and whether one is.
protocol LifecycleOutcome {
    /// The outcome of a cancelled operation.
    static var cancelled: Self { get }
    /// Whether this outcome is the cancelled one.
    var isCancelled: Bool { get }
}

extension Outcome: LifecycleOutcome {}

/// The life of one operation as a pure state machine: every decision about it (start, cancel,
/// finish, rerun, `execute()` returning, a hop or a timer landing, a wait, custody) is an event
/// applied here, under the operation's lock, and returns what the operation must do once the lock is
/// released.
///
/// No closures, no Foundation, no clocks: the same state and event always give the same state and
/// action, so `LifecycleExplorationTests` can enumerate every order of events and check the
/// invariants on each. `AsyncOperation` is the shell: it locks, calls one of these methods, unlocks,
/// and performs the action. Anything that comes back later (an `execute()` call returning, a rerun's
/// hop to another thread, a timer) carries the generation or token it was decided with, and a stale
/// one is ignored, so no decision is ever acted on after the state moved on.
///
/// Docs/Lifecycle.md is this type's transition table.
struct Lifecycle<Result: LifecycleOutcome> {
    /// Where the operation is in its life. The payloads are plain values: the outcome is kept beside
    /// the phase (`early`, `decided`), because a phase that carried it copied the output out on every
    /// check of the phase (measured: 13% more instructions per chained operation).
    enum Phase: Hashable {
        /// Not started. A `finish` that arrived already is kept in `early`.
        case pending
        /// `start()` decided to execute; `isExecuting` is being announced and the start observers run.
        case starting
        /// After the start announcement, until the outcome is decided.
        case executing(Call)
        /// The outcome (`decided`) is decided and being told; `isFinished` is not announced yet.
        case finishing(wasExecuting: Bool)
        /// `isFinished` is announced (or being announced).
        case finished
    }

    /// Whether a thread is inside `execute()`.
    enum Call: Hashable {
        /// No thread is inside `execute()`.
        case idle
        /// A thread is inside the `execute()` call of this generation; a cancellation (`cancelOwed`)
        /// or a rerun (`rerunOwed`) that arrived meanwhile is delivered when it returns.
        case inside(generation: UInt64, cancelOwed: Bool, rerunOwed: Bool)
        /// A rerun is on its way to another thread; it enters `execute()` only if this token is still
        /// current when it lands.
        case hopping(token: UInt64)
    }

    /// The queue an operation was handed to by a Baton entry point.
    struct QueueKey: Hashable {
        var queue: ObjectIdentifier
        /// The queue runs its operations on the main thread, where `OperationQueue.current` is always
        /// the main queue: its own start is recognised by the thread (and, where Baton can read it, by
        /// Foundation's record).
        var onMainThread: Bool
    }

    /// Who may hand the operation to a queue, and who may start it.
    enum Custody: Hashable {
        /// No Baton entry point has it; anyone may start it.
        case unclaimed
        /// A Baton entry point has it and will launch it; nobody else may start it.
        case claimed
        /// In this queue: only the queue may start it.
        case enqueued(QueueKey)
        /// Baton starts it itself, on the launching thread.
        case direct
        /// Handed on (a sequence's next step: see `Relay`): the thread that holds it starts it once its
        /// current start returns, unless a cancellation starts it first (see `cancel()`).
        case handedOn
    }

    /// Who a `start()` came from.
    struct Caller: Hashable {
        /// `OperationQueue.current` on that thread (read only for an operation in a queue's custody).
        var queue: ObjectIdentifier?
        /// Whether the caller runs on the main thread (read only for a main-thread queue's custody).
        var isMainThread: Bool
        /// Foundation's own record of the operation in a queue, where Baton can read it (Linux): a
        /// queue's start finds `.starting`; a start by hand of an operation waiting in a queue finds
        /// `.waiting`.
        var foundation: FoundationQueueState?
    }

    /// What `start()` found before it took the lock.
    struct StartFacts {
        var caller: Caller
        /// The outcome the operation ends with unexecuted: a dependency ruled it out, or an argument
        /// or input check failed.
        var skip: Result?
        /// Whether every dependency had finished.
        var ready: Bool
        /// Whether the operation's gate (its conditions and categories) is passed, or has none. An
        /// operation that will execute waits here, pending, until it is.
        var admitted = true
        /// The caller is the queue (or the resumption of its parked start), and Foundation still counts
        /// an unfinished dependency: Linux's queue started the operation on a stale readiness (see
        /// `StartAction.park`).
        var dependenciesUnfinished = false
        /// The start that resumes a parked one, once its dependencies have finished (`resumePark`),
        /// or once its gate has answered (`resumeAdmission`).
        var resumesPark = false
        /// The caller is the operation's queue (or the resumption of a start it made): a start held
        /// back by the gate is parked (`Parking.admitting`), so that nobody else may start it meanwhile.
        var byQueue = false
    }

    /// Where a queue's start that came too early stands (see `StartAction.park`).
    enum Parking: Hashable {
        /// No start is put off.
        case none
        /// Its queue started it while a dependency was unfinished; it waits for that dependency.
        case parked
        /// Its queue started it before its gate opened, and the start returned: it waits for the gate,
        /// whose answer resumes the start (`resumeAdmission`).
        case admitting
        /// Its dependencies have finished, or its gate has answered: the start is on its way back
        /// (`resumesPark`).
        case resuming
    }

    private(set) var phase = Phase.pending
    /// A `finish` that arrived before `execute()` was entered (pending or starting only).
    private(set) var early: Result?
    /// The outcome, once decided (finishing or finished only).
    private(set) var decided: Result?
    private(set) var custody = Custody.unclaimed
    private(set) var parking = Parking.none
    /// A `cancel()` arrived (or the outcome is `cancelled`).
    private(set) var cancelRequested = false
    /// The token of the armed timeout, if any.
    private(set) var timer: UInt64?
    /// The outcome the timeout decided on when it ran out (a failure): the cancellation it caused ends
    /// the operation with it instead of `cancelled`.
    private(set) var expiry: Result?
    /// The waits registered and not yet resumed or released.
    private(set) var waits = Tokens()
    private var nextToken: UInt64 = 0
    /// `didCancel()` may run while `execute()` does: set for Baton's composites, whose `execute()`
    /// launches children and whose `didCancel()` cancels them, both under the composite's own lock.
    /// A cancellation that arrives while the composite is still launching then reaches every child
    /// before `cancel()` returns, instead of when `execute()` returns (by then a child launched
    /// meanwhile may have entered its own `execute()`). Every later `cancel()` while it executes
    /// delivers `didCancel()` again (it is idempotent): a caller whose `cancel()` finds another
    /// cancellation still on its way (a timeout's) returns with the children cancelled too. A
    /// subclass's code never runs this way: each composite's `execute()` and `didCancel()` are
    /// Baton's and cannot be overridden.
    var cancelsAlongsideExecute = false

    // MARK: - Reading

    /// The outcome once `isFinished` is announced.
    var finished: Result? {
        isFinished ? decided : nil
    }

    var isPending: Bool {
        if case .pending = phase { return true }
        return false
    }

    /// Whether the outcome is decided (finishing or finished). Reads no payload: Foundation asks
    /// `isFinished` often, and copying the outcome out would retain its output each time.
    var isDecided: Bool {
        switch phase {
        case .finishing, .finished: return true
        case .pending, .starting, .executing: return false
        }
    }

    /// Whether `isFinished` is announced (without copying the outcome).
    var isFinished: Bool {
        if case .finished = phase { return true }
        return false
    }

    /// `isExecuting` as Foundation sees it: from the start announcement until `isFinished`.
    var isExecuting: Bool {
        switch phase {
        case .starting, .executing: return true
        case .finishing(let wasExecuting): return wasExecuting
        case .pending, .finished: return false
        }
    }

    private mutating func mint() -> UInt64 {
        nextToken &+= 1
        return nextToken
    }

    /// Decides the outcome: the timer is disarmed, a cancelled outcome makes the operation cancelled.
    /// After the timeout ran out, the cancellation it caused is decided as its expiry (a failure), and
    /// the operation no longer reads as cancelled.
    private mutating func decide(_ result: Result, wasExecuting: Bool) {
        phase = .finishing(wasExecuting: wasExecuting)
        early = nil
        timer = nil
        if result.isCancelled, let expiry {
            decided = expiry
            cancelRequested = false
        } else {
            decided = result
            if result.isCancelled { cancelRequested = true }
        }
        expiry = nil
    }

    // MARK: - Start

    enum StartAction: Equatable {
        /// Ignored and reported: started twice, or by someone other than the custodian.
        case refuse(Diagnostic.Kind)
        /// Ends unexecuted with the decided outcome: tell it, then feed `outcomeDelivered`.
        case finishUnexecuted
        /// Announce `isExecuting`, tell the start listeners, then feed `startAnnounced`.
        case announce(notReady: Bool)
        /// Still pending: pass the gate first, then start again.
        case admit
        /// Still pending: its queue started it while Foundation still counted an unfinished dependency
        /// (Linux's queue caches readiness in two steps, a read and a store, so a read made before a
        /// barrier's or a dependency's edge can be stored after it, and the queue starts the operation
        /// on it). It neither executes nor finishes until its dependencies have finished (those added
        /// meanwhile too), and keeps the queue's worker slot meanwhile (Foundation frees a slot only
        /// when the operation finishes): the shell resumes the start (`resumePark`) when Foundation's
        /// count reaches zero, which Foundation tells it by reading `isReady`. The shell parks only in
        /// a queue without a width limit, where the slot it keeps cannot be one that a dependency needs.
        case park
    }

    mutating func start(_ facts: StartFacts) -> StartAction {
        guard case .pending = phase else { return .refuse(.startedTwice) }
        if facts.resumesPark {
            guard parking == .resuming else { return .refuse(.startedTwice) }
            parking = .none
        } else if parking != .none {
            // Its queue has started it, and it waits for its dependencies: nobody else may start it.
            return .refuse(.startedWhileInQueue)
        } else if let refusal = refusal(of: facts.caller) {
            return .refuse(refusal)
        }
        if facts.dependenciesUnfinished {
            parking = .parked
            return .park
        }
        if let skipped = cancelRequested ? .cancelled : early ?? facts.skip {
            decide(skipped, wasExecuting: false)
            return .finishUnexecuted
        }
        guard facts.admitted else {
            // The caller was entitled to start it; the gate starts it again once it opens. A start by
            // its queue is parked meanwhile (nobody else may start it, and the gate's answer resumes
            // it where the queue would run it); one by hand is made again, from whichever thread opens it.
            if facts.byQueue { parking = .admitting } else { custody = .direct }
            return .admit
        }
        phase = .starting
        return .announce(notReady: !facts.ready)
    }

    /// Why `caller` may not start the operation, by its custody; `nil` when it may.
    private func refusal(of caller: Caller) -> Diagnostic.Kind? {
        switch custody {
        case .direct:
            return nil
        case .handedOn:
            // Only the thread that holds it starts it, after taking it (`takeHandedOn`).
            return .startedWhileClaimed
        case .unclaimed:
            // Added to a queue with Foundation's own `addOperation`: only that queue may start it.
            return caller.foundation == .waiting ? .startedWhileInQueue : nil
        case .claimed:
            return .startedWhileClaimed
        case .enqueued(let key):
            // The queue's own start runs on that queue (and, where Baton can read it, Foundation
            // marked the operation starting): a start from another operation of the queue is not it.
            let byQueue = key.onMainThread ? caller.isMainThread : caller.queue == key.queue
            return byQueue && caller.foundation != .waiting ? nil : .startedWhileClaimed
        }
    }

    /// Whether a queue's start is parked, waiting for the dependencies (see `StartAction.park`).
    var isParked: Bool { parking == .parked }

    /// The gate of a start its queue made has answered (see `Parking.admitting`): `true` once, for the
    /// caller that then starts it again with `resumesPark`; `false` for a start by hand (made again
    /// as it was) or when it is no longer pending.
    mutating func resumeAdmission() -> Bool {
        guard parking == .admitting, case .pending = phase else { return false }
        parking = .resuming
        return true
    }

    /// A parked start's dependencies have finished: `true` once, for the caller that then starts it
    /// again with `resumesPark`.
    mutating func resumePark() -> Bool {
        guard parking == .parked, case .pending = phase else { return false }
        parking = .resuming
        return true
    }

    enum EnterAction: Equatable {
        case none
        /// Call `execute()` with this generation (then feed `executeReturned`); arm the timer with
        /// this token if there is one.
        case execute(generation: UInt64, timer: UInt64?)
        /// A `cancel()` or `finish` arrived during the announcement: the outcome is decided.
        case finish
    }

    /// The start announcement is done (`isExecuting`, delegate, start observers).
    mutating func startAnnounced(armsTimer: Bool) -> EnterAction {
        guard case .starting = phase else { return .none }
        if let result = cancelRequested ? .cancelled : early {
            decide(result, wasExecuting: true)
            return .finish
        }
        let generation = mint()
        phase = .executing(.inside(generation: generation, cancelOwed: false, rerunOwed: false))
        if armsTimer { timer = mint() }
        return .execute(generation: generation, timer: timer)
    }

    // MARK: - Execute and reruns

    enum ReturnAction: Equatable {
        case none
        /// A cancellation arrived while `execute()` ran: call `didCancel()`.
        case deliverCancel
        /// A rerun was requested: hop to another thread with this token, then feed `hopLanded`.
        case hop(token: UInt64)
        /// A rerun and a cancellation both arrived: the outcome is `cancelled`.
        case finish
    }

    /// The `execute()` call of `generation` returned.
    mutating func executeReturned(generation: UInt64) -> ReturnAction {
        guard case .executing(.inside(generation, let cancelOwed, let rerunOwed)) = phase else { return .none }
        if rerunOwed && cancelRequested {
            decide(.cancelled, wasExecuting: true)
            return .finish
        }
        if rerunOwed {
            let token = mint()
            phase = .executing(.hopping(token: token))
            return .hop(token: token)
        }
        phase = .executing(.idle)
        return cancelOwed ? .deliverCancel : .none
    }

    enum HopAction: Equatable {
        case none
        case execute(generation: UInt64)
    }

    /// A rerun's hop landed on its thread.
    mutating func hopLanded(token: UInt64) -> HopAction {
        guard case .executing(.hopping(token)) = phase else { return .none }
        let generation = mint()
        phase = .executing(.inside(generation: generation, cancelOwed: false, rerunOwed: false))
        return .execute(generation: generation)
    }

    enum RerunAction: Equatable {
        case none
        case hop(token: UInt64)
    }

    /// `execute()` is asked to run again: after the current call returns (where a cancellation that
    /// arrived by then finishes the operation cancelled instead), or now on another thread. Ignored when
    /// not executing, decided, or cancelled outside `execute()`: `didCancel()` was delivered, and the
    /// subclass finishes from there.
    mutating func rerun() -> RerunAction {
        guard case .executing(let call) = phase else { return .none }
        switch call {
        case .inside(let generation, let cancelOwed, _):
            phase = .executing(.inside(generation: generation, cancelOwed: cancelOwed, rerunOwed: true))
            return .none
        case .idle where !cancelRequested:
            let token = mint()
            phase = .executing(.hopping(token: token))
            return .hop(token: token)
        case .idle, .hopping:
            return .none
        }
    }

    // MARK: - Cancel and finish

    enum CancelAction: Equatable {
        case none
        /// Call `didCancel()`.
        case deliverCancel
        /// The outcome is decided `cancelled` (a rerun was on its way): tell it.
        case finish
        /// Handed on and not started yet: start it here, where it finishes cancelled; the thread that
        /// holds it will find it taken.
        case startHere
    }

    mutating func cancel() -> CancelAction {
        guard !isDecided else { return .none }
        if cancelRequested {
            // A composite's cancellation may still be on its way to the children on another thread
            // (a timeout's, or another caller's): this caller cancels them too, so that every
            // `cancel()` returns with the children cancelled. A composite's `didCancel()` only
            // cancels what is not cancelled yet, so a second delivery changes nothing else.
            guard cancelsAlongsideExecute, case .executing = phase else { return .none }
            return .deliverCancel
        }
        cancelRequested = true
        if custody == .handedOn, case .pending = phase {
            custody = .direct
            return .startHere
        }
        guard case .executing(let call) = phase else { return .none }
        switch call {
        case .idle:
            return .deliverCancel
        case .inside where cancelsAlongsideExecute:
            // A rerun owed (composites never rerun) still ends it cancelled when `execute()` returns.
            return .deliverCancel
        case .inside(let generation, _, let rerunOwed):
            phase = .executing(.inside(generation: generation, cancelOwed: true, rerunOwed: rerunOwed))
            return .none
        case .hopping:
            decide(.cancelled, wasExecuting: true)
            return .finish
        }
    }

    enum FinishAction: Equatable {
        /// Kept until the operation starts.
        case remembered
        case report(Diagnostic.Kind)
        /// The outcome is decided: tell it (reporting a dropped result first if `droppedResult`).
        case finish(droppedResult: Bool)
    }

    /// `finish` with `result`; `carriesResult` when it brings an output or an error that a
    /// cancellation would drop.
    mutating func finish(_ result: Result, carriesResult: Bool) -> FinishAction {
        switch phase {
        case .pending, .starting:
            if cancelRequested { return .report(.finishedAfterCancellation) }
            if early != nil { return .report(.finishedTwice) }
            early = result
            return .remembered
        case .executing:
            let dropped = cancelRequested && carriesResult
            decide(cancelRequested ? .cancelled : result, wasExecuting: true)
            return .finish(droppedResult: dropped)
        case .finishing, .finished:
            return .report(.finishedTwice)
        }
    }

    enum TimerAction: Equatable {
        case none
        /// Report `timedOut`, then perform the cancellation's action.
        case timedOut(CancelAction)
    }

    /// The timer of `token` fired: the operation is cancelled, and will end with `expiry` (a failure)
    /// however it winds down. The check and the cancellation are one step.
    mutating func timerFired(token: UInt64, expiry: Result) -> TimerAction {
        guard timer == token, case .executing = phase, !cancelRequested else { return .none }
        timer = nil
        self.expiry = expiry
        return .timedOut(cancel())
    }

    enum CommitAction: Equatable {
        case none
        /// Announce `isFinished` (and `isExecuting` when `wasExecuting`), then run the finished
        /// hooks and resume every wait.
        case announce(wasExecuting: Bool)
    }

    /// The decided outcome has been told (delegate, observers, unlaunched children retired).
    mutating func outcomeDelivered() -> CommitAction {
        guard case .finishing(let wasExecuting) = phase else { return .none }
        phase = .finished
        waits = Tokens()
        return .announce(wasExecuting: wasExecuting)
    }

    // MARK: - Waits

    enum WaitRegistration: Equatable {
        /// Resumed when the operation finishes, unless released first with `waitEnded`.
        case registered(token: UInt64)
        /// Already finished: read the outcome.
        case finished
        /// The waiting thread is the one that must finish the operation.
        case refused
    }

    /// A wait begins. `selfBlocking`: the waiting thread is inside this operation's own start or
    /// outcome callouts, which must return before it can finish.
    mutating func registerWait(selfBlocking: Bool) -> WaitRegistration {
        if isFinished { return .finished }
        if selfBlocking { return .refused }
        let token = mint()
        waits.insert(token)
        return .registered(token: token)
    }

    /// A wait ended early (timed out, or its task was cancelled). `true` when it was still
    /// registered: the shell releases what it held for it.
    mutating func waitEnded(token: UInt64) -> Bool {
        waits.remove(token)
    }

    /// A set of tokens that holds one without allocating: an operation rarely has more than one wait.
    struct Tokens: Hashable {
        private var single: UInt64?
        private var others: Set<UInt64> = []

        var all: Set<UInt64> { others.union(single.map { [$0] } ?? []) }
        var isEmpty: Bool { single == nil && others.isEmpty }

        mutating func insert(_ token: UInt64) {
            if single == nil { single = token } else { others.insert(token) }
        }

        /// `true` when `token` was in the set.
        mutating func remove(_ token: UInt64) -> Bool {
            if single == token {
                single = nil
                return true
            }
            return others.remove(token) != nil
        }
    }

    // MARK: - Custody

    enum Refusal: Equatable {
        case finished, executing, taken
    }

    /// A Baton entry point takes the operation; `nil` when it may.
    mutating func claim() -> Refusal? {
        switch phase {
        case .finished, .finishing: return .finished
        case .starting, .executing: return .executing
        case .pending:
            // A parked start: its queue has it.
            guard custody == .unclaimed, parking == .none else { return .taken }
            custody = .claimed
            return nil
        }
    }

    /// A claim that was never used is given back.
    mutating func unclaim() {
        if custody == .claimed { custody = .unclaimed }
    }

    enum LaunchAction: Equatable {
        case none
        /// Add it to the queue, which alone may start it now.
        case enqueue
        /// Cancelled or finished early: start it here, never through a queue.
        case startHere
    }

    /// The claimant hands the operation to a queue.
    mutating func launch(on key: QueueKey) -> LaunchAction {
        guard case .pending = phase, custody == .claimed else { return .none }
        if cancelRequested || early != nil {
            custody = .direct
            return .startHere
        }
        custody = .enqueued(key)
        return .enqueue
    }

    /// The claimant starts it itself, on the thread that launched it (a sequence's next step, handed
    /// on: see `Relay`), from its own custody or from a queue's that has not been given it yet;
    /// `false` when it does not have it to launch.
    mutating func launchHere(insteadOf key: QueueKey?) -> Bool {
        guard case .pending = phase, parking == .none else { return false }
        switch (custody, key) {
        case (.claimed, nil): break
        case (.enqueued(let enqueued), let key?) where enqueued == key: break
        default: return false
        }
        custody = .handedOn
        return true
    }

    /// The thread that holds an operation handed on takes it to start: `false` when a cancellation
    /// started it already.
    mutating func takeHandedOn() -> Bool {
        guard case .pending = phase, custody == .handedOn else { return false }
        custody = .direct
        return true
    }

    /// An operation handed on goes to `key`'s queue after all (its thread blocks, or a dependency was
    /// added): only that queue may start it now. `false` when it is no longer pending.
    mutating func enqueueInstead(on key: QueueKey) -> Bool {
        guard case .pending = phase, custody == .handedOn else { return false }
        custody = .enqueued(key)
        return true
    }

    /// The claimant will never launch it: it is cancelled and Baton starts it here, so that it ends
    /// without executing.
    mutating func retire() -> LaunchAction {
        guard custody == .claimed || custody == .unclaimed, isPending else { return .none }
        // A parked start ends unexecuted when it is resumed, once its dependencies have finished.
        guard parking == .none else {
            cancelRequested = true
            return .none
        }
        custody = .direct
        cancelRequested = true
        return .startHere
    }
}

extension Lifecycle: Equatable where Result: Equatable {}
extension Lifecycle: Hashable where Result: Hashable {}
