import Dispatch
import Foundation

/// An asynchronous `Operation` you subclass by overriding one method, ``execute()``, and finishing
/// later from any thread.
///
/// Baton owns `start()`: it finishes the operation without executing it when the operation was
/// cancelled, when `finish` was called before start, or when the ``dependencyPolicy`` says a
/// dependency's outcome rules it out; otherwise it makes the operation executing and calls
/// ``execute()``. Every operation ends in exactly one ``Outcome``.
///
/// ```swift
/// final class Pause: AsyncOperation, @unchecked Sendable {
///     let milliseconds: Int
///     init(milliseconds: Int) { self.milliseconds = milliseconds }
///
///     override func execute() {
///         DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(milliseconds)) { self.finish() }
///     }
/// }
///
/// let pause = Pause(milliseconds: 100)
/// try pause.run(timeout: .seconds(5))
/// print(pause.outcome!)   // succeeded(())
/// ```
///
/// ## Thread safety
/// Operations are `@unchecked Sendable`, and that is true: every mutable property lives in one
/// struct behind one lock, and callbacks and KVO notifications are sent after the lock is released.
/// Subclasses that add mutable state must protect it themselves.
///
/// ## Cancellation
/// `cancel()` never finishes an operation that has not started: `start()` does that, so Linux's
/// `OperationQueue` is never told about a finish it did not start. While executing, cancellation is
/// cooperative: ``didCancel()`` tells the subclass, which then calls `finish()`; the outcome is
/// ``Outcome/cancelled`` whatever `finish` carries.
open class AsyncOperation: Operation, OutcomeReporting, @unchecked Sendable {
    let core: Mutex<State>
    /// A number no other Baton operation of this process has: what tells references apart once
    /// operations are freed and their addresses reused.
    let serialNumber: UInt64

    /// Creates a pending operation.
    public override init() {
        let creation = RecordingRegistry.creation()
        serialNumber = creation.serial
        // Its record is made when it is enqueued or starts: one record, made with its place. How it
        // records is part of the state it is made with (a lock taken after `init` cost about 150
        // instructions per recorded operation, callgrind).
        let link: RecorderLink =
            if let global = creation.global { .claimed(global) } else if creation.looksUpQueue { .queueLookup } else { .none }
        core = Mutex(State(recorderLink: link))
        super.init()
    }

    /// Called from a composite's `init`: a cancellation that arrives while the composite's
    /// `execute()` is still launching children reaches `didCancel()` at once, so every child is
    /// cancelled before `cancel()` returns (see `Lifecycle.cancelsAlongsideExecute`). Only for
    /// composites whose `execute()` and `didCancel()` are Baton's own and safe to run together.
    final func cancelsChildrenAlongsideExecute() {
        core.withLock { $0.life.cancelsAlongsideExecute = true }
    }

    /// Whether a record of this operation is a ``FlightRecord/Kind/composite`` (Baton's composites say
    /// so): a class property, not a protocol conformance, as a cast to a protocol looked the
    /// conformance up on every record (about 450 instructions an operation, callgrind).
    class var recordsAsComposite: Bool { false }
    /// The type a record of this operation shows: a stand-in records as the operation it runs.
    var recordedType: Any.Type { type(of: self) }
    /// Whether this operation's finish ends its record (a chain's stand-in for a Foundation operation
    /// has it ended when that operation finishes).
    var recordsItsFinish: Bool { true }
    /// The name a record of this operation shows.
    var recordedName: String? { name }

    // MARK: - Subclassing

    /// Does the operation's work. Override it, and call `finish` (now or later, from any thread).
    ///
    /// Called once, on the thread that started the operation, after it became executing. Do not call
    /// `super`: the base implementation reports a diagnostic and fails with
    /// ``BatonError/executeNotOverridden(operation:)``.
    open func execute() {
        Diagnostics.report(.executeNotOverridden, self)
        finish(throwing: BatonError.executeNotOverridden(operation: reference))
    }

    /// Tells the subclass that the operation was cancelled while executing.
    ///
    /// Called once, outside Baton's lock, on the thread that called `cancel()`. Stop the work and call
    /// `finish()`; the operation then finishes ``Outcome/cancelled``. The default does nothing.
    open func didCancel() {}

    // MARK: - Finishing

    /// Finishes the operation successfully (or cancelled, if it was cancelled).
    ///
    /// Safe from any thread. Called before the operation started, the request is remembered and the
    /// operation finishes without executing when it starts. Called again, it is ignored and reported
    /// to ``Diagnostics``. A ``ResultOperation`` whose `Output` is not `Void` fails with
    /// ``BatonError/missingOutput(operation:)`` instead: use `finish(with:)`.
    public final func finish() {
        requestFinish(plainFinishOutcome(), carriesResult: false)
    }

    /// Finishes the operation with an error (or cancelled, if it was cancelled).
    ///
    /// - Parameter error: The error the operation failed with.
    public final func finish(throwing error: any Error) {
        requestFinish(.failed(error), carriesResult: true)
    }

    /// Finishes a composite with what its children produced. Cancellation wins, as for `finish`, but a
    /// result that cancellation makes moot is not reported: the composite did nothing wrong.
    func conclude(_ outcome: Outcome<(any Sendable)?>) {
        requestFinish(.of(outcome), carriesResult: false)
    }

    /// The outcome of `finish()` without an output; a typed operation overrides it.
    func plainFinishOutcome() -> SharedOutcome {
        .succeededWithoutOutput
    }

    /// An error that fails the operation at start, read under the lock (argument and input checks).
    /// Overrides call `super` first.
    func preflightFailure(_ state: State) -> (any Error)? {
        if let timeout = state.timeout, timeout < .zero {
            return BatonError.invalidArgument(operation: reference, reason: "timeout must not be negative, got \(timeout)")
        }
        return nil
    }

    /// Called once when the operation finishes without entering ``execute()`` (cancelled, skipped, or
    /// finished before start or during the start announcement): composites return the children they
    /// never launched, which are retired and finish before the operation does.
    func takeUnlaunchedChildren() -> [Operation] { [] }

    /// Gives `value` to the operation as its input: `nil` when it takes it, the mismatch when it takes
    /// another type, ``InputOffer/takesNone`` for an operation without an input (this default). A
    /// method, not a protocol the caller casts to: the conformance check cost a chain step about 300
    /// instructions (callgrind).
    func offerInput(_ value: any Sendable) -> InputOffer {
        .takesNone
    }

    /// An operation that a `cancel()` of this one is passed to instead (chain adapters).
    var cancellationTarget: Operation? {
        nil
    }

    // MARK: - Operation

    /// Starts the operation. Baton's, not the subclass's: override ``execute()`` instead.
    ///
    /// Finishes at once, without executing, when the operation was cancelled, when `finish` was called
    /// before start, or when the ``dependencyPolicy`` rules it out. Otherwise the operation becomes
    /// executing, the start observers run, and ``execute()`` is entered, unless a `cancel()` or a
    /// `finish` arrived in the meantime: then it finishes without entering ``execute()``.
    ///
    /// Started twice, it reports ``Diagnostic/Kind/startedTwice`` and does nothing. Started by hand
    /// while a Baton chain, composite or wait holds it, it reports
    /// ``Diagnostic/Kind/startedWhileClaimed`` and does nothing: Baton starts it. Started by hand while
    /// it waits in a queue you added it to (seen on Linux, where Baton can read Foundation's record), it
    /// reports ``Diagnostic/Kind/startedWhileInQueue`` and does nothing: the queue starts it. Started
    /// before its dependencies finished, it reports ``Diagnostic/Kind/startedWhileNotReady`` and runs.
    ///
    /// Started by its queue while a dependency (a pending barrier's too) has not finished, it waits,
    /// without executing or finishing, until Foundation counts no unfinished dependency (one added
    /// meanwhile included), then starts where the queue would have run it. Linux's queue can start an
    /// operation on a stale cached readiness when `addDependency` races `addOperation`. It keeps the
    /// queue's worker slot meanwhile, so it waits only in a queue without a width limit: in one with a
    /// limit (a serial queue, the main queue), that slot may be the one the dependency, or an operation
    /// ahead of the barrier, needs. There, and while it holds a category, it runs as Foundation would
    /// run it, reporting ``Diagnostic/Kind/startedWhileNotReady``, and its edges to the unfinished
    /// dependencies (the barrier's included) are removed when it finishes.
    public final override func start() {
        begin(resuming: false)
    }

    /// `start()`, or (`resuming`) the start Baton resumes once a start its queue made too early has
    /// seen its dependencies finish (see `Lifecycle.StartAction.park`).
    func begin(resuming: Bool) {
        // Facts gathered before the lock: they read other locks (dependencies, Foundation's, the
        // recorder's). The machine decides on them under the operation's lock, in one step.
        // The count of `addDependency` calls first: one that overlaps the reads below may record its
        // edge after they were made (see `State.dropsLateDependencies`).
        let (policy, link, custody, hasDependencies, adds, gated) = core.withLock {
            (
                $0.policy, $0.recorderLink, $0.life.custody, $0.hasDependencies, $0.dependencyAdds,
                $0.gate.map { !$0.admission.isPassed } ?? false
            )
        }
        // Only the custody of a queue (Baton's, or Foundation's for an unclaimed operation) needs to
        // know who calls: reading it costs on every start.
        var caller = Life.Caller(queue: nil, isMainThread: false, foundation: nil)
        switch resuming ? .direct : custody {
        case .enqueued(let key):
            caller.foundation = FoundationQueueState.of(self)
            if key.onMainThread {
                caller.isMainThread = Thread.isMainThread
            } else {
                // The thread, not only Foundation's record: the record says `starting` from just
                // before the worker's call, so a start by hand racing it would pass as the queue's
                // (17 in 20,000 trials, StartByHandHammerTests). On Linux this read costs two system
                // calls (`OperationQueue.current` first asks whether this is the main thread: `getpid`
                // and `gettid`), about 4% of a group's samples (perf).
                caller.queue = OperationQueue.current.map(ObjectIdentifier.init)
            }
        case .unclaimed:
            caller.foundation = FoundationQueueState.of(self)
        case .claimed, .direct, .handedOn:
            break
        }
        let dependencies = hasDependencies || !Self.listsOnlyAddedDependencies ? self.dependencies : []
        let verdict = dependencyVerdict(policy, of: dependencies)
        let ready = isReady
        // Started by its queue while Foundation still counts an unfinished dependency (a stale cached
        // readiness): it waits for them, in a queue without a width limit (read only when `isReady`
        // said no, so never on the usual path). Waiting keeps the worker slot the queue took for it,
        // and in a queue with a limit that slot may be the one the dependency (or the operations ahead
        // of a pending barrier) needs: there it runs now, as Foundation's own start would, and its
        // edges, the barrier's included, are removed when it finishes.
        let byQueue = resuming || caller.foundation == .starting
        let unfinished =
            !ready && byQueue && !super.isReady && FoundationQueueState.queue(of: self)?.hasNoWidthLimit == true
        // Started by its queue before its gate opened: on the queue's dispatch queue, if it has one
        // (where a grant that comes later starts it again), and holding one of the queue's workers
        // unless the queue has no width limit and its start returns that dispatch queue to other work
        // while it waits (see `OperationGate.claimsAtStart`).
        // A queue without a width limit and without a dispatch queue of its own runs its operations on
        // the global queues: a grant that comes later starts it there, marked as that queue's.
        var (startsOn, holdsWorker) = ((dispatch: DispatchQueue, queue: ObjectIdentifier)?.none, byQueue)
        if gated, byQueue, let queue = FoundationQueueState.queue(of: self) {
            let unlimited = queue.hasNoWidthLimit
            if let own = queue.ownDispatchQueue {
                startsOn = (own, ObjectIdentifier(queue))
            } else if unlimited {
                startsOn = (DispatchQueue.global(qos: qualityOfService.dispatchClass), ObjectIdentifier(queue))
            }
            holdsWorker = !unlimited
        }

        enum Decision {
            case refuse(Diagnostic.Kind)
            case finish(Telling)
            case announce(Announcement)
            case admit(Admission.Action)
            case park
        }
        var returned: [(UInt64, Gatekeeper.Waiter)] = []
        let decision: Decision = core.withLock { state in
            let skip = verdict ?? preflightFailure(state).map { SharedOutcome.failed($0) }
            var facts = Life.StartFacts(caller: caller, skip: skip, ready: ready)
            facts.admitted = state.gate?.admission.isPassed ?? true
            // Only while it holds no category: waiting, it would hold one while a dependency that may
            // need it runs. Then it runs now, as Foundation's start would, and its edges to unfinished
            // dependencies are removed when it finishes. A start its queue made that was granted its
            // categories while a dependency was added gives them back first, and waits for it.
            facts.dependenciesUnfinished = unfinished && (state.gate?.held.isEmpty ?? true)
            if unfinished, resuming, let gate = state.gate, !gate.held.isEmpty, state.life.isPending {
                let lanes = gate.lanes
                if gate.admission.returnForDependencies() {
                    returned = Gatekeeper.giveBack(lanes, by: self)
                    facts.dependenciesUnfinished = true
                    facts.admitted = false
                }
            }
            facts.resumesPark = resuming
            facts.byQueue = byQueue
            switch state.life.start(facts) {
            case .refuse(let kind):
                return .refuse(kind)
            case .park:
                return .park
            case .admit:
                // Not past its gate (started by hand, or by a queue that did not ask `isReady`): the
                // gate starts it again once it opens.
                // Started by its queue (now, or in a start put off until its dependencies finished),
                // it holds one of the queue's workers while it waits.
                state.gate!.startsOn = startsOn
                return .admit(beginByStart(state.gate!, holdsWorker: holdsWorker))
            case .finishUnexecuted:
                return .finish(state.takeOutcomeListeners(executed: false))
            case .announce(let notReady):
                state.startedWhileNotReady = notReady
                if state.dependencyAdds != adds { state.dropsLateDependencies = true }
                defer { state.startObservers = [] }
                return .announce(
                    Announcement(
                        delegate: state.delegate, observers: state.startObservers, tap: state.notificationTap,
                        notReady: notReady, holds: !(state.gate?.held.isEmpty ?? true)))
            }
        }

        if !returned.isEmpty { Gatekeeper.wake(returned) }
        switch decision {
        case .refuse(let kind):
            Diagnostics.report(kind, self)
        case .park:
            // The last dependency may have finished before the park was recorded, its `isReady` read
            // finding nothing parked: read the count again now that it is.
            if super.isReady { resumeParkedStart() } else { watchParkedQueueWidth() }
        case .admit(let action):
            // Passed at once (granted, or refused): it goes on here, on the thread its queue started it on.
            if perform(action, startsHere: true) { startAfterGate(on: nil) }
        case .finish(let telling):
            tell(telling)
        case .announce(let announcement):
            if let recording = recording(resolving: link, startingOnQueue: true) {
                recording.recorder.started(
                    recording.id, dependencies: recordedDependencies(dependencies, in: recording.recorder))
            }
            if announcement.notReady { Diagnostics.report(.startedWhileNotReady, self) }
            announce(.willChange(Self.isExecutingKey), announcement.tap)
            announce(.didChange(Self.isExecutingKey), announcement.tap)
            if announcement.delegate != nil || !announcement.observers.isEmpty {
                Callouts.during(self, holding: announcement.holds) {
                    announcement.delegate?.operationDidStart(self)
                    for observer in announcement.observers { observer() }
                }
            }
            // Started by a queue Baton launched it on: the steps handed on meanwhile start here once it
            // returns (see `Relay`).
            if case .enqueued(let key) = custody, !key.onMainThread, !resuming {
                Relay.working(for: key.queue) { enterExecute() }
            } else {
                enterExecute()
            }
        }
    }

    /// Resumes a parked start (see `Lifecycle.StartAction.park`) once Foundation counts no unfinished
    /// dependency, if no other caller has: one lock step decides. It runs off this thread (Foundation
    /// reads `isReady` from inside its own notifications, sometimes under a lock of its own), where
    /// the queue would have run it: its `underlyingQueue`, the main queue's thread, or a global queue.
    private func resumeParkedStart() {
        guard core.withLock({ $0.life.resumePark() }) else { return }
        sendResumedStart()
    }

    /// A parked start keeps its queue's worker slot, which is safe only while the queue has no width
    /// limit, and Foundation tells nobody when a limit is set: a limit set now, at or below the number
    /// of parked starts, would leave the pending barrier (or the dependency) they wait for no slot, for
    /// good (an independent review hung a queue so). So while it is parked the start looks every
    /// 100 ms, and once its queue has a limit it is resumed: the resumed start runs it then, as it
    /// runs a start in a queue with a limit. Parks are rare and short; the look costs a timer.
    private func watchParkedQueueWidth() {
        Deadlines.after(.milliseconds(100)) { [weak self] in
            guard let self else { return }
            // The queue is read while the start is parked, under the lock: a parked start neither
            // executes nor finishes, so Foundation holds the queue (retained) until it is resumed.
            let queue: OperationQueue? = self.core.withLock { state in
                state.life.isParked ? FoundationQueueState.queue(of: self) : nil
            }
            guard let queue else { return }
            if queue.hasNoWidthLimit { self.watchParkedQueueWidth() } else { self.resumeParkedStart() }
        }
    }

    /// Sends the start that `resumePark` decided on to where the queue would have run it.
    private func sendResumedStart() {
        // The main queue's `underlyingQueue` is `DispatchQueue.main`.
        let target =
            FoundationQueueState.queue(of: self)?.underlyingQueue ?? DispatchQueue.global(qos: qualityOfService.dispatchClass)
        target.async { self.begin(resuming: true) }
    }

    /// What a decided start announces once the lock is released.
    private struct Announcement {
        let delegate: (any AsyncOperationDelegate)?
        let observers: [@Sendable () -> Void]
        let tap: (@Sendable (Notification) -> Void)?
        let notReady: Bool
        /// It holds categories: its observers run marked as inside it (see `Callouts.during`).
        let holds: Bool
    }

    /// Feeds `startAnnounced`: enters ``execute()``, or finishes without it when a `cancel()` or a
    /// `finish` arrived while the start was being announced.
    private func enterExecute() {
        enum Entry {
            case none
            case execute(generation: UInt64, timer: (token: UInt64, after: Duration)?, holds: Bool)
            case finish(Telling)
        }
        let entry: Entry = core.withLock { state in
            let timeout = state.timeout.flatMap { $0.deadlineFromNow == .distantFuture ? nil : $0 }
            switch state.life.startAnnounced(armsTimer: timeout != nil) {
            case .none:
                return .none
            case .finish:
                return .finish(state.takeOutcomeListeners(executed: false))
            case .execute(let generation, let token):
                return .execute(
                    generation: generation, timer: token.flatMap { token in timeout.map { (token, $0) } },
                    holds: !(state.gate?.held.isEmpty ?? true))
            }
        }
        switch entry {
        case .none:
            reportImpossible()
        case .finish(let telling):
            tell(telling)
        case .execute(let generation, let timer, let holds):
            if let timer { arm(timer.token, after: timer.after) }
            if holds {
                Callouts.executing(self) { callExecute(generation) }
            } else {
                callExecute(generation)
            }
        }
    }

    /// Calls ``execute()`` (the machine is inside this generation), then feeds `executeReturned`: a
    /// cancellation that arrived meanwhile is delivered now (``didCancel()`` never runs concurrently
    /// with ``execute()``), a rerun hops to another thread.
    private func callExecute(_ generation: UInt64) {
        execute()
        let (action, telling) = apply({ $0.executeReturned(generation: generation) }) { $0 == .finish }
        switch action {
        case .none: break
        case .deliverCancel: Trampoline.run { self.didCancel() }
        case .hop(let token): hop(token)
        case .finish: if let telling { tell(telling) }
        }
    }

    /// Sends a rerun to another thread: the dispatch queue of the queue the operation runs on (the main
    /// queue's runs on the main thread), or a global one. It enters ``execute()`` only if `token` is
    /// still current when it lands.
    private func hop(_ token: UInt64) {
        let target =
            core.withLock { $0.launchQueue }?.underlyingQueue ?? DispatchQueue.global(qos: qualityOfService.dispatchClass)
        target.async { self.hopLanded(token) }
    }

    private func hopLanded(_ token: UInt64) {
        let action = core.withLock { $0.life.hopLanded(token: token) }
        if case .execute(let generation) = action { callExecute(generation) }
    }

    /// Baton operations do their work in ``execute()``; `main()` is not used.
    public final override func main() {}

    /// Blocks the calling thread until the operation has finished (Foundation's wait, with no timeout;
    /// ``ResultOperation/wait(timeout:)`` is bounded and refuses a wait that would wait for itself).
    ///
    /// A sequence's step that has finished and is still inside its `execute()` holds the next step,
    /// which its thread starts once `execute()` returns: this wait gives that step to the sequence's
    /// queue first, so that waiting here for the sequence (or for anything after that step) does not
    /// wait for itself.
    open override func waitUntilFinished() {
        Relay.release()
        super.waitUntilFinished()
    }

    /// Cancels the operation.
    ///
    /// Pending, it finishes cancelled when started, without executing. It is started when its
    /// dependencies have finished, as any operation: Baton does not pass the cancellation on to
    /// Foundation, which would start it at once and let it be freed while a dependency it cannot see
    /// (a queue's barrier) still points to it. Starting, it finishes cancelled without entering
    /// ``execute()``. Executing, ``didCancel()`` tells the subclass, which then finishes; if
    /// ``execute()`` is still running on the thread that started the operation, ``didCancel()`` is
    /// called when it returns (the two never overlap). Baton's own composites are the exception: their
    /// children are cancelled before this returns, even while the composite is launching them.
    /// Finished, or with its outcome already decided, it does nothing.
    public final override func cancel() {
        if let target = cancellationTarget {
            target.cancelHeld()
            return
        }
        let (action, telling, gate) = core.withLock { state in
            let action = state.life.cancel()
            let gate = state.gate?.admission.cancel() ?? .none
            return (action, action == .finish ? state.takeOutcomeListeners(executed: true) : nil, gate)
        }
        if gate != .none { perform(gate) }
        perform(action, telling)
    }

    /// Calls ``didCancel()`` outside ``execute()`` (it returned before the cancellation arrived): marked
    /// as inside the operation while it holds categories, as ``execute()`` is, so that a blocking wait
    /// there for an operation that needs one of them is refused rather than waiting for itself.
    private func deliverDidCancel() {
        if core.withLock({ !($0.gate?.held.isEmpty ?? true) }) {
            Callouts.executing(self) { didCancel() }
        } else {
            didCancel()
        }
    }

    private func perform(_ action: Life.CancelAction, _ telling: Telling?) {
        switch action {
        case .none: break
        case .deliverCancel: Trampoline.run { self.deliverDidCancel() }
        case .finish: if let telling { tell(telling) }
        // Handed on and not started: it ends here, cancelled, instead of when the thread holding it gets
        // to it (a sequence's cancel or timeout would otherwise wait for that thread).
        case .startHere: Trampoline.run { self.start() }
        }
    }

    /// Whether the operation was cancelled (or skipped because a dependency was cancelled).
    public final override var isCancelled: Bool {
        core.withLock { $0.isCancelled }
    }

    /// Makes the operation depend on `operation`, as Foundation does. Added while the operation's gate
    /// (its conditions and categories) is under way, or passed but the operation has not started, it
    /// also makes the gate begin again once `operation` has finished: an operation never holds its
    /// categories while one of its dependencies runs. An override must call `super`.
    ///
    /// Added once the operation has started, the dependency changes nothing for this run, and the edge
    /// to it is removed when the operation finishes, or at once if it has finished already, while
    /// `operation` has not finished: Linux Foundation keeps the dependent in `operation` as an
    /// unretained pointer and follows it when `operation` finishes, after this one may have been freed.
    open override func addDependency(_ operation: Operation) {
        // Set before Foundation records the edge: a start in between must not skip reading it (see
        // `State.hasDependencies`; a review started one there and it ran past a cancelled dependency).
        // Counted before and after Foundation records the edge (odd while it does): a read of `isReady`
        // that may have read Foundation's count before the edge does not begin the gate on it (see
        // `isReady`).
        core.withLock { state in
            state.hasDependencies = true
            state.dependencyAdds &+= 1
        }
        super.addDependency(operation)
        // Read after Foundation recorded the edge: an edge to an unfinished dependency of an operation
        // its queue has dispatched is late. (A start the queue made too early, waiting for its
        // dependencies, waits for this one too: it goes on when Foundation counts none unfinished.)
        let late = FoundationQueueState.isDispatched(self) == true && !FoundationQueueState.hasWalkedDependents(operation)
        // One lock step decides who removes a late edge: the finish, if its outcome is not decided yet
        // (it reads the dependencies after this), or this call, if it is.
        let removesItsOwnEdge: Bool = core.withLock { state in
            state.dependencyAdds &+= 1
            if state.dependencyEdgesSealed { return true }
            if !state.life.isPending || late { state.dropsLateDependencies = true }
            return false
        }
        if removesItsOwnEdge {
            removeOwnLateEdge(to: operation)
            return
        }
        gateNoteDependency(operation)
    }

    /// Takes away the edge a late `addDependency` recorded (see `addDependency`). Foundation records an
    /// edge in two lock steps, listing `operation` in `dependencies`, then this operation among
    /// `operation`'s dependents; a finish that removed its unfinished dependencies in between removed
    /// the listing alone, and Foundation's `removeDependency` removes nothing it does not list. So the
    /// dependency is listed again first (a no-op while it still is): the removal then takes both away.
    /// Nothing to take away once `operation`'s finish has walked its dependents.
    private func removeOwnLateEdge(to operation: Operation) {
        guard !FoundationQueueState.hasWalkedDependents(operation) else { return }
        super.addDependency(operation)
        removeDependency(operation)
    }

    /// `true` for a class whose `dependencies` are exactly those added with `addDependency` (Baton's
    /// final classes, which no subclass can change): until one is added, Baton skips reading them
    /// (see `State.hasDependencies`). A subclass may list more by overriding `dependencies`, and a
    /// failed one still rules it out, so open classes answer `false`.
    class var listsOnlyAddedDependencies: Bool { false }

    /// Whether the operation may be started: its dependencies have finished and it has passed its gate
    /// (its conditions and categories; see ``addCondition(_:)`` and
    /// ``addExclusivity(_:)-(OperationCategory...)``).
    ///
    /// A queue that asks about an operation it holds, once the dependencies have finished, begins the
    /// passage; the operation announces `isReady` when the gate opens (or refuses, for an operation
    /// that will finish unexecuted). Until then it takes no worker of the queue. An override must
    /// combine its own answer with `super`'s.
    open override var isReady: Bool {
        // The facts the gate begins on are read in the order that makes them hold together. First the
        // count of `addDependency` calls, then whether the queue has finished adding the operation,
        // then Foundation's count of unfinished dependencies. Linux's queue adds a dependency on each
        // pending barrier before it marks the operation enqueued, so a read that sees it enqueued, then
        // no unfinished dependency, has seen the barriers. `addDependency` counts before and after
        // Foundation records the edge, so a read that began while it did (odd), or that a call
        // overlapped (changed by the time the gate decides), does not begin the gate; the call reads
        // the readiness again once it is done (see `gateNoteDependency`). Read the other way round, a
        // count of zero read before the barriers were added began the gate of an operation that waited
        // for a barrier: it held its categories while the barrier waited for operations that waited for
        // them (a hang in 1 of about 4,600 trials of `QueueControlsLaunchHammerTests` under
        // ThreadSanitizer, and once in CI).
        let (read, parked) = core.withLock { ($0.gate != nil ? $0.dependencyAdds : nil, $0.life.isParked) }
        if parked { return parkedReadiness() }
        guard let dependencies = read else { return super.isReady }
        let enqueued = FoundationQueueState.isEnqueued(self)
        guard super.isReady else { return false }
        return gateAllowsStart(enqueued: enqueued, dependencies: dependencies)
    }

    /// `isReady` of an operation whose queue started it too early (see `Lifecycle.StartAction.park`):
    /// Foundation reads it when the count of unfinished dependencies reaches zero (the last one
    /// finishing, or removed), and that read resumes the start.
    private func parkedReadiness() -> Bool {
        guard super.isReady else { return false }
        resumeParkedStart()
        return true
    }

    /// Whether the operation is executing: started and not yet finished.
    public final override var isExecuting: Bool {
        core.withLock { $0.life.isExecuting }
    }

    /// Whether the operation has finished, with its outcome decided.
    public final override var isFinished: Bool {
        core.withLock { $0.life.isFinished }
    }

    /// Always `true`: Baton operations finish when `finish` is called, not when `execute()` returns.
    public final override var isAsynchronous: Bool {
        true
    }

    /// A block Foundation runs once the operation has finished; Baton clears it after it has run.
    ///
    /// Linux Foundation never clears a completion block (Apple platforms do), so a block that
    /// captures its operation would keep it alive forever. Baton runs the block through a wrapper
    /// that holds the operation weakly and drops the block once it has run, as on Apple platforms.
    public final override var completionBlock: (@Sendable () -> Void)? {
        get { super.completionBlock }
        set {
            guard let block = newValue else {
                super.completionBlock = nil
                return
            }
            super.completionBlock = { [weak self] in
                block()
                self?.clearCompletionBlock()
            }
        }
    }

    private func clearCompletionBlock() {
        super.completionBlock = nil
    }

    // MARK: - Outcome

    /// The longest the operation may execute, or `nil` (the default) for no limit.
    ///
    /// ```swift
    /// download.timeout = .seconds(30)
    /// ```
    ///
    /// When it runs out while the operation is still executing, Baton reports
    /// ``Diagnostic/Kind/timedOut`` and cancels the operation: ``isCancelled`` becomes `true` and
    /// ``didCancel()`` is called, as for any cancellation, so the work stops the same way. However it
    /// then finishes, it fails with ``BatonError/timedOut(operation:after:)`` (a timeout is not a
    /// user's cancellation: dependents, chains and retries see a failure), and ``isCancelled`` reads
    /// `false` once it has finished. Set it before the operation starts: a value set later
    /// is ignored and reported (``Diagnostic/Kind/settingAfterStart``). `.zero` cancels the operation
    /// as soon as it executes; a negative duration fails the operation at start with
    /// ``BatonError/invalidArgument(operation:reason:)``, without executing.
    public final var timeout: Duration? {
        get { core.withLock { $0.timeout } }
        set { configure { $0.timeout = newValue } }
    }

    /// Applies a setting that only a pending operation takes; later, it is ignored and reported.
    private func configure(_ apply: (inout State) -> Void) {
        let accepted = core.withLock { state -> Bool in
            guard state.life.isPending else { return false }
            apply(&state)
            return true
        }
        if !accepted { Diagnostics.report(.settingAfterStart, self) }
    }

    /// Arms the timer of `token`: when it fires, the machine decides in one step whether the operation
    /// is still executing and cancels it; a stale token does nothing.
    /// The timer is kept in the state until the finish takes it and cancels it (a timeout that does
    /// not fire leaves nothing pending), or a rerun's timer replaces it.
    private func arm(_ token: UInt64, after duration: Duration) {
        let timer = Deadlines.after(duration) { [weak self] in
            guard let self else { return }
            let expiry = SharedOutcome.failed(BatonError.timedOut(operation: self.reference, after: duration))
            let (action, telling) = self.apply({ $0.timerFired(token: token, expiry: expiry) }) {
                $0 == .timedOut(.finish)
            }
            guard case .timedOut(let cancellation) = action else { return }
            Diagnostics.report(.timedOut, self)
            self.perform(cancellation, telling)
        }
        let replaced: Deadlines.Timer? = core.withLock { state in
            // Finished meanwhile: the finish took no timer, so this one goes at once.
            guard !state.life.isFinished else { return timer }
            defer { state.timeoutTimer = timer }
            return state.timeoutTimer
        }
        replaced?.cancel()
    }

    /// What `start()` does when a dependency did not succeed. Default:
    /// ``DependencyPolicy/skipOnFailureOrCancellation``. Set it before the operation starts: a value
    /// set later is ignored and reported (``Diagnostic/Kind/settingAfterStart``).
    public final var dependencyPolicy: DependencyPolicy {
        get { core.withLock { $0.policy } }
        set { configure { $0.policy = newValue } }
    }

    /// The error of the operation before this one in a chain, when this one runs regardless of it.
    ///
    /// A chain adapter sets it when the upstream operation failed and this operation's policy is
    /// ``DependencyPolicy/runRegardless``; otherwise this operation fails with that error unexecuted.
    public final var upstreamError: (any Error)? {
        core.withLock { $0.upstreamError }
    }

    func setUpstreamError(_ error: any Error) {
        core.withLock { $0.upstreamError = error }
    }

    // MARK: - Observers

    /// The delegate told about start, success, failure and cancellation; held weakly.
    public final var delegate: (any AsyncOperationDelegate)? {
        get { core.withLock { $0.delegate } }
        set { core.withLock { $0.delegate = newValue } }
    }

    /// Adds a closure called when the operation starts executing, just before ``execute()``.
    ///
    /// Closures are released when the operation finishes. A closure added after start is never called.
    ///
    /// - Parameter observer: The closure; it must not capture the operation strongly if the operation
    ///   is meant to be freed before it starts.
    public final func onStart(_ observer: @escaping @Sendable () -> Void) {
        core.withLock { state in
            if state.life.isPending { state.appendStartObserver(observer) }
        }
    }

    func addOutcomeObserver(_ observer: @escaping @Sendable (Outcome<(any Sendable)?>) -> Void) {
        let decided: SharedOutcome? = core.withLock { state in
            if let outcome = state.life.decided { return outcome }
            state.appendOutcomeObserver(observer)
            return nil
        }
        if let decided { observer(decided.value) }
    }

    // MARK: - Reruns

    /// Feeds `rerun`: ``execute()`` runs again after the current call returns, or now on another
    /// thread, if the operation is still executing, undecided and not cancelled.
    func reexecute() {
        let action = core.withLock { $0.life.rerun() }
        if case .hop(let token) = action { hop(token) }
    }
}

extension QualityOfService {
    /// The dispatch class of the same quality of service.
    var dispatchClass: DispatchQoS.QoSClass {
        switch self {
        case .userInteractive: return .userInteractive
        case .userInitiated: return .userInitiated
        case .utility: return .utility
        case .background: return .background
        default: return .default
        }
    }
}
