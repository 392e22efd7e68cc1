import Foundation

extension AsyncOperation {
    /// Where an operation is in its life (Docs/Lifecycle.md has the full table):
    /// pending → starting → executing → finished, or pending → finished without executing.
    enum Phase: Sendable {
        /// Not started.
        case pending
        /// `start()` decided to execute: `isExecuting` is announced and the start observers run, but
        /// `execute()` is not entered yet. A `cancel()` or `finish` now is recorded and decided when the
        /// operation leaves this phase, so `execute()` never runs on a decided operation.
        case starting
        /// `execute()` was entered (or is about to be, on this thread).
        case executing
        /// `isFinished` was announced.
        case finished
    }

    /// Who may hand the operation to a queue. Decided under the operation's lock, so two Baton entry
    /// points (a chain, a group, a wait…) can never both enqueue it.
    enum Custody: Sendable, Equatable {
        /// No Baton entry point has it (the user may still add it to a queue with Foundation's API).
        case unclaimed
        /// A Baton entry point has it and will launch it, or start it itself.
        case claimed
        /// In `queue` (or being added to it): only that queue may start it. A queue that runs its
        /// operations on the main thread is recognised by the thread, since `OperationQueue.current`
        /// there is always `OperationQueue.main`.
        case enqueued(queue: ObjectIdentifier, onMainThread: Bool)
        /// Baton starts it itself, on this thread (cancelled launches, retired children, adapters).
        case direct

        /// Whether a `start()` on this thread is the one the custody expects. A queue's own start runs
        /// on that queue, where `OperationQueue.current` is it.
        var allowsStart: Bool {
            switch self {
            case .unclaimed, .direct: return true
            case .claimed: return false
            case .enqueued(let queue, let onMainThread):
                if onMainThread { return Thread.isMainThread }
                return OperationQueue.current.map(ObjectIdentifier.init) == queue
            }
        }
    }

    /// Whether a thread is inside `execute()`. `didCancel()` is never called while one is: a
    /// cancellation that arrives then is delivered when `execute()` returns; a `rerun()` requested
    /// then runs `execute()` again after it returns.
    enum ExecuteCall: Sendable, Equatable {
        case outside
        case inside(cancelArrived: Bool, rerunRequested: Bool)
    }

    /// One KVO notification, as recorded by the test seam.
    enum Notification: Sendable, Hashable {
        case willChange(String)
        case didChange(String)
    }

    /// Every mutable property of an operation, kept behind its one lock.
    struct State {
        var phase: Phase = .pending
        var custody: Custody = .unclaimed
        var executeCall: ExecuteCall = .outside
        var isCancelled = false
        /// The outcome, decided while still executing (callbacks run), then kept once finished.
        var outcome: Outcome<(any Sendable)?>?
        /// A `finish` that arrived before `execute()` was entered; applied when the operation starts.
        var earlyOutcome: Outcome<(any Sendable)?>?
        /// Started while a dependency was unfinished: its edges are dropped when it finishes.
        var startedWhileNotReady = false
        var policy: DependencyPolicy = .skipOnFailureOrCancellation
        var timeout: Duration?
        var upstreamError: (any Error)?
        var input: (any Sendable)?
        weak var delegate: (any AsyncOperationDelegate)?
        var startObservers: [@Sendable () -> Void] = []
        var outcomeObservers: [@Sendable (Outcome<(any Sendable)?>) -> Void] = []
        /// Internal hooks that run after `isFinished` has been announced.
        var finishedHooks: [@Sendable () -> Void] = []
        var notificationTap: (@Sendable (Notification) -> Void)?
        /// How the operation records (usually not at all).
        var recorderLink = RecorderLink.none

        /// Decides the outcome and collects what must be told about it, outside the lock.
        mutating func beginFinishing(_ outcome: Outcome<(any Sendable)?>, wasExecuting: Bool) -> FinishEffects {
            self.outcome = outcome
            if case .cancelled = outcome { isCancelled = true }
            let effects = FinishEffects(
                outcome: outcome,
                wasExecuting: wasExecuting,
                dropsUnfinishedDependencies: !wasExecuting || startedWhileNotReady,
                delegate: delegate,
                observers: outcomeObservers
            )
            outcomeObservers = []
            startObservers = []
            return effects
        }

        /// Marks the operation finished and hands back what runs after the announcement.
        mutating func commitFinished() -> (
            hooks: [@Sendable () -> Void], tap: (@Sendable (Notification) -> Void)?, recorderLink: RecorderLink
        ) {
            phase = .finished
            delegate = nil
            let hooks = finishedHooks
            finishedHooks = []
            return (hooks, notificationTap, recorderLink)
        }
    }

    /// What a decided finish must do once the lock is released.
    struct FinishEffects {
        let outcome: Outcome<(any Sendable)?>
        let wasExecuting: Bool
        /// Finished without executing (or started early): unfinished dependencies still point here.
        let dropsUnfinishedDependencies: Bool
        let delegate: (any AsyncOperationDelegate)?
        let observers: [@Sendable (Outcome<(any Sendable)?>) -> Void]
    }

    /// What a decided start must do once the lock is released.
    struct StartEffects {
        let delegate: (any AsyncOperationDelegate)?
        let observers: [@Sendable () -> Void]
        let tap: (@Sendable (Notification) -> Void)?
        let notReady: Bool
    }

    // MARK: - Transitions (all callbacks and notifications outside the lock)

    /// Runs the callbacks of a decided outcome, then stores `finished` and announces it.
    func performFinish(_ effects: FinishEffects) {
        withExtendedLifetime(self) {
            if let delegate = effects.delegate {
                switch effects.outcome {
                case .succeeded(let output): delegate.operation(self, didSucceedWith: output)
                case .failed(let error): delegate.operation(self, didFailWith: error)
                case .cancelled: delegate.operationDidCancel(self)
                }
            }
            for observer in effects.observers { observer(effects.outcome) }
            if effects.dropsUnfinishedDependencies { dropUnfinishedDependencies() }

            let (hooks, tap, link) = core.withLock { $0.commitFinished() }
            if let recording = recording(resolving: link, startingOnQueue: false), recordsItsFinish {
                recording.recorder.finished(recording.id, status: FlightRecord.Status(effects.outcome), name: recordedName)
            }
            if effects.wasExecuting { announce(.willChange(Self.isExecutingKey), tap) }
            announce(.willChange(Self.isFinishedKey), tap)
            if effects.wasExecuting { announce(.didChange(Self.isExecutingKey), tap) }
            announce(.didChange(Self.isFinishedKey), tap)
            if !hooks.isEmpty {
                Trampoline.run { for hook in hooks { hook() } }
            }
        }
    }

    /// Removes the edges to dependencies that have not finished.
    ///
    /// Linux Foundation keeps a dependent as an unretained pointer in each unfinished dependency and
    /// dereferences it when that dependency finishes. An operation that finishes without executing
    /// (cancelled, skipped) can be freed before then. Removing the edge takes the dependency's own
    /// lock, the one its finish walks its dependents under, so after this call no dependency can
    /// reach this operation.
    private func dropUnfinishedDependencies() {
        let dependencies = self.dependencies
        guard !dependencies.isEmpty else { return }
        for dependency in dependencies where !dependency.isFinished {
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

    static let isExecutingKey = "isExecuting"
    static let isFinishedKey = "isFinished"

    /// Requests an outcome from `finish`: before `execute()` is entered it is remembered, while
    /// executing it ends the operation (cancellation wins), afterwards it is reported and ignored.
    func requestFinish(_ requested: Outcome<(any Sendable)?>, carriesResult: Bool) {
        enum Action {
            case remembered
            case report(Diagnostic.Kind)
            case finish(FinishEffects, droppedResult: Bool)
        }
        let action: Action = core.withLock { state in
            switch state.phase {
            case .pending, .starting:
                if state.isCancelled { return .report(.finishedAfterCancellation) }
                if state.earlyOutcome != nil { return .report(.finishedTwice) }
                state.earlyOutcome = requested
                return .remembered
            case .executing:
                if state.outcome != nil { return .report(.finishedTwice) }
                let cancelled = state.isCancelled
                let effects = state.beginFinishing(cancelled ? .cancelled : requested, wasExecuting: true)
                return .finish(effects, droppedResult: cancelled && carriesResult)
            case .finished:
                return .report(.finishedTwice)
            }
        }
        switch action {
        case .remembered:
            break
        case .report(let kind):
            Diagnostics.report(kind, self)
        case .finish(let effects, let droppedResult):
            if droppedResult { Diagnostics.report(.resultAfterCancellation, self) }
            performFinish(effects)
        }
    }

    /// What `start()` finds when it checks the dependencies, computed outside the lock.
    func dependencyVerdict(_ policy: DependencyPolicy) -> Outcome<(any Sendable)?>? {
        guard policy != .runRegardless else { return nil }
        var sawCancellation = false
        for dependency in dependencies {
            if let baton = dependency as? AsyncOperation {
                switch baton.core.withLock({ $0.outcome }) {
                case .failed(let error)? where policy == .skipOnFailureOrCancellation:
                    return .failed(BatonError.dependencyFailed(dependency: baton.reference, underlying: error))
                case .cancelled?:
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
            if state.phase == .finished { return true }
            state.finishedHooks.append(hook)
            return false
        }
        if runNow { hook() }
    }

    /// The outcome including the output as stored (`nil` output for operations without one).
    var storedOutcome: Outcome<(any Sendable)?>? {
        core.withLock { $0.phase == .finished ? $0.outcome : nil }
    }

    /// Test seam: records every KVO notification the operation sends from now on.
    func installNotificationTap(_ tap: @escaping @Sendable (Notification) -> Void) {
        core.withLock { $0.notificationTap = tap }
    }
}
