import Foundation

/// What a ``ChildGroup`` tells the operation that owns it.
protocol ChildGroupOwner: AnyObject, Sendable {
    /// Whether the owner was cancelled (a child added after that is cancelled before it is launched).
    var isCancelled: Bool { get }
    /// One child finished (called before it is counted, so before the owner can finish).
    func childDidFinish(_ child: Operation)
    /// Every child has finished; `errors` are the children's failures in the order they happened.
    func allChildrenDidFinish(errors: [any Error])
}

/// The machinery the group operations share: an internal queue, the children, and how many are
/// still running. Children are launched when the owner executes, or at once when added later.
final class ChildGroup: @unchecked Sendable {
    let queue: OperationQueue
    let failurePolicy: GroupFailurePolicy
    weak var owner: (any ChildGroupOwner)?
    private let state = Mutex(State())

    private struct State {
        var children: [Operation] = []
        var identities = Set<ObjectIdentifier>()
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

    init(name: String, children: [Operation], failurePolicy: GroupFailurePolicy, maxConcurrentOperationCount: Int) {
        queue = OperationQueue()
        queue.name = "Baton group \(name)"
        self.failurePolicy = failurePolicy
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
            for child in state.withLock({ $0.children }) { child.unclaim() }
        }
        // A child may itself be a composite holding its own children: release them in a loop, not by
        // recursion through every level's `deinit`. The array is handed over as the only reference.
        Trampoline.dispose(state.withLock { state in
            defer { state.children = [] }
            return state.children
        })
    }

    /// `nil` when `count` is a concurrency an `OperationQueue` accepts and can make progress with;
    /// otherwise why not.
    static func problem(maxConcurrentOperationCount count: Int) -> String? {
        guard count < 1 && count != OperationQueue.defaultMaxConcurrentOperationCount else { return nil }
        return "maxConcurrentOperationCount must be at least 1, or OperationQueue.defaultMaxConcurrentOperationCount; got \(count)"
    }

    var children: [Operation] { state.withLock { $0.children } }
    var errors: [any Error] { state.withLock { $0.errors } }
    var progress: Progress { state.withLock { $0.progress }.snapshot() }

    /// Adds a child: kept until the group executes, launched at once if it already does (cancelled
    /// first when the group was cancelled).
    func add(_ child: Operation, owner adder: Operation?) throws(BatonError) {
        let ownerCancelled = owner?.isCancelled ?? false
        enum Verdict { case keep, launch(cancelled: Bool), closed, duplicate }
        let verdict: Verdict = state.withLock { state in
            if state.isClosed { return .closed }
            if state.identities.contains(ObjectIdentifier(child)) { return .duplicate }
            return .keep
        }
        switch verdict {
        case .closed: throw .alreadyFinished(operation: (adder ?? child).reference)
        case .duplicate: throw .duplicateOperation(operation: child.reference)
        default: break
        }
        try child.claim()
        let decided: Verdict = state.withLock { state in
            if state.isClosed { return .closed }
            guard state.identities.insert(ObjectIdentifier(child)).inserted else { return .duplicate }
            state.children.append(child)
            state.progress.total += 1
            guard state.isStarted else { return .keep }
            state.running += 1
            return .launch(cancelled: state.isCancelled || ownerCancelled)
        }
        switch decided {
        case .closed:
            // The group finished meanwhile: the child is the caller's again, untouched.
            child.unclaim()
            throw .alreadyFinished(operation: (adder ?? child).reference)
        case .duplicate:
            throw .duplicateOperation(operation: child.reference)
        case .keep:
            break
        case .launch(let cancelled):
            if cancelled { child.cancel() }
            launch([child])
        }
    }

    /// Launches every child; `false` when there are none (the owner finishes at once).
    func start() -> Bool {
        let children: [Operation] = state.withLock { state in
            state.isStarted = true
            state.running = state.children.count
            if state.children.isEmpty { state.isClosed = true }
            return state.children
        }
        guard !children.isEmpty else { return false }
        launch(children)
        return true
    }

    private func launch(_ children: [Operation]) {
        for child in children {
            child.observeCompletion { self.childFinished(child) }
        }
        queue.launch(children)
    }

    private func childFinished(_ child: Operation) {
        let outcome = child.observedOutcome
        owner?.childDidFinish(child)
        let (cancel, finished): ([Operation], [any Error]?) = state.withLock { state in
            var cancel = [Operation]()
            state.progress.completed += 1
            if case .failed(let error) = outcome {
                state.errors.append(error)
                if failurePolicy == .cancelSiblingsOnFailure && !state.siblingsCancelled {
                    state.siblingsCancelled = true
                    cancel = state.children
                }
            }
            state.running -= 1
            guard state.running == 0, state.isStarted, !state.isClosed else { return (cancel, nil) }
            state.isClosed = true
            return (cancel, state.errors)
        }
        for sibling in cancel where !sibling.isFinished { sibling.cancel() }
        if let finished { owner?.allChildrenDidFinish(errors: finished) }
    }

    /// Cancels every child that has not finished, and every child added from now on. A suspended
    /// queue is resumed: its cancelled children must start to finish.
    func cancelAll() {
        let children: [Operation] = state.withLock { state in
            state.isCancelled = true
            state.suspensionVersion += 1
            return state.children
        }
        for child in children where !child.isFinished { child.cancel() }
        applySuspension()
    }

    /// The owner finished without executing: closes the group and hands back the children it will
    /// never launch, for the owner to retire.
    func takeUnlaunched() -> [Operation] {
        state.withLock { state in
            state.isClosed = true
            return state.isStarted ? [] : state.children
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
