import Foundation

/// What a ``ChildGroup`` tells the operation that owns it.
protocol ChildGroupOwner: AnyObject, Sendable {
    /// One child finished (called before it is counted, so before the owner can finish).
    func childDidFinish(_ child: Operation)
    /// Every child has finished; `errors` are the children's failures in the order they happened.
    func allChildrenDidFinish(errors: [any Error])
}

/// The machinery the group operations share: an internal queue, the children, and how many are
/// still running. Children are launched when the owner executes, or at once when added later.
final class ChildGroup: @unchecked Sendable {
    let queue: OperationQueue
    let progress = SerializedProgress()
    let failurePolicy: GroupFailurePolicy
    weak var owner: (any ChildGroupOwner)?
    private let state = Mutex(State())

    private struct State {
        var children: [Operation] = []
        var identities = Set<ObjectIdentifier>()
        var isStarted = false
        var isClosed = false
        var running = 0
        var errors: [any Error] = []
        var siblingsCancelled = false
    }

    /// The first problem among the children given at creation (the owner fails with it at start).
    /// Written once, in `init`, before the group is shared.
    private(set) var configurationError: BatonError?

    init(name: String, children: [Operation], failurePolicy: GroupFailurePolicy, maxConcurrentOperationCount: Int) {
        queue = OperationQueue()
        queue.name = "Baton group \(name)"
        queue.maxConcurrentOperationCount = maxConcurrentOperationCount
        self.failurePolicy = failurePolicy
        var firstError: BatonError?
        for child in children {
            do { try add(child, owner: name) } catch { firstError = firstError ?? error }
        }
        configurationError = firstError
    }

    var children: [Operation] { state.withLock { $0.children } }
    var errors: [any Error] { state.withLock { $0.errors } }

    /// Adds a child: kept until the group executes, launched at once if it already does.
    func add(_ child: Operation, owner name: String) throws(BatonError) {
        if child.isFinished { throw .alreadyFinished(operation: child.batonName) }
        if child.isExecuting { throw .alreadyExecuting(operation: child.batonName) }
        enum Verdict { case keep, launch, closed, duplicate }
        let verdict: Verdict = state.withLock { state in
            if state.isClosed { return .closed }
            guard state.identities.insert(ObjectIdentifier(child)).inserted else { return .duplicate }
            state.children.append(child)
            guard state.isStarted else { return .keep }
            state.running += 1
            return .launch
        }
        switch verdict {
        case .closed: throw .alreadyFinished(operation: name)
        case .duplicate: throw .duplicateOperation(operation: child.batonName)
        case .keep: progress.addChild(child)
        case .launch:
            progress.addChild(child)
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
        progress.childFinished(child)
        let (cancel, finished): ([Operation], [any Error]?) = state.withLock { state in
            var cancel = [Operation]()
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
        if let finished {
            ProgressUpdates.flush()
            owner?.allChildrenDidFinish(errors: finished)
        }
    }

    /// Cancels every child that has not finished.
    func cancelAll() {
        for child in children where !child.isFinished { child.cancel() }
    }

    /// The owner finished without executing: its children will never be launched, so they are
    /// cancelled and finished here, and nobody waiting on them hangs.
    func retireAll() {
        let children: [Operation] = state.withLock { state in
            state.isClosed = true
            return state.isStarted ? [] : state.children
        }
        for child in children { child.cancelAndRetire() }
    }

    var isSuspended: Bool {
        get { queue.isSuspended }
        set { queue.isSuspended = newValue }
    }
}
