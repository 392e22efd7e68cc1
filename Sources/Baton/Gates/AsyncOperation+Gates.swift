import Dispatch
import Foundation

/// An operation's conditions and categories, and its passage through them. Allocated only for an
/// operation that has some; read and written only under the operation's lock.
///
/// Its properties are read and written only under that lock, never across a call that could reach
/// them again, so no two accesses overlap by construction: they are not checked at run time
/// (`@exclusivity(unchecked)`; the checks were about 110 instructions per access, about ten accesses
/// per claim, callgrind). ThreadSanitizer still sees every access.
final class OperationGate {
    @exclusivity(unchecked) var conditions: [Condition] = []
    @exclusivity(unchecked) var categories: [OperationCategory] = []
    @exclusivity(unchecked) var admission = Admission()
    /// The lanes it asked for: what it waits for while it waits, and holds while open.
    @exclusivity(unchecked) var lanes: [Lane] = []
    /// The lanes it holds: its lanes while the gate is open, none before or after.
    var held: [Lane] { admission.stage == .open ? lanes : [] }
    @exclusivity(unchecked) var evaluation: Evaluation?
    /// The queue a Baton entry point holds it back from until the gate opens.
    @exclusivity(unchecked) var launchTarget: OperationQueue?
    /// Whether the queue that holds it has no width limit: looked at once, the first time the queue
    /// reads `isReady` with the operation in its list. `nil`: not looked at yet. In such a queue the
    /// categories are claimed at the start (see ``AsyncOperation/gateAllowsStart(enqueued:dependencies:)``).
    @exclusivity(unchecked) var claimsAtStart: Bool?
    /// The dispatch queue its queue's start ran on, and that queue, when the gate was begun there: a
    /// grant that comes later starts the operation there again, not on the granting thread.
    @exclusivity(unchecked) var startsOn: (dispatch: DispatchQueue, queue: ObjectIdentifier)?
    /// When it began waiting for its conditions, and for its categories, in `DispatchTime` nanoseconds,
    /// until the wait is recorded; 0 when it is not waiting (categories granted at once: no wait).
    /// Plain integers: a `ContinuousClock.Instant` is resilient, so every copy of an optional one went
    /// through the runtime's value witnesses (about 1,000 instructions per grant, callgrind).
    @exclusivity(unchecked) var conditionsSince: UInt64 = 0
    @exclusivity(unchecked) var categoriesSince: UInt64 = 0
    /// The announcements of `isReady` under way, by thread: the first read each makes is its own (its
    /// thread stores the answer and walks the queue next), and does not announce again.
    @exclusivity(unchecked) var announcers = Announcers()
    /// The timer that reports a wait for a category longer than its scope's threshold: cancelled when
    /// the operation finishes, so a long threshold keeps nothing alive after it.
    @exclusivity(unchecked) var slowWaitWatch: Deadlines.Timer?
}

/// The threads announcing an operation's `isReady` now, and whether each has read it yet: the first is
/// kept inline (two announcements of one operation at once are rare), so an announcement allocates
/// nothing.
struct Announcers {
    /// How many announcements are under way (one load to see that none is: every read checks).
    private var count = 0
    private var first: (thread: UInt, read: Bool)?
    private var others: [(thread: UInt, read: Bool)] = []

    var isEmpty: Bool { count == 0 }

    mutating func begin(_ thread: UInt) {
        count += 1
        if first == nil { first = (thread, false) } else { others.append((thread, false)) }
    }

    /// The announcement on `thread` ended (the latest one made there).
    mutating func end(_ thread: UInt) {
        if let index = others.lastIndex(where: { $0.thread == thread }) {
            others.remove(at: index)
        } else if first?.thread == thread {
            first = others.isEmpty ? nil : others.removeFirst()
        } else {
            return
        }
        count -= 1
    }

    /// A read of `isReady` on `thread`: `true` when it is the first read of the latest announcement
    /// made on that thread (Linux's queue reads once as it is told, then stores the answer and walks).
    mutating func isOwnRead(on thread: UInt) -> Bool {
        if let index = others.lastIndex(where: { $0.thread == thread }) {
            defer { others[index].read = true }
            return !others[index].read
        }
        guard let entry = first, entry.thread == thread else { return false }
        first = (thread, true)
        return !entry.read
    }

    /// The calling thread, as a number.
    static var currentThread: UInt {
        #if canImport(Darwin)
        UInt(bitPattern: pthread_self())
        #else
        UInt(pthread_self())
        #endif
    }
}

// Both getters are `mutating`: they are only read under the lock, on the state in place. A plain
// getter was handed a copy of the whole struct (about 700 instructions per read, callgrind, twice per
// claim: a regression of 5d97f7b, when `State` held weak references, which made it address-only).
extension AsyncOperation.State {
    /// The queue the operation is launched on: the one a Baton entry point holds it back from until its
    /// gate opens, or the one it launched it on.
    var targetQueue: OperationQueue? {
        mutating get { gate?.launchTarget ?? launchQueue }
    }

    /// That queue when it is a composite's: its owner lends its categories, and waits for this child.
    var compositeQueue: ChildQueue? {
        mutating get { targetQueue as? ChildQueue }
    }
}

extension AsyncOperation {
    // MARK: - Declaring

    /// Adds a condition the operation must pass after its dependencies have finished and before it
    /// executes (see ``Condition``).
    ///
    /// - Parameter condition: The condition.
    /// - Throws: ``BatonError/invalidArgument(operation:reason:)`` when the operation has started (or
    ///   its gate is already being passed), when `condition` was added to it already, or when its
    ///   timeout is zero or less.
    public func addCondition(_ condition: Condition) throws(BatonError) {
        try configureGate { gate throws(BatonError) in
            guard condition.timeout > .zero else {
                throw .invalidArgument(
                    operation: reference,
                    reason: "condition '\(condition.name)' has a timeout of \(condition.timeout): it must be above zero")
            }
            if gate.conditions.contains(where: { $0 === condition }) {
                throw .invalidArgument(operation: reference, reason: "condition '\(condition.name)' was added twice")
            }
            gate.conditions.append(condition)
        }
    }

    /// Claims categories: the operation executes only while it holds all of them, and they are taken
    /// all at once, just before it executes (after its dependencies and conditions), and given back
    /// when it finishes, however it finishes.
    ///
    /// ```swift
    /// try writer.addExclusivity("database")
    /// ```
    ///
    /// - Parameter categories: The categories.
    /// - Throws: ``BatonError/invalidArgument(operation:reason:)`` when a category's name is empty, a
    ///   category is claimed twice, or the operation has started (or its gate is already being passed).
    public func addExclusivity(_ categories: OperationCategory...) throws(BatonError) {
        try addExclusivity(categories)
    }

    /// Claims categories (see ``addExclusivity(_:)-(OperationCategory...)``).
    ///
    /// - Parameter categories: The categories.
    /// - Throws: ``BatonError/invalidArgument(operation:reason:)`` as the variadic form.
    public func addExclusivity(_ categories: [OperationCategory]) throws(BatonError) {
        try configureGate { gate throws(BatonError) in
            // An operation usually claims a few categories: a duplicate is looked for in the lists, and in
            // a set only when there are many.
            let existing = gate.categories
            var seen: Set<OperationCategory>? = existing.count + categories.count > 16 ? Set(existing) : nil
            for (index, category) in categories.enumerated() {
                guard !category.name.isEmpty else {
                    throw .invalidArgument(operation: reference, reason: "a category's name must not be empty")
                }
                let duplicate =
                    seen != nil
                    ? !seen!.insert(category).inserted
                    : existing.contains(category) || categories[..<index].contains(category)
                guard !duplicate else {
                    throw .invalidArgument(operation: reference, reason: "claims category \(category) twice")
                }
            }
            // A first claim keeps the caller's list (the variadic form's): one array allocated and freed
            // per claim instead of two.
            gate.categories = existing.isEmpty ? categories : existing + categories
        }
    }

    /// Replaces the category `old` (when the operation claims it) by `new` (when given and not claimed
    /// already), as one change, while the operation is pending: for a claim that follows from an
    /// input which a chain may replace (a request's host). `package`: BatonNetwork's operations.
    ///
    /// - Throws: ``BatonError/invalidArgument(operation:reason:)`` when the operation has started (or
    ///   its gate is being passed), or `new`'s name is empty.
    package func replaceClaim(_ old: OperationCategory?, with new: OperationCategory?) throws(BatonError) {
        try configureGate { gate throws(BatonError) in
            if let new, new.name.isEmpty {
                throw .invalidArgument(operation: reference, reason: "a category's name must not be empty")
            }
            if let old, let index = gate.categories.firstIndex(of: old) { gate.categories.remove(at: index) }
            if let new, !gate.categories.contains(new) { gate.categories.append(new) }
        }
    }

    /// The conditions added to the operation.
    public var conditions: [Condition] {
        core.withLock { $0.gate?.conditions ?? [] }
    }

    /// The categories the operation claims.
    public var categories: [OperationCategory] {
        core.withLock { $0.gate?.categories ?? [] }
    }

    private func configureGate(_ change: (OperationGate) throws(BatonError) -> Void) throws(BatonError) {
        let problem: BatonError? = core.withLock { state in
            guard state.life.isPending, state.gate?.admission.isClosed ?? true else {
                return .invalidArgument(
                    operation: reference, reason: "conditions and categories must be added before the operation starts")
            }
            let gate = state.gate ?? OperationGate()
            do throws(BatonError) {
                try change(gate)
            } catch {
                return error
            }
            state.gate = gate
            return nil
        }
        if let problem { throw problem }
    }

    // MARK: - Beginning

    /// `isReady` past the dependencies: `true` when the gate is passed. A queue that asks about an
    /// operation it holds (and whose dependencies have finished) begins the passage, off this thread:
    /// Foundation may ask under its own lock. `enqueued` and `dependencies` were read before
    /// Foundation's count of unfinished dependencies (see ``isReady``): whether the queue had finished
    /// adding the operation, and the count of `addDependency` calls then (see `State.dependencyAdds`).
    func gateAllowsStart(enqueued: Bool?, dependencies: UInt32) -> Bool {
        // Linux's Foundation reads `isReady` once while it adds the operation, before it can schedule
        // it: the gate begins when the queue considers it (added, or walked after a resume), never
        // before. Where Foundation's record cannot be read (Apple platforms), any read begins it.
        let inQueue = enqueued ?? true
        var reannounce = false
        var claim: Claim?
        var looks = false
        let action: Admission.Action? = core.withLock { state in
            guard let gate = state.gate else { return nil }
            let ownRead = !gate.announcers.isEmpty && gate.announcers.isOwnRead(on: Announcers.currentThread)
            if gate.admission.isPassed {
                // Linux's queue caches each operation's readiness by reading `isReady` and then
                // storing it, two steps: a read made while the gate was in progress (by
                // `addDependency` on another thread, say) can store its `false` after the gate's
                // announcement stored `true`. The queue then walks past the operation for good: it
                // re-reads the readiness of such an operation (this read) and caches the `true`, but
                // does not schedule it. So a read that finds the gate passed while Foundation still
                // holds the operation unstarted announces the readiness again, unless it is an
                // announcement's own read (which would only repeat itself). A second read on an
                // announcing thread is not: its walk found the `true` it had just stored replaced by
                // a stale `false`, and re-read it, which only caches it.
                reannounce = enqueued == true && !ownRead && state.life.isPending
                return nil
            }
            // An `addDependency` under way when the count was read, or since: Foundation's count may
            // have been read before its edge. The call has the queue read `isReady` again once it is
            // done (an unfinished dependency, as it finishes).
            guard inQueue, gate.admission.isClosed, state.life.isPending, dependencies % 2 == 0,
                state.dependencyAdds == dependencies
            else {
                return Admission.Action.none
            }
            // A queue without a width limit dispatches every operation it finds ready. Granted now, a
            // claimant would hold its categories until its start runs, and a serial dispatch queue of
            // the queue's own keeps it waiting there behind the work ahead (which may wait for another
            // claimant of them). Refused now, it would stay in the queue's list, which Linux's queue
            // walks, re-reading every waiter, each time it is told of a readiness: many claimants of
            // one category were quadratic (5 ms each at 10,000). There the categories are claimed as
            // its start runs, and a start that finds one held returns (the queue no longer lists it):
            // the queue is told it is ready, and told again as a passed gate's is (a `false` stored
            // late).
            if enqueued == true, !gate.categories.isEmpty {
                switch gate.claimsAtStart {
                case nil:
                    looks = true
                    return Admission.Action.none
                case true?:
                    reannounce = !ownRead
                    return nil
                case false?:
                    break
                }
            }
            let action = begin(gate, path: .announce, settled: state.isCancelled || state.life.early != nil)
            if case .request = action { claim = Claim(gate, &state) }
            return action
        }
        if looks {
            // Outside the operation's lock: the queue's width is read under a lock of Foundation's.
            let queue = FoundationQueueState.queue(of: self)
            let claimsAtStart = queue?.hasNoWidthLimit ?? false
            core.withLock { state in
                if state.gate?.claimsAtStart == nil { state.gate?.claimsAtStart = claimsAtStart }
            }
            return gateAllowsStart(enqueued: enqueued, dependencies: dependencies)
        }
        switch action {
        case nil:
            if reannounce { DispatchQueue.global().async { self.announceReady() } }
            return true
        case .none?:
            return false
        case .request(let token)?:
            // No conditions: the table is asked on this thread (its lock and the operation's are never
            // held around a call into Foundation), so an uncontended claim is ready in this very read
            // and the queue does not walk past it again. Linux's queue only caches a `true` it re-read,
            // without scheduling, so the change is announced too, off this thread: announced here, it
            // would make the queue walk (and re-read) every operation still to be re-read, once per
            // operation.
            guard request(token, claim, goingOn: true) else { return false }
            DispatchQueue.global().async { self.announceReady() }
            return true
        case let action?:
            DispatchQueue.global().async { self.perform(action) }
            return false
        }
    }

    /// What a Baton entry point does with an operation it is about to add to a queue (see
    /// ``admitForLaunch(on:)``).
    enum LaunchAdmission {
        /// Add it now; it has no gate to pass first, or its gate is closed and its queue will begin it.
        case add
        /// Add it now, then call ``gateNoteEnqueuedPassed()``: its gate passed outside the queue.
        case addPassed
        /// Do not add it: its gate adds it once it opens.
        case later
    }

    /// Called by a Baton entry point about to add the operation to `queue`. An operation whose gate is
    /// still closed and whose dependencies have all finished passes it first, outside the queue, and
    /// is added once it opens: waiting takes no worker and no place in the queue's list.
    func admitForLaunch(on queue: OperationQueue) -> LaunchAdmission {
        let (gated, policy, hasDependencies) = core.withLock {
            ($0.gate.map { $0.admission.isClosed } ?? false, $0.policy, $0.hasDependencies)
        }
        // Only where being added means getting a worker at once: in a queue with a width limit the
        // operation may wait there for a worker, and a category it held meanwhile would keep every
        // other claimant out while it does not execute (an earlier operation of a serial group that
        // waits for one of them would never let it run). There the queue begins the gate as it reads
        // `isReady`, which it does only with a worker free.
        // Nor where the queue runs its operations on a dispatch queue of its own: a serial one keeps
        // an added operation waiting behind the work ahead (there the categories are claimed at the
        // start, see ``gateAllowsStart(enqueued:dependencies:)``).
        guard gated, !queue.isSuspended, queue.hasNoWidthLimit, queue.ownDispatchQueue == nil else { return .add }
        // Read once: whether they have all finished, then what they say.
        let dependencies = hasDependencies || !Self.listsOnlyAddedDependencies ? self.dependencies : []
        guard dependencies.allSatisfy(\.isFinished) else { return .add }
        let verdict = dependencyVerdict(policy, of: dependencies)
        let (action, claim): (Admission.Action, Claim?) = core.withLock { state in
            guard let gate = state.gate, gate.admission.isClosed else { return (.none, nil) }
            gate.launchTarget = queue
            let settled = verdict != nil || state.isCancelled || state.life.early != nil
            let action = begin(gate, path: .launch, settled: settled)
            guard case .request = action else { return (action, nil) }
            return (action, Claim(gate, &state))
        }
        // Refused at once, or a request granted at once, comes back as `proceed`: added in this call.
        let now: Bool
        if case .request(let token) = action {
            now = request(token, claim, goingOn: true)
        } else {
            if action == .none { return .add }
            now = perform(action, goingOn: true)
        }
        return now ? .addPassed : .later
    }

    /// Feeds `beginByStart` (under the lock): `start()` was called before the gate opened, by the
    /// operation's own queue when `holdsWorker`.
    func beginByStart(_ gate: OperationGate, holdsWorker: Bool) -> Admission.Action {
        noteEvaluation(gate.admission.beginByStart(hasConditions: !gate.conditions.isEmpty, holdsWorker: holdsWorker), gate)
    }

    /// Feeds `begin` (under the lock). `settled`: the operation will not execute anyway.
    func begin(_ gate: OperationGate, path: Admission.Path, settled: Bool) -> Admission.Action {
        noteEvaluation(gate.admission.begin(path, settled: settled, hasConditions: !gate.conditions.isEmpty), gate)
    }

    /// A passage that evaluates its conditions starts waiting for them now.
    private func noteEvaluation(_ action: Admission.Action, _ gate: OperationGate) -> Admission.Action {
        if case .evaluate = action { gate.conditionsSince = DispatchTime.now().uptimeNanoseconds }
        return action
    }

    private func takeLaunchTarget() -> OperationQueue? {
        core.withLock { state in
            defer { state.gate?.launchTarget = nil }
            return state.gate?.launchTarget
        }
    }

    // MARK: - Acting

    /// Performs an admission action. With `goingOn`, a `proceed` along the launch or the announce path
    /// is not performed but returned as `true`: the caller goes on itself (adds the operation to its
    /// queue, or answers `isReady` with `true`). With `startsHere`, so is one along the start path: the
    /// caller is the start that began the gate, and calls it again on its own thread.
    @discardableResult
    func perform(_ action: Admission.Action, goingOn: Bool = false, startsHere: Bool = false) -> Bool {
        switch action {
        case .none:
            return false
        case .evaluate(let token):
            if let recording { recording.recorder.beganWaiting(recording.id, self) }
            DispatchQueue.global().async { self.evaluateConditions(token) }
            return false
        case .request(let token):
            return request(token, goingOn: goingOn, startsHere: startsHere)
        case .proceed(let path):
            return proceed(path, goingOn: goingOn, startsHere: startsHere)
        case .abandon(let path):
            let evaluation = core.withLock { state in
                defer { state.gate?.evaluation = nil }
                return state.gate?.evaluation
            }
            evaluation?.abandon()
            recordWait(conditions: true)
            return proceed(path, goingOn: goingOn, startsHere: startsHere)
        case .withdraw(_, let path):
            Gatekeeper.withdraw(self)
            recordWait(conditions: false)
            return proceed(path, goingOn: goingOn, startsHere: startsHere)
        case .putFirst:
            Gatekeeper.putFirst(self)
            return false
        case .giveBack, .reopen, .revoke:
            return false
        }
    }

    /// An operation that holds a worker of its queue waits for a category this one holds (see
    /// ``Admission/holdsWorker``). If no queue has taken a worker for this one yet (it waits in its
    /// queue, or is on its way into it), it gives back what it holds, and tells its queue its
    /// readiness changed: the gate begins anew, behind that operation. Otherwise (it is starting or
    /// executing, or Baton cannot read its queue's record: Apple platforms) it keeps them and
    /// finishes as usual. The lanes are given back in the step that closes the gate (the table's lock
    /// taken under the operation's): a start by its queue in between would otherwise ask for them
    /// while the table still counted them as held by it.
    ///
    /// Why: Linux's queue may start an operation whose gate was not passed (it dispatches from a
    /// readiness it cached, and a read made before a dependency was added can store its `true` after
    /// `addDependency` stored `false`). That operation keeps a worker while it waits for its
    /// categories, and a holder waiting in the same queue for a worker would wait for ever in a queue
    /// with no other worker free.
    func yieldLanes() {
        let granted: [(UInt64, Gatekeeper.Waiter)]? = core.withLock { state in
            guard let gate = state.gate, state.life.isPending,
                let dispatched = FoundationQueueState.isDispatched(self), gate.admission.yield(dispatched: dispatched)
            else { return nil }
            return Gatekeeper.giveBack(gate.lanes, by: self)
        }
        guard let granted else { return }
        Gatekeeper.wake(granted)
        DispatchQueue.global().async { self.announceReady() }
    }

    /// Whether the operation could not start now even with its categories: a dependency has not
    /// finished (one added while it waited). Read outside the operation's lock: Foundation's locks
    /// are never taken under it. (A suspended queue is not looked at: Foundation does not say which
    /// queue holds an operation, and a composite's children declined one by one would all be put in
    /// its suspended queue, where Foundation walks every one of them on each change.)
    private func cannotStartNow() -> Bool {
        // Without one added, a final class has none to read (see `State.hasDependencies`): a lock
        // pair instead of Foundation's lock and a filtered copy, on every grant that waited.
        if Self.listsOnlyAddedDependencies, !core.withLock({ $0.hasDependencies }) { return false }
        return dependencies.contains(where: { !$0.isFinished })
    }

    /// A dependency was added with `addDependency(_:)`. One that has not finished keeps a gate in
    /// progress from opening (its answer is declined when it comes), and takes back the categories
    /// of an open gate whose operation has not started: they are given back at once, and the gate
    /// begins anew when the operation's queue looks at it again, as that dependency finishes.
    func gateNoteDependency(_ dependency: Operation) {
        guard !dependency.isFinished else {
            // Foundation read `isReady` while it recorded the edge, and that read (or one it overlapped)
            // did not begin a closed gate: an operation its queue holds is announced again, so the queue
            // reads it now that the call is done (a finished dependency adds nothing to wait for).
            let closedInQueue = core.withLock { state in
                state.gate.map { $0.admission.isClosed && state.life.isPending } ?? false
            }
            if closedInQueue, FoundationQueueState.isEnqueued(self) ?? true {
                DispatchQueue.global().async { self.announceReady() }
            }
            return
        }
        if let granted = takeBackGrantForUnfinishedDependency() { Gatekeeper.wake(granted) }
    }

    /// Adds the operation, whose gate passed along the launch path, to `queue`, then checks what the
    /// queue added with it (see ``gateNoteEnqueuedPassed()``): what a grant taken back lets through,
    /// for the caller to wake. Woken here, a line of claimants that each enter a queue behind a
    /// barrier from the wake of the one before would recurse once per claimant (a review overflowed
    /// the stack with 9,000); `Gatekeeper.wake` works through them in its loop.
    private func enterQueuePassed(_ queue: OperationQueue) -> [(UInt64, Gatekeeper.Waiter)]? {
        queue.addOperation(self)
        return gateNoteEnqueuedPassed()
    }

    /// Called once the operation, whose gate passed along the launch path (outside the queue), has
    /// been added to its queue. Linux's queue makes an operation it adds behind a pending barrier
    /// depend on that barrier, without `addDependency` (so ``gateNoteDependency(_:)`` never hears of
    /// it) and without listing it in `dependencies`. Kept, the grant would hold the operation's
    /// categories until the barrier has run, while the barrier waits for the operations added before
    /// it, which may be waiting for those categories: all of them would wait for good. Foundation's own
    /// readiness (its count of unfinished dependencies, barriers included) tells: when it says no, the
    /// grant is taken back as for a late dependency, and the gate begins again when the queue reads
    /// `isReady` once the barrier has finished.
    /// Returns what a grant taken back lets through, for the caller to wake.
    func gateNoteEnqueuedPassed() -> [(UInt64, Gatekeeper.Waiter)]? {
        guard !super.isReady else { return nil }
        return takeBackGrantForUnfinishedDependency()
    }

    /// An unfinished dependency the gate did not wait for: a passed gate of an operation its queue has
    /// not dispatched gives back what it holds and closes (see `Admission.dependencyAdded`), and what
    /// that lets through is returned, for the caller to wake.
    private func takeBackGrantForUnfinishedDependency() -> [(UInt64, Gatekeeper.Waiter)]? {
        core.withLock { state in
            // Foundation dispatches under its queue's lock from the readiness it cached, which the
            // dependency has just set to `false`: not dispatched by now, it will not be until the
            // queue reads `isReady` again (or it reads a `true` stored late: then it asks again as a
            // holder of a worker).
            guard let gate = state.gate, state.life.isPending,
                gate.admission.dependencyAdded(dispatched: FoundationQueueState.isDispatched(self) == true) == .revoke
            else {
                return nil
            }
            // Given back in the step that closes the gate (see `yieldLanes()`).
            return Gatekeeper.giveBack(gate.lanes, by: self)
        }
    }

    /// The gate closed again (see `Admission.Action.reopen`), holding nothing (what it was granted is
    /// given back first). Along the launch path the operation is added to its queue unready, to begin
    /// again when the queue considers it (when its dependencies have finished). Along the announce path its queue is
    /// told that its readiness changed: the queue may have read it for the last time (as a
    /// dependency finished) while the gate was still deciding.
    func reopenAfterDecline(_ path: Admission.Path) {
        switch path {
        case .launch:
            takeLaunchTarget()?.addOperation(self)
        case .announce:
            DispatchQueue.global().async { self.announceReady() }
        case .start:
            break
        }
    }

    private func proceed(_ path: Admission.Path, goingOn: Bool, startsHere: Bool = false) -> Bool {
        switch path {
        case .announce:
            if goingOn { return true }
            announceReady()
        case .launch:
            guard let queue = takeLaunchTarget() else { return false }
            if goingOn { return true }
            if let granted = enterQueuePassed(queue) { Gatekeeper.wake(granted) }
        case .start:
            if startsHere { return true }
            // Where its queue's start ran: on that queue's dispatch queue, if it has one of its own (work
            // meant for it, on the main queue's, say, never runs elsewhere), on a global one if it has
            // none and no width limit; else on this thread.
            let target = core.withLock { state in
                defer { state.gate?.startsOn = nil }
                return state.gate?.startsOn
            }
            startAfterGate(on: target)
        }
        return false
    }

    /// The gate that held back a start has answered: a start its queue made is resumed (see
    /// `Lifecycle.Parking.admitting`), one by hand is made again; on `target` (the queue's dispatch
    /// queue, marked as that queue's) when given, else on this thread.
    func startAfterGate(on target: (dispatch: DispatchQueue, queue: ObjectIdentifier)?) {
        let resumes = core.withLock { $0.life.resumeAdmission() }
        if let target {
            target.dispatch.async {
                Relay.startingFor(target.queue) { if resumes { self.begin(resuming: true) } else { self.start() } }
            }
        } else {
            Trampoline.run { if resumes { self.begin(resuming: true) } else { self.start() } }
        }
    }

    private func announceReady() {
        let thread = Announcers.currentThread
        let tap = core.withLock { state in
            state.gate?.announcers.begin(thread)
            return state.notificationTap
        }
        announce(.willChange(Self.isReadyKey), tap)
        announce(.didChange(Self.isReadyKey), tap)
        core.withLock { $0.gate?.announcers.end(thread) }
    }

    /// Computed for the reason `isExecutingKey` is.
    static var isReadyKey: String { "isReady" }

    // MARK: - Conditions

    private func evaluateConditions(_ token: UInt64) {
        let evaluation = Evaluation()
        let started: (conditions: [Condition], queue: OperationQueue)? = core.withLock { state in
            guard let gate = state.gate, gate.admission.stage == .evaluating(token) else { return nil }
            gate.evaluation = evaluation
            return (gate.conditions, state.targetQueue ?? Gatekeeper.fallbackQueue)
        }
        guard let started else { return }
        let context = ConditionContext(operation: self)
        let allSatisfied = Countdown(events: started.conditions.count) { [weak self] in
            self?.conditionsAnswered(token, nil, evaluation)
        }
        for condition in started.conditions {
            let answer = FirstAnswer { [weak self] result in
                guard let self else { return }
                switch result {
                case .satisfied:
                    allSatisfied.tick()
                case .failed(let error):
                    let failure = BatonError.conditionFailed(
                        operation: self.reference, condition: condition.name, underlying: error)
                    self.conditionsAnswered(token, .failed(failure), evaluation)
                case .notSatisfied:
                    self.conditionsAnswered(token, .cancelled, evaluation)
                }
            }
            // The timeout holds the answer until it fires. The evaluation is abandoned once the
            // conditions have decided (or the operation no longer waits for them): the timer is
            // cancelled then, and lets go of the answer and what it captured at once.
            let (timeout, name) = (condition.timeout, condition.name)
            let timer = Deadlines.after(timeout) {
                answer(.failed(BatonError.conditionTimedOut(condition: name, after: timeout)))
            }
            evaluation.onAbandon { [weak answer] in
                timer.cancel()
                answer?.discard()
            }
            condition.evaluate(context, in: evaluation, queue: started.queue) { answer($0) }
        }
        allSatisfied.tick()
    }

    /// The conditions decided: `refusal` is the outcome the operation ends with unexecuted, or `nil`
    /// when every condition is satisfied. The gate and the lifecycle take it in one step.
    private func conditionsAnswered(
        _ token: UInt64, _ refusal: Outcome<(any Sendable)?>?, _ evaluation: Evaluation
    ) {
        let action: Admission.Action = core.withLock { state in
            guard let gate = state.gate else { return .none }
            let action = gate.admission.answered(token, satisfied: refusal == nil)
            guard action != .none else { return .none }
            gate.evaluation = nil
            switch refusal {
            case .failed(let error)?: _ = state.life.finish(.failed(error), carriesResult: true)
            case .cancelled?: _ = state.life.cancel()
            case .succeeded?, nil: break
            }
            return action
        }
        // Whatever is still running is not wanted any more (a slow sibling's produced dependency).
        evaluation.abandon()
        recordWait(conditions: true)
        perform(action)
    }

    // MARK: - Categories

    /// What a request for the categories starts from, read in the step that decided to ask (one lock
    /// less per claim than reading it again).
    struct Claim {
        let categories: [OperationCategory]
        /// The queue of the composite the operation is launched in, if any: its owner may lend them.
        let parent: ChildQueue?

        init(_ gate: OperationGate, _ state: inout State) {
            categories = gate.categories
            parent = state.compositeQueue
        }
    }

    /// Asks for the categories (`claim`: read when the request was decided; read here when `nil`);
    /// granted at once, the gate opens on this thread.
    private func request(
        _ token: UInt64, _ decided: consuming Claim? = nil, goingOn: Bool, startsHere: Bool = false
    ) -> Bool {
        // Going on, the caller has just seen that it can start (its queue read `isReady`, or a Baton
        // entry point looked); otherwise the conditions took their time, and it is looked at again.
        let blocked = goingOn ? false : cannotStartNow()
        guard let claim = decided.take() ?? core.withLock({ state in state.gate.map { Claim($0, &state) } }) else {
            return false
        }
        let categories = claim.categories
        // Asked again (rarely) when an ancestor that lent a category let it go between the walk that
        // found it and the table's step: the walk then finds the level where the claim now belongs.
        while true {
            let lanes: [Lane]
            do throws(HoldAndWait) {
                lanes = try Self.lanes(for: categories, in: claim.parent)
            } catch {
                let (category, holder, held) = (error.category, error.holder, error.held)
                let error = BatonError.wouldDeadlock(
                    operation: reference,
                    reason: "it claims category \(category), which \(holder.reference) does not hold while it holds "
                        + "\(held) and waits for its children: claim \(category) on \(holder.reference) too")
                let action: Admission.Action = core.withLock { state in
                    guard let gate = state.gate else { return .none }
                    let action = gate.admission.refuse(token)
                    if action != .none { _ = state.life.finish(.failed(error), carriesResult: true) }
                    return action
                }
                return perform(action, goingOn: goingOn, startsHere: startsHere)
            }
            enum Asked {
                case stale, waiting
                /// Waiting first in its lines, its operation holding a worker of its queue: these
                /// holders are asked to give their lanes back.
                case waitingFirst([AsyncOperation])
                /// An ancestor let a lent category go before the table's step: nothing was asked.
                case lenderGone
                case reopened(Admission.Action)
                case granted(Admission.Action)
                /// Granted on the launch path: the queue to add it to, taken in the same step.
                case launch(OperationQueue?)
            }
            // Asked under the operation's lock, so that a cancellation either comes first (and nothing is
            // asked) or finds the request in the table to withdraw. The one nesting of the two locks: an
            // operation's, then the table's; never the reverse.
            let asked: Asked = core.withLock { state in
                guard let gate = state.gate, gate.admission.stage == .waiting(token) else { return .stale }
                if blocked || gate.admission.mustLookAgain, gate.admission.path != .start {
                    return .reopened(gate.admission.declined(token))
                }
                if gate.admission.holdsWorker {
                    guard let asked = Gatekeeper.requestFirst(self, token: token, lanes: lanes) else { return .lenderGone }
                    gate.lanes = lanes
                    if case .waiting(let holders) = asked {
                        gate.categoriesSince = DispatchTime.now().uptimeNanoseconds
                        return .waitingFirst(holders)
                    }
                } else {
                    guard let granted = Gatekeeper.request(self, token: token, lanes: lanes) else { return .lenderGone }
                    gate.lanes = lanes
                    guard granted else {
                        gate.categoriesSince = DispatchTime.now().uptimeNanoseconds
                        return .waiting
                    }
                }
                let action = gate.admission.granted(token)
                guard action == .proceed(.launch) else { return .granted(action) }
                defer { gate.launchTarget = nil }
                return .launch(gate.launchTarget)
            }
            switch asked {
            case .stale:
                return false
            case .lenderGone:
                continue
            case .reopened(let action):
                if case .reopen(let path) = action { reopenAfterDecline(path) }
                return false
            case .waiting:
                if let recording { recording.recorder.beganWaiting(recording.id, self) }
                watchForSlowWait(token, categories: categories)
                return false
            case .waitingFirst(let holders):
                if let recording { recording.recorder.beganWaiting(recording.id, self) }
                watchForSlowWait(token, categories: categories)
                for holder in holders { holder.yieldLanes() }
                return false
            case .granted(let action):
                return perform(action, goingOn: goingOn, startsHere: startsHere)
            case .launch(let queue):
                // What `proceed(.launch)` does, with the target it would have taken.
                guard let queue else { return false }
                if goingOn { return true }
                if let granted = enterQueuePassed(queue) { Gatekeeper.wake(granted) }
                return false
            }
        }
    }

    /// Why a request's categories cannot be claimed anywhere: `holder`, an ancestor composite that
    /// holds `held`, does not hold `category`. Claiming it would make the holder hold one category and
    /// wait (for its children) for another, the hold-and-wait that lets two composites deadlock each
    /// other. (Thrown, not returned in an enum: the usual answer, the lanes, then costs no enum copies.)
    struct HoldAndWait: Error {
        let category: OperationCategory
        let holder: AsyncOperation
        let held: String
    }

    /// The lane each category is claimed in. Outside any holding composite, at the top. Inside one,
    /// the nearest ancestor that holds anything lends its categories (the claim is inherited, in a lane
    /// of its own under that ancestor); a category it does not hold is refused.
    static func lanes(
        for categories: [OperationCategory], under parent: AsyncOperation?
    ) throws(HoldAndWait) -> [Lane] {
        try walk(for: categories, under: parent).lanes
    }

    /// ``lanes(for:under:)`` for an operation launched on `queue` (`nil`: not a composite's). A queue
    /// whose composites up to the top have no gate lends nothing, ever (a composite gets no gate once it
    /// has started, and its children are launched only after it has): the first claim made there that
    /// finds so says so to the queue, and later claims skip the walk (its locks and weak loads were
    /// about 800 instructions of a claim inside a composite, callgrind).
    static func lanes(for categories: [OperationCategory], in queue: ChildQueue?) throws(HoldAndWait) -> [Lane] {
        guard let queue else { return topLanes(for: categories) }
        let (owner, lendsNothing) = queue.lending
        if lendsNothing { return topLanes(for: categories) }
        let found = try walk(for: categories, under: owner)
        if found.lendsNothing, owner != nil { queue.noteLendsNothing() }
        return found.lanes
    }

    private static func topLanes(for categories: [OperationCategory]) -> [Lane] {
        categories.count == 1 ? categories[0].topLanes : categories.map { Lane(name: $0.laneName, under: 0) }
    }

    /// The walk up the composites from `parent`, and whether every composite it passed has no gate and
    /// has started (so nothing up from `parent` can lend, now or later).
    private static func walk(
        for categories: [OperationCategory], under parent: AsyncOperation?
    ) throws(HoldAndWait) -> (lanes: [Lane], lendsNothing: Bool) {
        var ancestor = parent
        var lendsNothing = true
        while let current = ancestor {
            // What it holds, or else the next ancestor (most composites hold nothing: one read each).
            let (held, next, gateless): ([Lane], AsyncOperation?, Bool) = current.core.withLock { state in
                if let held = state.gate?.held, !held.isEmpty { return (held, nil, false) }
                return ([], state.compositeQueue?.owner, state.gate == nil && !state.life.isPending)
            }
            lendsNothing = lendsNothing && gateless
            if !held.isEmpty {
                var lanes = [Lane]()
                lanes.reserveCapacity(categories.count)
                for category in categories {
                    guard let lent = held.first(where: { $0.name == category.laneName }) else {
                        let names = current.categories.map { "\($0)" }.joined(separator: ", ")
                        throw HoldAndWait(category: category, holder: current, held: names)
                    }
                    lanes.append(Lane(name: category.laneName, under: current.serialNumber, lender: lent.under))
                }
                return (lanes, false)
            }
            ancestor = next
        }
        return (topLanes(for: categories), lendsNothing)
    }

    /// Why `waiter` would wait for itself through `produced`, a condition's produced operation that
    /// claims `lanes` (each allowing one holder): an ancestor composite of `waiter` holds one of them,
    /// so the produced operation waits for that composite, which waits for `waiter`, which waits for
    /// the produced operation. `nil` when no ancestor does.
    static func waitsForItself(_ waiter: AsyncOperation, through produced: AsyncOperation, lanes: [Lane]) -> BatonError? {
        let parent = waiter.core.withLock { $0.compositeQueue?.owner }
        guard let blocked = parent?.heldLanesUpward().first(where: { lanes.contains($0.lane) }) else { return nil }
        let category =
            produced.categories.first { $0.laneName == blocked.lane.name }.map { "\($0)" } ?? blocked.lane.name.category
        return .wouldDeadlock(
            operation: waiter.reference,
            reason: "its condition's produced operation \(produced.reference) claims category \(category), which "
                + "\(blocked.holder.reference) holds while it waits for this operation")
    }

    /// A grant the operation did not keep, given back already: whom that let through, and, when it
    /// declined the grant because it cannot start, the path along which it goes on.
    struct UnkeptGrant {
        let granted: [(UInt64, Gatekeeper.Waiter)]
        let reopen: Admission.Path?
    }

    /// A grant for the request of `token` arrived. When the request was cancelled meanwhile, or the
    /// operation cannot start (a dependency added while it waited has not finished), the lanes are
    /// given back in the step that decides it (under the operation's lock: a request made anew in
    /// between would find them still counted as its own), and the caller wakes whom that lets through,
    /// then reopens (`reopenAfterDecline`): a line of claimants that decline one after another is
    /// worked through in the caller's loop, not by recursing once per claimant. Otherwise the gate is
    /// open and the operation goes on; granted on the launch path and added behind a queue's pending
    /// barrier, it gives the lanes back at once (see ``gateNoteEnqueuedPassed()``), and those go to the
    /// caller's loop too.
    func categoriesGranted(_ token: UInt64, lanes: [Lane]) -> UnkeptGrant? {
        let blocked = cannotStartNow()
        // One step decides, takes the wait to record and, granted on the launch path, the queue to add
        // the operation to (three lock pairs were one each; the grant path is a contended category's
        // critical path).
        struct Decision {
            var action: Admission.Action
            var wait: FinishedWait?
            var queue: OperationQueue?
            var unkept: [(UInt64, Gatekeeper.Waiter)] = []
        }
        let decision: Decision = core.withLock { state in
            guard let gate = state.gate else {
                return Decision(action: .giveBack, unkept: Gatekeeper.giveBack(lanes, by: self))
            }
            let action = blocked ? gate.admission.declined(token) : gate.admission.granted(token)
            guard action != .giveBack else {
                return Decision(action: action, unkept: Gatekeeper.giveBack(lanes, by: self))
            }
            var decision = Decision(action: action, wait: takeWait(gate, &state, conditions: false))
            if case .reopen = action { decision.unkept = Gatekeeper.giveBack(lanes, by: self) }
            if action == .proceed(.launch) {
                decision.queue = gate.launchTarget
                gate.launchTarget = nil
            }
            return decision
        }
        switch decision.action {
        case .giveBack:
            return UnkeptGrant(granted: decision.unkept, reopen: nil)
        case .reopen(let path):
            decision.wait?.record()
            return UnkeptGrant(granted: decision.unkept, reopen: path)
        case .proceed(.launch):
            decision.wait?.record()
            // Taken back behind a barrier: the caller's loop wakes whom that lets through.
            guard let queue = decision.queue, let granted = enterQueuePassed(queue) else { return nil }
            return UnkeptGrant(granted: granted, reopen: nil)
        case let action:
            decision.wait?.record()
            perform(action)
            return nil
        }
    }

    private func watchForSlowWait(_ token: UInt64, categories: [OperationCategory]) {
        // The smallest threshold, found without building a list: every wait for a category comes here.
        var smallest: Duration?
        for category in categories {
            if let threshold = category.scope.slowWaitThreshold, smallest.map({ threshold < $0 }) ?? true {
                smallest = threshold
            }
        }
        guard let threshold = smallest else { return }
        let watch = Deadlines.after(threshold) { [weak self] in
            guard let self else { return }
            let stillWaiting = self.core.withLock { $0.gate?.admission.stage == .waiting(token) }
            if stillWaiting { Diagnostics.report(.waitedLongForCategory, self) }
        }
        // Kept for `releaseGate()` to cancel, unless the wait is over already (it may have been
        // granted, or the operation finished, before the watch was set).
        let (kept, replaced) = core.withLock { state -> (Bool, Deadlines.Timer?) in
            guard let gate = state.gate, gate.admission.stage == .waiting(token) else { return (false, nil) }
            defer { gate.slowWaitWatch = watch }
            return (true, gate.slowWaitWatch)
        }
        // The watch of an earlier wait of this operation is over: this one replaces it.
        replaced?.cancel()
        if !kept { watch.cancel() }
    }

    // MARK: - Cancelling and finishing

    /// The operation finished: what the gate held (or still asked for) is given back.
    func releaseGate() {
        let (release, lanes, evaluation, watch): (Admission.Release, [Lane], Evaluation?, Deadlines.Timer?) = core.withLock {
            state in
            guard let gate = state.gate else { return (.none, [], nil, nil) }
            defer {
                gate.evaluation = nil
                gate.launchTarget = nil
                gate.slowWaitWatch = nil
            }
            let held = gate.held
            return (gate.admission.finish(), held, gate.evaluation, gate.slowWaitWatch)
        }
        watch?.cancel()
        // An evaluation taken out of the gate is abandoned, whatever the gate's stage: a cancellation
        // refuses the gate in one step and takes the evaluation in the next, and a finish that lands
        // between them (the queue starts the refused operation at once) takes it here instead. It was
        // dropped unabandoned, and its conditions' timers and flag waits stayed (a review's test, 1
        // run in 6 under ThreadSanitizer).
        evaluation?.abandon()
        switch release {
        case .none: break
        case .lanes: Gatekeeper.release(lanes, by: self)
        case .withdraw:
            Gatekeeper.withdraw(self)
            recordWait(conditions: false)
        case .abandon:
            recordWait(conditions: true)
        }
    }

    /// A lane held by an operation that a wait made here keeps from finishing.
    struct BlockedLane {
        let lane: Lane
        let holder: AsyncOperation
    }

    /// The lanes this operation holds, and those of every composite above it (each waits for the
    /// child it runs, down to this one, to finish).
    func heldLanesUpward() -> [BlockedLane] {
        var blocked: [BlockedLane] = []
        var current: AsyncOperation? = self
        while let operation = current {
            let (held, parent) = operation.core.withLock { state in
                (state.gate?.held ?? [], state.compositeQueue?.owner)
            }
            blocked += held.map { BlockedLane(lane: $0, holder: operation) }
            current = parent
        }
        return blocked
    }

    /// Whether a wait for this operation, made where `blocked` lanes are held by operations the wait
    /// keeps from finishing (see ``Callouts/blockedLanes(blocking:)``), would wait for itself: this
    /// operation has yet to be granted a category of limit 1 in one of those lanes. Its lanes are the
    /// ones it waits in, or else those it will ask for when it is launched on `queue` (or where a Baton
    /// entry point launched it; a queue of a composite lends that composite's categories). The reason,
    /// or `nil`. An operation that finished, or passed its gate, waits for no grant; under a limit
    /// above 1 the holder leaves room, or others hold the rest and will give it back.
    func categoryDeadlockReason(blocked: [BlockedLane], runningOn queue: OperationQueue? = nil) -> String? {
        guard !blocked.isEmpty else { return nil }
        struct Pending {
            let categories: [OperationCategory]
            let lanes: [Lane]?
            let target: OperationQueue?
        }
        let pending: Pending? = core.withLock { state in
            guard let gate = state.gate, !gate.categories.isEmpty, !gate.admission.isPassed, !state.life.isFinished
            else { return nil }
            // Its lanes are known once it has asked; the stage says `waiting` a step before that (the
            // request is worked out off the lock), so the lanes decide, not the stage.
            return Pending(
                categories: gate.categories, lanes: gate.lanes.isEmpty ? nil : gate.lanes, target: state.targetQueue)
        }
        guard let pending else { return nil }
        let lanes: [Lane]
        if let asked = pending.lanes {
            lanes = asked
        } else {
            // Where it will ask; a claim its composite cannot lend fails it at once (no wait).
            guard let found = try? Self.lanes(for: pending.categories, under: ((queue ?? pending.target) as? ChildQueue)?.owner)
            else { return nil }
            lanes = found
        }
        for (category, lane) in zip(pending.categories, lanes) {
            guard let held = blocked.first(where: { $0.lane == lane }), held.holder !== self,
                Gatekeeper.limit(of: lane.name) == 1
            else { continue }
            return "it needs category \(category), which \(held.holder.reference) holds while it waits here"
        }
        return nil
    }

    /// The first of `operations` (a chain's steps still to run, on `queue`) whose wait, made here, would
    /// wait for itself (``categoryDeadlockReason(blocked:runningOn:)``), and why. Looked at only where
    /// something is held.
    static func categoryDeadlock(
        among operations: @autoclosure () -> [Operation], on queue: OperationQueue, blocking: Bool
    ) -> (Operation, String)? {
        let blocked = Callouts.blockedLanes(blocking: blocking)
        guard !blocked.isEmpty else { return nil }
        for case let step as AsyncOperation in operations() {
            if let reason = step.categoryDeadlockReason(blocked: blocked, runningOn: queue) { return (step, reason) }
        }
        return nil
    }

    // MARK: - Visibility

    /// Tells the operation's recorder how long it waited for its conditions (or its categories), once:
    /// the start is taken from the gate and cleared, so the paths that end a wait may each call it. An
    /// operation nobody records only clears it (the label is made for a recorder alone).
    func recordWait(conditions: Bool) {
        let wait = core.withLock { state in state.gate.flatMap { takeWait($0, &state, conditions: conditions) } }
        wait?.record()
    }

    /// A wait that is over, for its recorder.
    struct FinishedWait {
        let recording: Recording
        let since: UInt64
        let categories: [OperationCategory]?

        /// Tells the recorder how long it lasted (the label is made here, for a recorder alone).
        func record() {
            let elapsed = DispatchTime.now().uptimeNanoseconds &- since
            guard elapsed > 0 else { return }
            let what = categories.map { $0.map { "\($0)" }.joined(separator: ", ") } ?? "conditions"
            recording.recorder.waited(recording.id, for: what, .nanoseconds(Int64(elapsed)))
        }
    }

    /// Takes the start of the wait for the conditions (or the categories) out of `gate`, under the
    /// lock: what to tell the recorder, if the operation is recorded.
    func takeWait(_ gate: OperationGate, _ state: inout State, conditions: Bool) -> FinishedWait? {
        let since = conditions ? gate.conditionsSince : gate.categoriesSince
        guard since != 0 else { return nil }
        if conditions { gate.conditionsSince = 0 } else { gate.categoriesSince = 0 }
        guard let recording = state.recorderLink.recording else { return nil }
        return FinishedWait(recording: recording, since: since, categories: conditions ? nil : gate.categories)
    }

    /// What the operation waits for at its gate now: `waiting for conditions`, or `waiting for
    /// 'database', held by nightly`; `nil` when it is not waiting there.
    func gateWaitDescription() -> String? {
        let (stage, categories, requested) = core.withLock { state in
            (state.gate?.admission.stage, state.gate?.categories ?? [], state.gate?.lanes ?? [])
        }
        switch stage {
        case .evaluating?:
            return "waiting for conditions"
        case .waiting?:
            // The lanes are set in the step that asks the table, a moment after the stage: until
            // then, the categories alone.
            guard !requested.isEmpty else { return "waiting for " + categories.map { "\($0)" }.joined(separator: "; ") }
            var parts = [String]()
            for (category, lane) in zip(categories, requested) {
                let (holding, pace) = Gatekeeper.holdersAndPace(of: lane)
                let holders = holding.filter { $0 !== self }
                let by = holders.isEmpty ? "" : ", held by " + holders.map { "\($0.reference)" }.joined(separator: " and ")
                // A rate may hold it back with nobody holding the category: say so.
                let rate = pace.map { " (rate \($0.count) per \($0.window))" }
                parts.append("\(category)\(rate ?? "")\(by)")
            }
            return "waiting for " + parts.joined(separator: "; ")
        default:
            return nil
        }
    }
}
