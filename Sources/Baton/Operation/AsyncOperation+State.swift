import Dispatch
import Foundation

extension AsyncOperation {
    /// The operation's lifecycle machine, with Baton's outcome type.
    typealias Life = Lifecycle<SharedOutcome>

    /// One KVO notification, as recorded by the test seam.
    enum Notification: Sendable, Hashable {
        case willChange(String)
        case didChange(String)
    }

    /// Every mutable property of an operation, kept behind its one lock: the lifecycle machine (every
    /// decision), the settings it reads, and the listeners it tells (taken out once, by the
    /// transition that tells them).
    struct State {
        var life = Life()

        // Settings.
        var policy: DependencyPolicy = .skipOnFailureOrCancellation
        var upstreamError: (any Error)?
        var input: (any Sendable)?
        /// Started while a dependency was unfinished: its edges are dropped when it finishes.
        var startedWhileNotReady = false
        /// `addDependency` was called at least once (set before Foundation records the edge, and it
        /// stays set after `removeDependency`). While it is not, and the class lists only what was
        /// added (`listsOnlyAddedDependencies`), `dependencies` is empty, and the reads that would
        /// build it (a lock of Foundation's and a filtered copy, about 300 instructions) are skipped:
        /// a barrier's dependency, the only one Foundation adds without `addDependency`, is left out
        /// of `dependencies` anyway.
        var hasDependencies = false
        /// A dependency's edge may have been recorded after the start decided (added while it executed,
        /// or while it started): the finish removes the edges to unfinished dependencies, as it does for
        /// an operation that started while not ready.
        var dropsLateDependencies = false
        /// The outcome was decided, so the finish has chosen whether to remove edges: an `addDependency`
        /// that completes from now on removes its own edge (Linux Foundation would keep the operation in
        /// that dependency as an unretained pointer after it is freed).
        var dependencyEdgesSealed = false
        /// Counts each `addDependency` call twice, before and after Foundation records the edge: odd
        /// while one is under way. A read of `isReady` begins the gate only when it read an even count
        /// that has not changed by the time the gate decides (see ``AsyncOperation/isReady``).
        var dependencyAdds: UInt32 = 0
        /// The queue a Baton entry point launched it on: a rerun hops to that queue's dispatch queue.
        ///
        /// Held strongly until the operation finishes (the finish's commit takes it out and lets go
        /// of it outside the lock), which is as long as anything reads it: a pending operation's gate
        /// and deadlock check, an executing one's rerun. A weak reference gave the queue a side table,
        /// and from then on every retain and release of the queue, Foundation's own included, took the
        /// runtime's slow path (about 870 instructions per operation of a group, callgrind). Foundation
        /// itself keeps a queue alive while an operation added to it is unfinished; this extends that
        /// to an operation Baton starts outside Foundation (a sequence's step handed on), until it
        /// finishes.
        var launchQueue: OperationQueue?
        /// How the operation records (usually not at all).
        var recorderLink = RecorderLink.none

        // Listeners.
        /// Internal hooks that run after `isFinished` has been announced.
        var finishedHooks = FinishedHooks()
        /// Its conditions and categories, if it has any.
        var gate: OperationGate?
        /// The settings and listeners most operations never have, out of line (see `Extras`).
        private var extras: Extras?

        /// The extras, made on first use.
        private mutating func madeExtras() -> Extras { extras.made(by: Extras.init) }

        var timeout: Duration? {
            get { extras?.timeout }
            set { if newValue != nil || extras != nil { madeExtras().timeout = newValue } }
        }
        /// The timer of the current run's timeout, cancelled when the operation finishes.
        var timeoutTimer: Deadlines.Timer? {
            get { extras?.timeoutTimer }
            set { if newValue != nil || extras != nil { madeExtras().timeoutTimer = newValue } }
        }
        /// Told of each input stored while pending (`observeStoredInputs`); one field, not a protocol
        /// the operation is cast to on every stored input (about 300 instructions, callgrind).
        var inputObserver: (@Sendable (any Sendable) -> Void)? {
            get { extras?.inputObserver }
            set { if newValue != nil || extras != nil { madeExtras().inputObserver = newValue } }
        }
        var delegate: (any AsyncOperationDelegate)? {
            get { extras?.delegate }
            set { if newValue != nil || extras != nil { madeExtras().delegate = newValue } }
        }
        var startObservers: [@Sendable () -> Void] {
            get { extras?.startObservers ?? [] }
            set { if !newValue.isEmpty || extras != nil { madeExtras().startObservers = newValue } }
        }
        var outcomeObservers: [@Sendable (Outcome<(any Sendable)?>) -> Void] {
            get { extras?.outcomeObservers ?? [] }
            set { if !newValue.isEmpty || extras != nil { madeExtras().outcomeObservers = newValue } }
        }
        var notificationTap: (@Sendable (Notification) -> Void)? {
            get { extras?.notificationTap }
            set { if newValue != nil || extras != nil { madeExtras().notificationTap = newValue } }
        }

        /// Registers what a wait runs when the operation finishes, under the machine's wait token.
        mutating func appendWait(_ resume: @escaping @Sendable () -> Void, token: UInt64) {
            madeExtras().waits.append(resume, token: token)
        }

        /// Takes out a registered wait's callback, if it is still there.
        mutating func removeWait(_ token: UInt64) -> (@Sendable () -> Void)? {
            extras?.waits.remove(token)
        }

        /// Whether the out-of-line part was made (for tests: an operation that has none of it must not
        /// pay for it).
        var hasExtras: Bool { extras != nil }

        /// How many waits are registered.
        var waitCount: Int { extras?.waits.count ?? 0 }

        /// Takes out every registered wait's callback, in the order they were registered.
        mutating func takeAllWaits() -> WaitList<@Sendable () -> Void> {
            extras?.waits.takeAll() ?? WaitList()
        }

        /// Adds a listener to the start.
        mutating func appendStartObserver(_ observer: @escaping @Sendable () -> Void) {
            madeExtras().startObservers.append(observer)
        }

        /// Adds a listener to the outcome.
        mutating func appendOutcomeObserver(_ observer: @escaping @Sendable (Outcome<(any Sendable)?>) -> Void) {
            madeExtras().outcomeObservers.append(observer)
        }

        var isCancelled: Bool { life.cancelRequested }

        /// A new operation's state, recording as `recorderLink` says.
        init(recorderLink: RecorderLink) {
            self.recorderLink = recorderLink
        }

        /// Takes out what is told of a decided outcome.
        mutating func takeOutcomeListeners(executed: Bool) -> Telling {
            dependencyEdgesSealed = true
            let telling = Telling(
                outcome: life.decided!, executed: executed,
                dropsUnfinishedDependencies: !executed || startedWhileNotReady || dropsLateDependencies,
                gated: gate != nil,
                delegate: delegate, observers: outcomeObservers, link: recorderLink)
            outcomeObservers = []
            startObservers = []
            return telling
        }
    }

    /// The settings and listeners of an operation that most operations never have: a timeout, a
    /// delegate, observers, waits, the test seam. Kept out of line, made on first use, so that the
    /// state of every other operation is about 100 bytes smaller: each byte of an operation's memory
    /// costs time at 100,000 operations (128 bytes more per operation made 100,000 independent
    /// operations 8% slower, `farm-bench`). Reached only through `State`, under the operation's lock.
    final class Extras: @unchecked Sendable {
        var timeout: Duration?
        var timeoutTimer: Deadlines.Timer?
        var inputObserver: (@Sendable (any Sendable) -> Void)?
        weak var delegate: (any AsyncOperationDelegate)?
        var startObservers: [@Sendable () -> Void] = []
        var outcomeObservers: [@Sendable (Outcome<(any Sendable)?>) -> Void] = []
        /// What each registered wait runs when the operation finishes, by the machine's wait token.
        var waits = WaitList<@Sendable () -> Void>()
        var notificationTap: (@Sendable (Notification) -> Void)?
    }

    /// The internal hooks that run once the operation has finished, in the order they were added. Almost
    /// every operation that has any has one (its composite's, its chain's): it is kept inline, so
    /// neither a list nor a closure to run the list is allocated for it (about 1,000 instructions per
    /// group child, callgrind).
    struct FinishedHooks {
        typealias Hook = @Sendable () -> Void
        private var first: Hook?
        private var more: [Hook] = []

        mutating func append(_ hook: @escaping Hook) {
            if first == nil { first = hook } else { more.append(hook) }
        }

        /// Runs every hook on the trampoline (a hook may finish another operation, which runs its own).
        consuming func run() {
            guard let first else { return }
            if more.isEmpty { return Trampoline.run(first) }
            let more = self.more
            Trampoline.run {
                first()
                for hook in more { hook() }
            }
        }
    }

    /// What a decided outcome must tell, once the lock is released.
    struct Telling {
        let outcome: SharedOutcome
        /// Whether `execute()` was entered: a composite that never executed retires the children it
        /// never launched before it finishes.
        let executed: Bool
        /// Finished without executing (or started early): unfinished dependencies still point here.
        let dropsUnfinishedDependencies: Bool
        /// It has a gate, which gives back what it holds once the outcome is told.
        let gated: Bool
        let delegate: (any AsyncOperationDelegate)?
        let observers: [@Sendable (Outcome<(any Sendable)?>) -> Void]
        /// How the operation recorded when the outcome was decided: its record ends before the
        /// operation reads as finished.
        let link: RecorderLink
    }

    // MARK: - Finishing (callbacks and notifications outside the lock)

    /// Tells a decided outcome (retiring unlaunched children first when the operation never executed),
    /// then commits the finish.
    func tell(_ telling: Telling) {
        if !telling.executed {
            let children = takeUnlaunchedChildren()
            if !children.isEmpty { return retire(children, thenDeliver: telling) }
        }
        deliver(telling)
    }

    /// Retires children the operation never launched; the outcome is delivered once they all finished.
    @inline(never)
    private func retire(_ children: [Operation], thenDeliver telling: Telling) {
        let pending = UncheckedSendable(value: telling)
        let countdown = Countdown(events: children.count) { self.deliver(pending.value) }
        Operation.retire(children, reportingTo: countdown)
        countdown.tick()
    }

    private func deliver(_ telling: Telling) {
        withExtendedLifetime(self) {
            if telling.delegate != nil || !telling.observers.isEmpty {
                Callouts.during(self, holding: telling.gated) {
                    let outcome = telling.outcome.value
                    if let delegate = telling.delegate {
                        switch outcome {
                        case .succeeded(let output): delegate.operation(self, didSucceedWith: output)
                        case .failed(let error): delegate.operation(self, didFailWith: error)
                        case .cancelled: delegate.operationDidCancel(self)
                        }
                    }
                    for observer in telling.observers { observer(outcome) }
                }
            }
            if telling.dropsUnfinishedDependencies { dropUnfinishedDependencies() }
            if telling.gated { releaseGate() }
            // The record ends first: whoever sees the operation finished (by polling `isFinished`, too)
            // finds its record ended.
            let ended = recordsItsFinish ? recordFinish(telling.outcome, resolving: telling.link) : nil
            commitFinish(telling.outcome, recordEnded: ended)
        }
    }

    /// Feeds `outcomeDelivered`: stores `finished`, announces it, runs the finished hooks and resumes
    /// the waits.
    private func commitFinish(_ outcome: SharedOutcome, recordEnded ended: Recording?) {
        struct Commit {
            var action: Life.CommitAction
            var hooks: FinishedHooks
            var waits: WaitList<@Sendable () -> Void>
            var tap: (@Sendable (Notification) -> Void)?
            var link: RecorderLink
            var timer: Deadlines.Timer?
            /// Let go of here, outside the lock: it may be the queue's last reference.
            var launchQueue: OperationQueue?
        }
        let commit: Commit = core.withLock { state in
            let action = state.life.outcomeDelivered()
            defer {
                state.finishedHooks = FinishedHooks()
                state.delegate = nil
                state.timeoutTimer = nil
                state.launchQueue = nil
            }
            return Commit(
                action: action, hooks: state.finishedHooks, waits: state.takeAllWaits(), tap: state.notificationTap,
                link: state.recorderLink, timer: state.timeoutTimer, launchQueue: state.launchQueue)
        }
        commit.timer?.cancel()
        guard case .announce(let wasExecuting) = commit.action else {
            return reportImpossible()
        }
        // A record made since the outcome was decided (a composite adopting the operation meanwhile)
        // ends now.
        if case .recorded(let made) = commit.link, !made.isSame(as: ended), recordsItsFinish {
            made.recorder.finished(made.id, status: FlightRecord.Status(outcome), name: recordedName)
        }
        let tap = commit.tap
        if wasExecuting { announce(.willChange(Self.isExecutingKey), tap) }
        announce(.willChange(Self.isFinishedKey), tap)
        if wasExecuting { announce(.didChange(Self.isExecutingKey), tap) }
        announce(.didChange(Self.isFinishedKey), tap)
        commit.hooks.run()
        for resume in commit.waits { resume() }
    }

    /// Ends the operation's record (made now for one claimed by a recorder at creation), if it has
    /// one; returns it.
    private func recordFinish(_ outcome: SharedOutcome, resolving link: RecorderLink) -> Recording? {
        guard let recording = recording(resolving: link, startingOnQueue: false) else { return nil }
        recording.recorder.finished(recording.id, status: FlightRecord.Status(outcome), name: recordedName)
        return recording
    }

    /// An event the machine says cannot happen in this state: a bug in Baton. Traps in debug builds,
    /// reported in release builds.
    func reportImpossible(_ file: StaticString = #fileID, _ line: UInt = #line) {
        assertionFailure("Baton: an impossible lifecycle transition", file: file, line: line)
        Diagnostics.report(.internalInconsistency, self)
    }

    /// Removes the edges to dependencies that have not finished.
    ///
    /// Linux Foundation keeps a dependent as an unretained pointer in each unfinished dependency and
    /// dereferences it when that dependency finishes. An operation that finishes without executing
    /// (cancelled, skipped) can be freed before then. Removing the edge takes the dependency's own
    /// lock, the one its finish walks its dependents under, so after this call no dependency can
    /// reach this operation. "Unfinished" is Foundation's: a dependency reads `isFinished` before its
    /// finish has walked its dependents, and an edge skipped then was followed after this operation
    /// was freed (the start-race hammer of `LateDependencyTests` crashed in 4 of 10 runs). The edges are
    /// Foundation's own list where Baton can read it: `dependencies` leaves out the pending barriers a
    /// queue made the operation wait for, and an operation its queue started on a stale readiness
    /// without waiting for them (a queue with a width limit: see `start()`) finishes before they do.
    private func dropUnfinishedDependencies() {
        let dependencies = FoundationQueueState.edges(of: self) ?? self.dependencies
        guard !dependencies.isEmpty else { return }
        for dependency in dependencies where !FoundationQueueState.hasWalkedDependents(dependency) {
            removeDependency(dependency)
        }
    }

    /// Sends one KVO notification (and records it when a test installed a tap).
    func announce(_ notification: Notification, _ tap: (@Sendable (Notification) -> Void)?) {
        tap?(notification)
        switch notification {
        case .willChange(let key): willChangeValue(forKey: key)
        case .didChange(let key): didChangeValue(forKey: key)
        }
    }

    // Computed, not `static let`: a lazily initialised global is read through a lock under
    // ThreadSanitizer (Swift's runtime), and these are read on every state change.
    static var isExecutingKey: String { "isExecuting" }
    static var isFinishedKey: String { "isFinished" }

    /// Applies one event to the lifecycle machine under the lock. When `decides` says the action decided
    /// the outcome, the listeners it must tell are taken out in the same step.
    func apply<Action>(_ event: (inout Life) -> Action, decides: (Action) -> Bool) -> (Action, Telling?) {
        core.withLock { state in
            let action = event(&state.life)
            return (action, decides(action) ? state.takeOutcomeListeners(executed: true) : nil)
        }
    }

    /// Feeds `finish`: before `execute()` is entered the outcome is remembered, while executing it
    /// ends the operation (cancellation wins), afterwards it is reported and ignored.
    func requestFinish(_ requested: SharedOutcome, carriesResult: Bool) {
        let (action, telling) = apply({ $0.finish(requested, carriesResult: carriesResult) }) { action in
            if case .finish = action { return true }
            return false
        }
        switch action {
        case .remembered:
            break
        case .report(let kind):
            Diagnostics.report(kind, self)
        case .finish(let droppedResult):
            if droppedResult { Diagnostics.report(.resultAfterCancellation, self) }
            if let telling { tell(telling) }
        }
    }

    /// What `start()` finds when it checks the dependencies, computed outside the lock.
    func dependencyVerdict(_ policy: DependencyPolicy, of dependencies: [Operation]? = nil) -> SharedOutcome? {
        guard policy != .runRegardless else { return nil }
        var sawCancellation = false
        for dependency in dependencies ?? self.dependencies {
            if let baton = dependency as? AsyncOperation {
                guard let finished = baton.sharedOutcome else { continue }
                switch finished.kind {
                case .failed where policy == .skipOnFailureOrCancellation:
                    return .failed(BatonError.dependencyFailed(dependency: baton.reference, underlying: finished.error!))
                case .cancelled:
                    sawCancellation = true
                default:
                    break
                }
            } else if dependency.isCancelled {
                sawCancellation = true
            }
        }
        return sawCancellation ? .cancelled : nil
    }

    /// Registers an internal hook that runs once `isFinished` has been announced (at once if it has).
    func whenFinished(_ hook: @escaping @Sendable () -> Void) {
        let runNow = core.withLock { state -> Bool in
            if state.life.isFinished { return true }
            state.finishedHooks.append(hook)
            return false
        }
        if runNow { hook() }
    }

    /// The outcome including the output as stored (`nil` output for operations without one), once
    /// `isFinished` is announced.
    var storedOutcome: Outcome<(any Sendable)?>? {
        sharedOutcome?.value
    }

    /// The outcome as stored, shared, once `isFinished` is announced.
    var sharedOutcome: SharedOutcome? {
        core.withLock { $0.life.finished }
    }

    /// Test seam: records every KVO notification the operation sends from now on.
    func installNotificationTap(_ tap: @escaping @Sendable (Notification) -> Void) {
        core.withLock { $0.notificationTap = tap }
    }
}
