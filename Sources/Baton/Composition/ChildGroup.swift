import Foundation

/// What a ``ChildGroup`` tells the operation that owns it.
protocol ChildGroupOwner: AnyObject, Sendable {
    /// Whether the owner was cancelled (a child added after that is cancelled before it is launched).
    var isCancelled: Bool { get }
    /// One child finished (called before it is counted, so before the owner can finish); `index` is
    /// its position in the order children were added. The group lets go of it right after, unless it
    /// keeps finished children.
    func childFinished(_ child: Operation, index: Int)
    /// Every child has finished; `errors` are the children's failures in the order they happened.
    func allChildrenDidFinish(errors: [any Error])
}

/// The machinery the group operations share: an internal queue, the children, and how many are
/// still running. Children are launched when the owner executes, or at once when added later.
///
/// The group holds a child only until it has finished and the owner has seen it (`childFinished`),
/// unless `keepsFinishedChildren`: a group of many children that produce large outputs then holds only
/// those still running or waiting.
final class ChildGroup: @unchecked Sendable {
    let queue: ChildQueue
    let failurePolicy: GroupFailurePolicy
    let keepsFinishedChildren: Bool
    weak var owner: (any ChildGroupOwner)? {
        didSet { queue.owner = owner as? AsyncOperation }
    }
    private let state = Mutex(State())

    private struct State {
        /// Every child by its position in the order of addition, `nil` once it has finished and the
        /// owner has seen it. An array, not a table by identity: a lookup costs nothing, and hashing
        /// each child in and out was 2% of a group's instructions (callgrind). Finding a child by
        /// identity is only needed to name a duplicate, after its claim was refused.
        var live: [Operation?] = []
        /// The children added before the group started, in order, with their positions: launched by
        /// `start()`.
        var unlaunched: [(index: Int, operation: Operation)] = []
        /// Every child, in order, when the group keeps finished children.
        var kept: [Operation] = []
        var isStarted = false
        var isClosed = false
        /// Cancelled: every child launched from now on is cancelled first, and suspension is over.
        var isCancelled = false
        var running = 0
        var errors: [any Error] = []
        var siblingsCancelled = false
        var progress = ProgressCount()
        /// What the user asked with `suspend()`/`resume()`; cancellation overrides it.
        var suspendRequested = false
        /// Bumped whenever the queue's suspension must change, so that concurrent appliers converge.
        var suspensionVersion = 0

        var queueShouldBeSuspended: Bool { suspendRequested && !isCancelled }
    }

    /// Why the concurrency given at creation is invalid, and the first problem among the children
    /// given at creation (the owner fails with them at start). Written once, in `init`, before the
    /// group is shared.
    private let concurrencyProblem: String?
    private var childProblem: BatonError?

    init(
        name: String, children: [Operation], failurePolicy: GroupFailurePolicy, maxConcurrentOperationCount: Int,
        keepsFinishedChildren: Bool
    ) {
        queue = ChildQueue()
        queue.name = "Baton group \(name)"
        self.failurePolicy = failurePolicy
        self.keepsFinishedChildren = keepsFinishedChildren
        concurrencyProblem = ChildGroup.problem(maxConcurrentOperationCount: maxConcurrentOperationCount)
        if concurrencyProblem == nil { queue.maxConcurrentOperationCount = maxConcurrentOperationCount }
        for child in children {
            do { try add(child, owner: nil) } catch { childProblem = childProblem ?? error }
        }
    }

    /// The error the owner fails with at start, if its arguments or its first children were invalid.
    func configurationError(of owner: Operation) -> BatonError? {
        if let concurrencyProblem { return .invalidArgument(operation: owner.reference, reason: concurrencyProblem) }
        return childProblem
    }

    deinit {
        // Freed without launching them (the group never ran): they are free for another owner again.
        if !state.withLock({ $0.isStarted }) {
            for child in state.withLock({ $0.unlaunched }) { child.operation.unclaim() }
        }
        // A child may itself be a composite holding its own children: release them in a loop, not by
        // recursion through every level's `deinit`. The state is handed over as the only reference.
        Trampoline.dispose(
            state.withLock { state in
                defer { state = State() }
                return state
            })
    }

    /// `nil` when `count` is a concurrency an `OperationQueue` accepts and can make progress with;
    /// otherwise why not.
    static func problem(maxConcurrentOperationCount count: Int) -> String? {
        guard count < 1 && count != OperationQueue.defaultMaxConcurrentOperationCount else { return nil }
        return
            "maxConcurrentOperationCount must be at least 1, or OperationQueue.defaultMaxConcurrentOperationCount; got \(count)"
    }

    /// The children the group holds, in the order they were added: those not finished, or every one
    /// when it keeps finished children.
    var children: [Operation] {
        state.withLock { state in
            keepsFinishedChildren ? state.kept : state.live.compactMap { $0 }
        }
    }
    var errors: [any Error] { state.withLock { $0.errors } }
    var progress: Progress { state.withLock { $0.progress }.snapshot() }

    /// Adds a child: kept until the group executes, launched at once if it already does (cancelled
    /// first when the group was cancelled).
    func add(_ child: Operation, owner adder: Operation?) throws(BatonError) {
        let ownerCancelled = owner?.isCancelled ?? false
        enum Verdict {
            case keep
            case launch(index: Int, cancelled: Bool)
            case closed
        }
        if state.withLock({ $0.isClosed }) { throw .alreadyFinished(operation: (adder ?? child).reference) }
        do {
            try child.claim()
        } catch {
            // Refused: a child this group already holds is claimed by it (or running, or finishing).
            let held = state.withLock { $0.live.contains { $0 === child } }
            throw held ? .duplicateOperation(operation: child.reference) : error
        }
        let decided: Verdict = state.withLock { state in
            if state.isClosed { return .closed }
            let index = state.live.count
            state.live.append(child)
            if keepsFinishedChildren { state.kept.append(child) }
            state.progress.total += 1
            guard state.isStarted else {
                state.unlaunched.append((index, child))
                return .keep
            }
            state.running += 1
            // A group that cancelled its children after a failure cancels late ones too.
            return .launch(index: index, cancelled: state.isCancelled || state.siblingsCancelled || ownerCancelled)
        }
        switch decided {
        case .closed:
            // The group finished meanwhile: the child is the caller's again, untouched.
            child.unclaim()
            throw .alreadyFinished(operation: (adder ?? child).reference)
        case .keep:
            break
        case .launch(let index, let cancelled):
            if cancelled { child.cancelHeld() }
            launch([(index, child)])
        }
    }

    /// Launches every child; `false` when there are none (the owner finishes at once).
    func start() -> Bool {
        let children: [(index: Int, operation: Operation)] = state.withLock { state in
            state.isStarted = true
            state.running = state.unlaunched.count
            if state.unlaunched.isEmpty { state.isClosed = true }
            defer { state.unlaunched = [] }
            return state.unlaunched
        }
        guard !children.isEmpty else { return false }
        launch(children)
        return true
    }

    private func launch(_ children: [(index: Int, operation: Operation)]) {
        // Recorded first: a Foundation child's record is finished before the group hears of it.
        if let recording = (owner as? AsyncOperation)?.recording {
            for (index, child) in children { recording.adopt(child, position: index) }
        }
        for (index, child) in children {
            child.observeCompletion { self.childFinished(child, index: index) }
        }
        queue.launch(children.map(\.operation))
    }

    private func childFinished(_ child: Operation, index: Int) {
        let failure = child.observedSharedOutcome.error
        owner?.childFinished(child, index: index)
        let (cancel, finished): ([Operation], [any Error]?) = state.withLock { state in
            var cancel = [Operation]()
            // Handed on: the owner has seen it. Only a group that keeps finished children holds it now.
            state.live[index] = nil
            state.progress.completed += 1
            if let error = failure {
                state.errors.append(error)
                if failurePolicy == .cancelSiblingsOnFailure && !state.siblingsCancelled {
                    state.siblingsCancelled = true
                    cancel = state.live.compactMap { $0 }
                }
            }
            state.running -= 1
            guard state.running == 0, state.isStarted, !state.isClosed else { return (cancel, nil) }
            state.isClosed = true
            return (cancel, state.errors)
        }
        for sibling in cancel where !sibling.isFinished { sibling.cancelHeld() }
        if let finished { owner?.allChildrenDidFinish(errors: finished) }
    }

    /// Cancels every child that has not finished, and every child added from now on. A suspended
    /// queue is resumed: its cancelled children must start to finish.
    func cancelAll() {
        let children: [Operation] = state.withLock { state in
            state.isCancelled = true
            state.suspensionVersion += 1
            return state.live.compactMap { $0 }
        }
        for child in children where !child.isFinished { child.cancelHeld() }
        applySuspension()
    }

    /// The owner finished without executing: closes the group and hands back the children it will
    /// never launch, for the owner to retire.
    func takeUnlaunched() -> [Operation] {
        state.withLock { state in
            state.isClosed = true
            defer { state.unlaunched = [] }
            return state.unlaunched.map(\.operation)
        }
    }

    /// Whether the internal queue holds back children. Ignored once the group was cancelled.
    var isSuspended: Bool {
        get { state.withLock { $0.queueShouldBeSuspended } }
        set {
            state.withLock { state in
                state.suspendRequested = newValue
                state.suspensionVersion += 1
            }
            applySuspension()
        }
    }

    /// Makes the queue's suspension match the state. Foundation is not called under Baton's lock, so
    /// two appliers may interleave: each re-applies until the version it applied is still current,
    /// so the last write always carries the latest decision.
    private func applySuspension() {
        while true {
            let (version, suspended) = state.withLock { ($0.suspensionVersion, $0.queueShouldBeSuspended) }
            queue.isSuspended = suspended
            if state.withLock({ $0.suspensionVersion == version }) { return }
        }
    }
}
