import Baton
import Dispatch
import Foundation

/// The shapes a batch is made of; the seed picks them by weight.
enum Scenario: String, CaseIterable, Sendable {
    case plain, chain, group
    case resultGroup = "result-group"
    case suspendResume = "suspend-resume"
    case suspendCancel = "suspend-cancel"
    case sequence, generator, retry, tree, nested
    case lateChildren = "late-children"
    case rerunCancel = "rerun-cancel"
    case waits
    case foundationDependencies = "foundation-dependencies"
    case mainThread = "main-thread"
    case gated

    var weight: Int {
        switch self {
        case .plain: return 30
        case .chain: return 12
        case .group: return 10
        case .resultGroup: return 8
        case .suspendResume: return 4
        case .suspendCancel: return 2
        case .sequence: return 8
        case .generator: return 6
        case .retry: return 8
        case .tree: return 5
        case .nested: return 5
        case .lateChildren: return 5
        case .rerunCancel: return 6
        case .waits: return 3
        case .foundationDependencies: return 4
        case .mainThread: return 3
        case .gated: return 8
        }
    }
}

/// Builds one batch on the calling thread, enqueueing each scenario's root on the shared queue as
/// soon as it is built, and holds the operations it made until the batch has been checked.
final class BatchBuilder {
    private var random: SplitMix64
    private let ledger: Ledger
    private let queue: OperationQueue
    private let scenarios: [Scenario]
    private let totalWeight: Int
    /// Strong references for the duration of the batch.
    private var held: [AnyObject] = []
    /// Things to do once the scenario's root is enqueued (cancellations, resumes, late children).
    private var actions: [() -> Void] = []
    private(set) var scenarioCounts: [Scenario: Int] = [:]
    /// The gated scenario's categories, in a scope of this batch's own: two exclusive, one limited to
    /// three; with the ledger's lane for each.
    private lazy var gates: Gates = Gates(ledger: ledger)

    init(seed: UInt64, ledger: Ledger, queue: OperationQueue, scenarios: [Scenario]) {
        random = SplitMix64(seed: seed)
        self.ledger = ledger
        self.queue = queue
        self.scenarios = scenarios
        totalWeight = scenarios.reduce(0) { $0 + $1.weight }
    }

    /// Builds scenarios until `target` operations (leaves and composites) have been made.
    func build(target: Int) {
        while ledger.created < target {
            var roll = random.int(0...(totalWeight - 1))
            var chosen = scenarios[0]
            for scenario in scenarios {
                if roll < scenario.weight {
                    chosen = scenario
                    break
                }
                roll -= scenario.weight
            }
            scenarioCounts[chosen, default: 0] += 1
            build(chosen)
        }
    }

    /// Drops every strong reference the builder holds, once the waiters of this batch are done (so
    /// that their backlog cannot grow from batch to batch).
    func release() {
        Self.waiters.sync {}
        held = []
        actions = []
    }

    // MARK: - Scenarios

    private func build(_ scenario: Scenario) {
        switch scenario {
        case .plain:
            let leaves: [Operation] = (0..<random.int(1...8)).map { _ in leaf(parent: nil, root: true, scenario: .plain) }
            enqueue(leaves)
        case .chain:
            chain()
        case .group:
            enqueue([group(root: true, parent: nil, scenario: .group, depth: 0).operation])
        case .resultGroup:
            enqueue([resultGroup(root: true, parent: nil, scenario: .resultGroup, depth: 0)])
        case .suspendResume:
            suspended(cancel: false)
        case .suspendCancel:
            suspended(cancel: true)
        case .sequence:
            enqueue([sequence(root: true, parent: nil, scenario: .sequence)])
        case .generator:
            enqueue([generator(root: true, parent: nil, scenario: .generator)])
        case .retry:
            enqueue([retry(root: true, parent: nil, scenario: .retry)])
        case .tree:
            enqueue([tree(root: true, parent: nil, scenario: .tree)])
        case .nested:
            let depth = random.int(2...3)
            let root: Operation
            switch random.int(0...2) {
            case 0: root = group(root: true, parent: nil, scenario: .nested, depth: depth).operation
            case 1: root = voidSequence(root: true, parent: nil, scenario: .nested, depth: depth)
            default: root = resultGroup(root: true, parent: nil, scenario: .nested, depth: depth)
            }
            enqueue([root])
        case .lateChildren:
            lateChildren()
        case .rerunCancel:
            enqueue((0..<random.int(1...4)).map { _ in rerunLeaf(scenario: .rerunCancel) })
        case .waits:
            waits()
        case .foundationDependencies:
            foundationDependencies()
        case .mainThread:
            mainThread()
        case .gated:
            gated()
        }
    }

    /// A queue whose dispatch queue is the main queue (the main thread pumps it while it waits for the
    /// batch).
    private static let mainThreadQueue: OperationQueue = {
        let queue = OperationQueue()
        queue.name = "baton-stress main-thread queue"
        queue.underlyingQueue = DispatchQueue.main
        return queue
    }()

    /// Leaves and a chain on a queue that runs on the main thread (`OperationQueue.main`, or one whose
    /// dispatch queue is the main queue), with starts by hand on the main thread of the chain's stages
    /// while they wait there: only the queue's own start may run them.
    private func mainThread() {
        let target = random.chance(0.5) ? OperationQueue.main : Self.mainThreadQueue
        let leaves = (0..<random.int(1...3)).map { _ in leaf(parent: nil, root: true, scenario: .mainThread) }
        target.addOperations(leaves, waitUntilFinished: false)
        chain(on: target, scenario: .mainThread)
        // `chain(on:)` ran the planned cancellations; the intruders come on top.
        for case let stage as AsyncOperation in held.suffix(6) where random.chance(0.3) {
            DispatchQueue.main.async { stage.start() }
        }
    }

    /// A block operation that reruns its body one to four times, from inside the body or from another
    /// thread, while cancellations arrive from other threads: the body must never run on a decided
    /// operation, and the operation must end exactly once.
    private func rerunLeaf(scenario: Scenario) -> AsyncOperation {
        let id = ledger.register(.blockLeaf, root: true, parent: nil, scenario: scenario)
        let ledger = self.ledger
        let reruns = random.int(1...4)
        let fromOutside = random.chance(0.5)
        let runs = Locked(0)
        let operation = AsyncBlockOperation { operation in
            let run = runs.withLock { runs -> Int in
                runs += 1
                return runs
            }
            let finishedAlready = operation.isFinished || operation.outcome != nil
            if run == 1 {
                ledger.noteExecute(id, finishedAlready: finishedAlready)
            } else {
                ledger.noteRerun(id, finishedAlready: finishedAlready)
            }
            if operation.isCancelled || run > reruns { return operation.finish() }
            guard fromOutside else { return operation.rerun() }
            DispatchQueue.global().async {
                operation.rerun()
                // A cancellation that landed while no call was inside makes the rerun moot (a block
                // operation has no `didCancel()`): whoever sees it finishes.
                if operation.isCancelled { operation.finish() }
            }
        }
        ledger.bind(id, operation)
        held.append(operation)
        scheduleCancel(operation, after: random.chance(0.6) ? random.int(0...400) : nil)
        return operation
    }

    /// The categories and shared conditions of one batch's gated operations.
    struct Gates {
        let categories: [(category: OperationCategory, lane: Int, exclusive: Bool)]
        /// A condition whose produced operation many leaves share.
        let warm: Condition
        /// A flag set once the batch is enqueued.
        let flag = ConditionFlag("batch enqueued")

        init(ledger: Ledger) {
            let scope = ExclusivityScope("baton-stress")
            try! scope.setLimit(3, for: "z")
            categories = [("x", 1), ("y", 1), ("z", 3)].map { name, limit in
                (OperationCategory(name, in: scope), ledger.newLane(limit: limit), limit == 1)
            }
            warm = Condition("warm", producing: { _ in BlockOperation {} }) { _, answer in answer(.satisfied) }
        }
    }

    /// Leaves with conditions and categories: in the shared queue (each announced through `isReady`
    /// when granted), in a group (held out of its queue until granted), or under a group that holds
    /// an exclusive category its children claim too (they take it in the group's lane). The ledger
    /// checks that no lane ever has more leaves executing than its limit.
    private func gated() {
        // Set once the scenario is enqueued (`enqueue` runs the actions).
        let flag = gates.flag
        actions.append { DispatchQueue.global().async { flag.set() } }
        switch random.int(0...2) {
        case 0:
            enqueue((0..<random.int(1...6)).map { _ in gatedLeaf(parent: nil, root: true, inherited: nil) })
        case 1:
            let id = ledger.register(.group, root: true, parent: nil, scenario: .gated)
            let children = (0..<random.int(1...8)).map { _ in gatedLeaf(parent: id, root: false, inherited: nil) }
            let group = StressGroup(ledger, operations: children, failurePolicy: failurePolicy(), maxConcurrent: maxConcurrent())
            ledger.bind(id, group)
            decorate(group)
            enqueue([group])
        default:
            let exclusive = gates.categories.filter(\.exclusive)
            let held = exclusive[random.int(0...(exclusive.count - 1))]
            let id = ledger.register(.group, root: true, parent: nil, scenario: .gated)
            let children = (0..<random.int(1...6)).map { _ in gatedLeaf(parent: id, root: false, inherited: held) }
            let group = StressGroup(ledger, operations: children, failurePolicy: failurePolicy(), maxConcurrent: maxConcurrent())
            try! group.addExclusivity(held.category)
            ledger.bind(id, group)
            decorate(group)
            enqueue([group])
        }
    }

    /// A leaf with random categories and conditions. `inherited` is a category its parent group holds:
    /// the leaf claims it too, and executing counts in the category's top-level lane (the group's
    /// children share the group's one place there).
    private func gatedLeaf(
        parent: Int?, root: Bool, inherited: (category: OperationCategory, lane: Int, exclusive: Bool)?
    )
        -> AsyncOperation
    {
        var plan = leafPlan()
        var claims = inherited.map { [$0] } ?? []
        for candidate in gates.categories where random.chance(0.4) && candidate.lane != inherited?.lane {
            claims.append(candidate)
        }
        if random.chance(0.5) { claims.reverse() }
        plan.lanes = claims.map(\.lane)
        let leaf: AsyncOperation =
            random.chance(0.5)
            ? VoidLeaf(ledger, plan, root: root, parent: parent, scenario: root ? .gated : nil)
            : IntLeaf(ledger, plan, root: root, parent: parent, scenario: root ? .gated : nil)
        try! leaf.addExclusivity(claims.map(\.category))
        let roll = random.int(0...99)
        if roll < 20 {
            try! leaf.addCondition(.block("yes") { true })
        } else if roll < 30 {
            try! leaf.addCondition(Condition("async yes") { _ in .satisfied })
        } else if roll < 35 {
            try! leaf.addCondition(.block("no") { false })
        } else if roll < 40 {
            try! leaf.addCondition(.block("refused") { throw StressFailure(code: -1) })
        } else if roll < 55 {
            try! leaf.addCondition(gates.warm)
        } else if roll < 60 {
            try! leaf.addCondition(.waitUntil(gates.flag, timeout: .seconds(30)))
        }
        plannedCancel(leaf)
        held.append(leaf)
        return leaf
    }

    private static let waiters = DispatchQueue(label: "baton-stress waiters")

    /// A leaf that takes a while, with waiters that give up on it by the hundred: blocking waits with
    /// tiny timeouts and `value` awaits whose tasks are cancelled. The waits must leave nothing behind
    /// (the RSS check) and change nothing about the leaf.
    private func waits() {
        var plan = leafPlan()
        plan.finish = .after(microseconds: random.int(2_000...10_000))
        plan.timeout = nil
        let leaf = VoidLeaf(ledger, plan, root: true, parent: nil, scenario: .waits)
        plannedCancel(leaf)
        held.append(leaf)
        let blocking = random.int(10...100)
        let awaits = random.int(0...3)
        // Timeouts that run out at once or nearly: a timed semaphore wait costs far more than a few
        // microseconds, and a backlog of waiters would hold their leaves and grow the process.
        let timeout = random.int(0...2)
        enqueue([leaf])
        // One waiting thread for all of them: a blocked thread per leaf would make libdispatch grow
        // hundreds of threads, which measures the thread pool, not Baton.
        Self.waiters.async {
            for _ in 0..<blocking { _ = try? leaf.wait(timeout: .microseconds(timeout)) }
        }
        for _ in 0..<awaits {
            let task = Task { try await leaf.value }
            DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(timeout)) { task.cancel() }
        }
    }

    /// A `BlockOperation` that depends on an operation outside its chain or group, which is then
    /// cancelled (or not) while that dependency runs: Baton must never let the Foundation operation
    /// be freed while the dependency still points at it.
    private func foundationDependencies() {
        var outsidePlan = leafPlan()
        outsidePlan.finish = .after(microseconds: random.int(0...2_000))
        let outside = VoidLeaf(ledger, outsidePlan, root: true, parent: nil, scenario: .foundationDependencies)
        held.append(outside)
        let stage = BlockOperation {}
        stage.addDependency(outside)
        let cancelAfter = random.chance(0.7) ? random.int(0...1_000) : nil
        if random.chance(0.5) {
            let id = ledger.register(.chain, root: true, parent: nil, scenario: .foundationDependencies)
            let first = VoidLeaf(ledger, leafPlan(), parent: nil)
            let last = VoidLeaf(ledger, leafPlan(), parent: nil)
            held.append(contentsOf: [first, last])
            do {
                let handle = try queue.addChain([first, stage, last])
                handle.onFinish { [ledger] outcome in ledger.recordOutcome(id, OutcomeTag(outcome)) }
                held.append(handle)
                if let cancelAfter {
                    DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(cancelAfter)) { handle.cancel() }
                }
            } catch {
                ledger.count(.unexpectedError, detail: "\(error)")
                [id, first.id, last.id].forEach(ledger.discard)
            }
            enqueue([outside])
        } else {
            let groupID = ledger.register(.group, root: true, parent: nil, scenario: .foundationDependencies)
            let child = VoidLeaf(ledger, leafPlan(), parent: groupID)
            let group = StressGroup(ledger, operations: [stage, child], failurePolicy: .continueOnFailure, maxConcurrent: -1)
            ledger.bind(groupID, group)
            held.append(contentsOf: [child, group])
            scheduleCancel(group, after: cancelAfter)
            enqueue([outside, group])
        }
    }

    private func enqueue(_ roots: [Operation]) {
        queue.addOperations(roots, waitUntilFinished: false)
        let pending = actions
        actions = []
        for action in pending { action() }
    }

    private func chain(on target: OperationQueue? = nil, scenario: Scenario = .chain) {
        let id = ledger.register(.chain, root: true, parent: nil, scenario: scenario)
        let length = random.int(2...6)
        let first = IntLeaf(ledger, leafPlan(), parent: nil)
        var operations: [AsyncOperation] = [first]
        var ids = [first.id]
        for _ in 1..<length {
            let step = StepLeaf(ledger, leafPlan(), parent: nil)
            if random.chance(0.1) { step.dependencyPolicy = random.chance(0.5) ? .runRegardless : .skipOnCancellation }
            operations.append(step)
            ids.append(step.id)
        }
        for operation in operations { plannedCancel(operation) }
        let expected = first.plan.value + length - 1
        let cancelChain = random.chance(0.05) ? random.int(0...1_000) : nil
        do {
            let handle = try (target ?? queue).addChain(operations)
            handle.onFinish { [ledger] outcome in
                if case .succeeded(let value) = outcome, (value as? Int) != expected {
                    ledger.count(.wrongOutput, detail: "chain of \(length) ended with \(value), expected \(expected)")
                }
                ledger.recordOutcome(id, OutcomeTag(outcome))
            }
            held.append(handle)
            held.append(contentsOf: operations)
            if let cancelChain {
                DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(cancelChain)) { handle.cancel() }
            }
        } catch {
            ledger.count(.unexpectedError)
            ledger.discard(id)
            ids.forEach(ledger.discard)
        }
        let pending = actions
        actions = []
        for action in pending { action() }
    }

    private func suspended(cancel: Bool) {
        let target: AsyncOperation
        let suspend: () -> Void
        let resume: @Sendable () -> Void
        let scenario: Scenario = cancel ? .suspendCancel : .suspendResume
        if random.chance(0.5) {
            let plain = group(root: true, parent: nil, scenario: scenario, depth: 0).operation
            target = plain
            suspend = { plain.suspend() }
            resume = { plain.resume() }
        } else {
            let typed = resultGroup(root: true, parent: nil, scenario: scenario, depth: 0)
            target = typed
            suspend = { typed.suspend() }
            resume = { typed.resume() }
        }
        let suspendFirst = random.chance(0.5)
        if suspendFirst { suspend() }
        let delay = random.int(0...2_000)
        let resumeAfterCancel = random.chance(0.5)
        queue.addOperation(target)
        if !suspendFirst { suspend() }
        if cancel {
            DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(delay)) {
                target.cancel()
                if resumeAfterCancel {
                    DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(500)) { resume() }
                }
            }
        } else {
            DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(delay), execute: { resume() })
        }
        let pending = actions
        actions = []
        for action in pending { action() }
    }

    private func lateChildren() {
        let (lateGroup, groupID) = group(root: true, parent: nil, scenario: .lateChildren, depth: 0)
        if random.chance(0.3) {
            let early = VoidLeaf(ledger, leafPlan(), parent: groupID)
            do { try lateGroup.addChild(early) } catch {
                ledger.count(.unexpectedError)
                ledger.discard(early.id)
            }
            plannedCancel(early)
            held.append(early)
        }
        let plans = (0..<random.int(1...4)).map { _ in leafPlan() }
        let delay = random.int(0...1_500)
        let ledger = self.ledger
        enqueue([lateGroup])
        DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(delay)) {
            for plan in plans {
                let child = VoidLeaf(ledger, plan, parent: nil, role: .lateChild)
                do {
                    try lateGroup.addChild(child)
                    ledger.adopt(child.id, parent: groupID)
                    scheduleCancel(child, after: plan.cancelAfter)
                } catch {
                    // Allowed once the group has finished; anything else is a violation.
                    if case .alreadyFinished? = error as? BatonError {} else { ledger.count(.unexpectedError) }
                    ledger.discard(child.id)
                }
            }
        }
    }

    // MARK: - Building blocks

    private func leafPlan() -> LeafPlan {
        let fails = random.chance(0.1)
        var timeout: Double? = random.chance(0.05) ? random.double(0.0005...0.01) : nil
        let finish: LeafPlan.Finish
        let roll = random.int(0...99)
        if roll < 35 {
            finish = .synchronously
        } else if roll < 97 {
            let long = timeout != nil && random.chance(0.5)
            finish = .after(microseconds: long ? random.int(0...20_000) : random.int(0...300))
        } else {
            finish = .whenCancelled
            if timeout == nil { timeout = random.double(0.0005...0.01) }
        }
        let cancelAfter: Int? = random.chance(0.06) ? (random.chance(0.3) ? 0 : random.int(1...1_000)) : nil
        return LeafPlan(
            finish: finish, fails: fails, finishesTwice: random.chance(0.02),
            cancelFinishesAsynchronously: random.chance(0.5), value: random.int(0...1_000_000),
            timeout: timeout, cancelAfter: cancelAfter)
    }

    /// An eager leaf; its planned cancellation fires once the scenario's root is enqueued.
    private func leaf(parent: Int?, root: Bool = false, scenario: Scenario? = nil) -> AsyncOperation {
        let plan = leafPlan()
        let leaf: AsyncOperation =
            random.chance(0.5)
            ? VoidLeaf(ledger, plan, root: root, parent: parent, scenario: scenario)
            : IntLeaf(ledger, plan, root: root, parent: parent, scenario: scenario)
        plannedCancel(leaf)
        held.append(leaf)
        return leaf
    }

    private func intLeaf(parent: Int?) -> IntLeaf {
        let leaf = IntLeaf(ledger, leafPlan(), parent: parent)
        plannedCancel(leaf)
        held.append(leaf)
        return leaf
    }

    private func plannedCancel(_ operation: AsyncOperation) {
        guard let leaf = operation as? any StressLeaf, let after = leaf.plan.cancelAfter else { return }
        actions.append { scheduleCancel(operation, after: after) }
    }

    /// Random timeout and cancellation of a composite.
    private func decorate(_ composite: AsyncOperation) {
        held.append(composite)
        if random.chance(0.03) { composite.timeout = .seconds(random.double(0.0005...0.01)) }
        if random.chance(0.05) {
            let after = random.chance(0.3) ? 0 : random.int(1...2_000)
            actions.append { scheduleCancel(composite, after: after) }
        }
    }

    private func maxConcurrent() -> Int {
        random.chance(0.5) ? OperationQueue.defaultMaxConcurrentOperationCount : random.int(1...4)
    }

    private func failurePolicy() -> GroupFailurePolicy {
        random.chance(0.3) ? .cancelSiblingsOnFailure : .continueOnFailure
    }

    /// A child for a composite: a leaf, or (while `depth` allows) another composite.
    private func child(depth: Int, parent: Int) -> Operation {
        if depth <= 0 || random.chance(0.5) { return leaf(parent: parent) }
        switch random.int(0...5) {
        case 0: return group(root: false, parent: parent, scenario: .nested, depth: depth - 1).operation
        case 1: return voidSequence(root: false, parent: parent, scenario: .nested, depth: depth - 1)
        case 2: return resultGroup(root: false, parent: parent, scenario: .nested, depth: depth - 1)
        case 3: return retry(root: false, parent: parent, scenario: .nested)
        case 4: return generator(root: false, parent: parent, scenario: .nested)
        default: return tree(root: false, parent: parent, scenario: .nested)
        }
    }

    /// An `Int`-producing child for a typed group.
    private func intChild(depth: Int, parent: Int) -> ResultOperation<Int> {
        if depth <= 0 || random.chance(0.5) { return intLeaf(parent: parent) }
        switch random.int(0...2) {
        case 0: return retry(root: false, parent: parent, scenario: .nested)
        case 1: return sequence(root: false, parent: parent, scenario: .nested)
        default: return generator(root: false, parent: parent, scenario: .nested)
        }
    }

    private func group(root: Bool, parent: Int?, scenario: Scenario, depth: Int) -> (operation: StressGroup, id: Int) {
        let id = ledger.register(.group, root: root, parent: parent, scenario: scenario)
        let children = (0..<random.int(1...6)).map { _ in child(depth: depth, parent: id) }
        let group = StressGroup(ledger, operations: children, failurePolicy: failurePolicy(), maxConcurrent: maxConcurrent())
        ledger.bind(id, group)
        decorate(group)
        return (group, id)
    }

    private func resultGroup(root: Bool, parent: Int?, scenario: Scenario, depth: Int) -> ResultGroupOperation<Int> {
        let id = ledger.register(.resultGroup, root: root, parent: parent, scenario: scenario)
        let children = (0..<random.int(1...6)).map { _ in intChild(depth: depth, parent: id) }
        let expected = children.compactMap { ($0 as? IntLeaf)?.plan.value }
        let group = ResultGroupOperation<Int>(
            operations: children, failurePolicy: failurePolicy(),
            maxConcurrentOperationCount: maxConcurrent())
        ledger.bind(id, group)
        if expected.count == children.count {
            group.onFinish { [ledger] result in
                if case .succeeded(let values) = result, values != expected {
                    ledger.count(
                        .wrongOutput,
                        detail: "ResultGroupOperation gave \(values.count) values, expected \(expected.count) in order")
                }
            }
        }
        decorate(group)
        return group
    }

    /// A list sequence of an `IntLeaf` and `StepLeaf`s: succeeded, it yields first value + steps.
    private func sequence(root: Bool, parent: Int?, scenario: Scenario) -> StressSequence<Int> {
        let id = ledger.register(.sequence, root: root, parent: parent, scenario: scenario)
        let length = random.int(1...5)
        let first = intLeaf(parent: id)
        var operations: [Operation] = [first]
        for _ in 1..<length {
            let step = StepLeaf(ledger, leafPlan(), parent: id)
            plannedCancel(step)
            held.append(step)
            operations.append(step)
        }
        let sequence = StressSequence<Int>(ledger, operations: operations)
        ledger.bind(id, sequence)
        let expected = first.plan.value + length - 1
        sequence.onFinish { [ledger] result in
            if case .succeeded(let value) = result, value != expected {
                ledger.count(
                    .wrongOutput,
                    detail: "list sequence of \(length) applied \(value - expected + length - 1) of its \(length - 1) increments")
            }
        }
        decorate(sequence)
        return sequence
    }

    /// A list sequence of any children (outputs ignored), for nesting.
    private func voidSequence(root: Bool, parent: Int?, scenario: Scenario, depth: Int) -> StressSequence<Void> {
        let id = ledger.register(.sequence, root: root, parent: parent, scenario: scenario)
        let children = (0..<random.int(1...4)).map { _ in child(depth: depth, parent: id) }
        let sequence = StressSequence<Void>(ledger, operations: children)
        ledger.bind(id, sequence)
        decorate(sequence)
        return sequence
    }

    /// A generator sequence: an `IntLeaf`, then `StepLeaf`s made on the fly.
    private func generator(root: Bool, parent: Int?, scenario: Scenario) -> StressSequence<Int> {
        let id = ledger.register(.generatorSequence, root: root, parent: parent, scenario: scenario)
        let length = random.int(1...5)
        let first = intLeaf(parent: id)
        let plans = (1..<max(1, length)).map { _ in leafPlan() }
        let made = Locked(0)
        let ledger = self.ledger
        let sequence = StressSequence<Int>(ledger, first: first) { _ in
            let index = made.withLock { count -> Int in
                defer { count += 1 }
                return count
            }
            guard index < plans.count else { return nil }
            let step = StepLeaf(ledger, plans[index], parent: nil, role: .generatorStep)
            scheduleCancel(step, after: plans[index].cancelAfter)
            return step
        }
        ledger.bind(id, sequence)
        let expected = first.plan.value + length - 1
        sequence.onFinish { result in
            if case .succeeded(let value) = result, value != expected {
                ledger.count(
                    .wrongOutput,
                    detail:
                        "generator sequence of \(length) applied \(value - expected + length - 1) of its \(length - 1) increments"
                )
            }
        }
        decorate(sequence)
        return sequence
    }

    private func retry(root: Bool, parent: Int?, scenario: Scenario) -> RetryOperation<Int> {
        let id = ledger.register(.retry, root: root, parent: parent, scenario: scenario)
        let attempts = random.int(1...4)
        let plans: [LeafPlan] = (0..<attempts).map { _ in
            var plan = leafPlan()
            plan.fails = random.chance(0.5)
            return plan
        }
        let delay: RetryDelay = random.chance(0.7) ? .immediate : .fixed(.seconds(random.double(0.0001...0.001)))
        let ledger = self.ledger
        let retry = RetryOperation<Int>(maximumAttempts: attempts, delay: delay) { number in
            let plan = plans[min(max(number, 1), plans.count) - 1]
            let leaf = IntLeaf(ledger, plan, parent: nil, role: .retryAttempt)
            scheduleCancel(leaf, after: plan.cancelAfter)
            return leaf
        }
        ledger.bind(id, retry)
        let values = Set(plans.filter { !$0.fails }.map(\.value))
        retry.onFinish { result in
            if case .succeeded(let value) = result, !values.contains(value) {
                ledger.count(.wrongOutput, detail: "RetryOperation succeeded with a value no succeeding attempt produces")
            }
        }
        decorate(retry)
        return retry
    }

    private func tree(root: Bool, parent: Int?, scenario: Scenario) -> TreeOperation<Int> {
        let id = ledger.register(.tree, root: root, parent: parent, scenario: scenario)
        let rootPlans = (0..<random.int(1...3)).map { _ in leafPlan() }
        let childPlans = (0..<random.int(0...3)).map { _ in leafPlan() }
        let itemsThrow = random.chance(0.05)
        let retries = random.chance(0.3)
        // Attempts of a node's internal RetryOperation may be retired after it ended, so they are not
        // checked against the tree's outcome.
        let leafParent: Int? = retries ? nil : id
        let ledger = self.ledger
        let make: @Sendable (LeafPlan) -> ResultOperation<Int> = { plan in
            let leaf = IntLeaf(ledger, plan, parent: leafParent, role: .treeItem)
            scheduleCancel(leaf, after: plan.cancelAfter)
            return leaf
        }
        let top = TreeNode<Int, Int>("root", items: { _ in Array(rootPlans.indices) }) { make(rootPlans[$0]) }
        let below = TreeNode<Int, Int>(
            "below",
            items: { _ -> [Int] in
                if itemsThrow { throw StressFailure(code: -1) }
                return Array(childPlans.indices)
            }
        ) { make(childPlans[$0]) }
        if retries { below.retry(maximumAttempts: 2) }
        top.addChild(below)
        let tree = TreeOperation(root: top, input: 0, maxConcurrentOperationCount: maxConcurrent())
        ledger.bind(id, tree)
        decorate(tree)
        return tree
    }
}
