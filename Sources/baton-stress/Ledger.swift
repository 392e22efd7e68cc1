import Baton
import Dispatch
import Foundation

/// What was created, for reports.
enum Kind: Int, CaseIterable, Sendable {
    case voidLeaf, intLeaf, stepLeaf, blockLeaf, group, resultGroup, sequence, generatorSequence, retry, tree, chain

    var label: String {
        switch self {
        case .voidLeaf: return "AsyncOperation leaf"
        case .intLeaf: return "ResultOperation leaf"
        case .stepLeaf: return "TransformOperation leaf"
        case .blockLeaf: return "AsyncBlockOperation leaf (reruns)"
        case .group: return "GroupOperation"
        case .resultGroup: return "ResultGroupOperation"
        case .sequence: return "SequenceOperation(list)"
        case .generatorSequence: return "SequenceOperation(generator)"
        case .retry: return "RetryOperation"
        case .tree: return "TreeOperation"
        case .chain: return "addChain handle"
        }
    }

    /// Kinds whose instances enter and leave a counter in init/deinit (our own subclasses); the
    /// others (final Baton classes) are tracked through weak references only.
    var isCounted: Bool {
        switch self {
        case .voidLeaf, .intLeaf, .stepLeaf, .group, .sequence, .generatorSequence: return true
        case .blockLeaf, .resultGroup, .retry, .tree, .chain: return false
        }
    }

    var isLeaf: Bool { self == .voidLeaf || self == .intLeaf || self == .stepLeaf }
}

/// The violations the tool counts.
enum Violation: Int, CaseIterable, Sendable {
    case outcomeNotOnce, noOutcome, notFinished, executeAfterFinish, executeTwice, succeededWithoutExecute,
        cancelledWithOtherOutcome, compositeBeforeChild, wrongOutput, unexpectedError, survivor, stuckBatch, rssGrowth,
        overLimit

    var label: String {
        switch self {
        case .outcomeNotOnce: return "outcome delivered more than once"
        case .noOutcome: return "no outcome (orphaned or stuck)"
        case .notFinished: return "outcome delivered but isFinished/outcome not set"
        case .executeAfterFinish: return "execute() after finish"
        case .executeTwice: return "execute() called twice"
        case .succeededWithoutExecute: return "leaf succeeded without execute()"
        case .cancelledWithOtherOutcome: return "isCancelled but outcome not cancelled"
        case .compositeBeforeChild: return "composite finished before a child"
        case .wrongOutput: return "wrong output (lost or repeated step)"
        case .unexpectedError: return "unexpected BatonError from addChain/addChild"
        case .survivor: return "operation not freed"
        case .stuckBatch: return "stuck batch"
        case .rssGrowth: return "RSS grew beyond the margin"
        case .overLimit: return "more holders of a category executed at once than its limit"
        }
    }
}

/// Where an operation came from, for reports.
enum Role: String, Sendable {
    case built = "built up front"
    case lateChild = "late child (addChild while running)"
    case generatorStep = "generator step"
    case retryAttempt = "retry attempt"
    case treeItem = "tree item"
}

enum OutcomeTag: UInt8, Sendable {
    case none, succeeded, failed, cancelled

    init<T>(_ outcome: Outcome<T>) {
        switch outcome {
        case .succeeded: self = .succeeded
        case .failed: self = .failed
        case .cancelled: self = .cancelled
        }
    }
}

struct WeakOperation {
    weak var operation: Operation?
}

/// Everything one batch records: a slot per operation (and per chain handle), counted outcomes,
/// executes, live instances, violations. Never holds an operation strongly, and never releases one
/// while its lock is held (a release can run a deinit that takes the lock).
final class Ledger: @unchecked Sendable {
    private let lock = NSLock()
    private var kinds: [Kind] = []
    private var scenarios: [Scenario?] = []
    private var roles: [Role] = []
    private var parents: [Int?] = []
    private var counts: [UInt32] = []
    private var tags: [OutcomeTag] = []
    private var executes: [UInt32] = []
    private var started: [Bool] = []
    private var claimed: [Bool] = []
    private var roots: [Bool] = []
    private var discarded: [Bool] = []
    private var references: [WeakOperation] = []
    private var children: [Int: [Int]] = [:]
    private var violations: [Violation: Int] = [:]
    private var details: [String: Int] = [:]
    private var notes: [String: Int] = [:]
    private var liveCounted = 0
    private var firstOutcomes = 0
    private var createdOperations = 0
    /// Category lanes: how many leaves holding each one execute now, and its limit.
    private var laneCounts: [Int] = []
    private var laneLimits: [Int] = []
    /// The lanes each executing leaf entered, removed when it leaves.
    private var entered: [Int: [Int]] = [:]

    /// Entered for every slot, left at its first outcome (or when it is discarded).
    let allPending = DispatchGroup()
    /// The same for the operations enqueued on the shared queue and for chain handles.
    let rootsPending = DispatchGroup()

    // MARK: - Registration

    /// Opens a slot; `parent` is a composite whose outcome must come after this one's.
    func register(_ kind: Kind, root: Bool, parent: Int?, scenario: Scenario? = nil, role: Role = .built) -> Int {
        let id: Int = withLock {
            let id = kinds.count
            kinds.append(kind)
            scenarios.append(root ? scenario : nil)
            roles.append(role)
            parents.append(parent)
            counts.append(0)
            tags.append(.none)
            executes.append(0)
            started.append(false)
            claimed.append(false)
            roots.append(root)
            discarded.append(false)
            references.append(WeakOperation())
            if kind != .chain { createdOperations += 1 }
            if kind.isCounted { liveCounted += 1 }
            if let parent { children[parent, default: []].append(id) }
            return id
        }
        allPending.enter()
        if root { rootsPending.enter() }
        return id
    }

    /// Attaches the operation to its slot: a weak reference and an outcome observer.
    func bind(_ id: Int, _ operation: AsyncOperation) {
        withLock { references[id].operation = operation }
        operation.onStart { [self] in withLock { started[id] = true } }
        operation.onFinish { [self] outcome in recordOutcome(id, OutcomeTag(outcome)) }
    }

    /// Makes `child` (added late) a child of `parent`, unless the parent already has its outcome.
    func adopt(_ child: Int, parent: Int) {
        withLock {
            parents[child] = parent
            if counts[parent] == 0 { children[parent, default: []].append(child) }
        }
    }

    /// A slot that will never run (a late child the finished group refused).
    func discard(_ id: Int) {
        let leave: Bool = withLock {
            guard counts[id] == 0, !discarded[id] else { return false }
            discarded[id] = true
            return true
        }
        if leave { leaveGroups(id) }
    }

    func countedDied() {
        withLock { liveCounted -= 1 }
    }

    // MARK: - Events

    func recordOutcome(_ id: Int, _ tag: OutcomeTag) {
        let first: Bool = withLock {
            counts[id] += 1
            guard counts[id] == 1, !discarded[id] else { return false }
            tags[id] = tag
            firstOutcomes += 1
            if let kids = children[id] {
                for kid in kids where counts[kid] == 0 && !discarded[kid] {
                    if started[kid] || executes[kid] > 0 {
                        violations[.compositeBeforeChild, default: 0] += 1
                        details[
                            "composite finished before a started child: \(kinds[id].label) (\(tag)) before its \(kinds[kid].label)",
                            default: 0] += 1
                    } else {
                        // A child that never started and is retired after its parent's outcome: reported, not counted.
                        notes[
                            "\(kinds[id].label) (\(tag)) had its outcome before its unstarted \(kinds[kid].label) was retired",
                            default: 0] += 1
                    }
                }
            }
            return true
        }
        if first { leaveGroups(id) }
    }

    private func leaveGroups(_ id: Int) {
        let root = withLock { roots[id] }
        allPending.leave()
        if root { rootsPending.leave() }
    }

    /// Called first thing in a leaf's `execute()`.
    func noteExecute(_ id: Int, finishedAlready: Bool) {
        withLock {
            if finishedAlready || counts[id] > 0 {
                violations[.executeAfterFinish, default: 0] += 1
                let detail = "execute() after finish: \(kinds[id].label) (outcome \(tags[id]), isFinished \(finishedAlready))"
                details[detail, default: 0] += 1
            }
            if executes[id] > 0 { violations[.executeTwice, default: 0] += 1 }
            executes[id] += 1
        }
    }

    /// Called at each later run of a leaf that reruns its body: a run is allowed, one after its
    /// outcome is not.
    func noteRerun(_ id: Int, finishedAlready: Bool) {
        withLock {
            guard finishedAlready || counts[id] > 0 else { return }
            violations[.executeAfterFinish, default: 0] += 1
            details["rerun after finish: \(kinds[id].label) (outcome \(tags[id]), isFinished \(finishedAlready))", default: 0] +=
                1
        }
    }

    // MARK: - Categories

    /// A lane of a category (or of a category inherited under a composite) allowing `limit` holders.
    func newLane(limit: Int) -> Int {
        withLock {
            laneCounts.append(0)
            laneLimits.append(limit)
            return laneCounts.count - 1
        }
    }

    /// A leaf that claims `lanes` began executing: each lane's count must stay within its limit.
    func enterLanes(_ id: Int, _ lanes: [Int]) {
        guard !lanes.isEmpty else { return }
        withLock {
            entered[id] = lanes
            for lane in lanes {
                laneCounts[lane] += 1
                if laneCounts[lane] > laneLimits[lane] {
                    violations[.overLimit, default: 0] += 1
                    details[
                        "\(Violation.overLimit.label): lane \(lane), \(laneCounts[lane]) > \(laneLimits[lane])", default: 0] += 1
                }
            }
        }
    }

    /// The leaf stops executing (called before it finishes, so before its categories are released).
    func leaveLanes(_ id: Int) {
        withLock {
            guard let lanes = entered.removeValue(forKey: id) else { return }
            for lane in lanes { laneCounts[lane] -= 1 }
        }
    }

    /// Whether this caller is the one that finishes the leaf (its own timer or its didCancel).
    func claimFinish(_ id: Int) -> Bool {
        withLock {
            guard !claimed[id] else { return false }
            claimed[id] = true
            return true
        }
    }

    func count(_ violation: Violation, _ amount: Int = 1, detail: String? = nil) {
        guard amount > 0 else { return }
        withLock {
            violations[violation, default: 0] += amount
            if let detail { details["\(violation.label): \(detail)", default: 0] += amount }
        }
    }

    // MARK: - Reading

    var progress: Int { withLock { firstOutcomes } }
    var created: Int { withLock { createdOperations } }
    var rootCount: Int { withLock { roots.lazy.filter { $0 }.count } }
    var violationCounts: [Violation: Int] { withLock { violations } }
    var violationDetails: [String: Int] { withLock { details } }
    var orderingNotes: [String: Int] { withLock { notes } }

    /// Instances still alive: counted subclasses by their counter, final classes by weak reference.
    func survivors() -> Int {
        let (live, weakOnes) = withLock { () -> (Int, [WeakOperation]) in
            var uncounted = [WeakOperation]()
            for index in kinds.indices where !kinds[index].isCounted && kinds[index] != .chain {
                uncounted.append(references[index])
            }
            return (liveCounted, uncounted)
        }
        return live + weakOnes.reduce(0) { $0 + ($1.operation == nil ? 0 : 1) }
    }

    /// Waits until every operation has been freed, polling; returns how many survived `timeout`.
    func waitForSurvivors(timeout: Double) -> Int {
        let deadline = now() + timeout
        var left = survivors()
        while left > 0 && now() < deadline {
            usleep(5_000)
            left = survivors()
        }
        return left
    }

    /// Checks every operation still alive: it must be finished, with an outcome, and cancelled when
    /// `isCancelled`. Waits (bounded) for `isFinished`, which follows the outcome callbacks.
    func checkFinishedState(timeout: Double) {
        let snapshot: [(Int, WeakOperation)] = withLock {
            kinds.indices.compactMap { index in
                kinds[index] == .chain || counts[index] == 0 || discarded[index] ? nil : (index, references[index])
            }
        }
        let deadline = now() + timeout
        let kindOf: [Int: Kind] = withLock { Dictionary(uniqueKeysWithValues: snapshot.map { ($0.0, kinds[$0.0]) }) }
        for (index, reference) in snapshot {
            guard let operation = reference.operation as? AsyncOperation else { continue }
            let label = kindOf[index]?.label ?? "?"
            while !operation.isFinished && now() < deadline { usleep(1_000) }
            if !operation.isFinished || operation.outcome == nil {
                count(.notFinished, detail: label)
                continue
            }
            if operation.isCancelled, let outcome = operation.outcome, !outcome.isCancelled {
                count(.cancelledWithOtherOutcome, detail: "\(label) \(outcome)")
            }
        }
    }

    /// The final count checks: exactly one outcome per slot, and succeeded leaves executed.
    func checkCounts(stuck: Bool) {
        withLock {
            for index in kinds.indices where !discarded[index] {
                if counts[index] == 0 {
                    violations[.noOutcome, default: 0] += 1
                    let owner = parents[index].map { " in a \(kinds[$0].label) that ended \(tags[$0])" } ?? ""
                    details[
                        "no outcome: \(kinds[index].label), \(roles[index].rawValue)\(owner)\(stuck ? " (stuck batch)" : " (orphaned: its roots finished)")",
                        default: 0] += 1
                } else if counts[index] > 1 {
                    violations[.outcomeNotOnce, default: 0] += 1
                    details["outcome delivered more than once: \(kinds[index].label) ×\(counts[index])", default: 0] += 1
                }
                if kinds[index].isLeaf, tags[index] == .succeeded, executes[index] == 0 {
                    violations[.succeededWithoutExecute, default: 0] += 1
                }
            }
        }
    }

    /// Operations without an outcome, by kind and state, for a stuck report.
    func unfinishedReport() -> (roots: [String: Int], all: [String: Int]) {
        let snapshot: [(Kind, Scenario?, Bool, WeakOperation)] = withLock {
            kinds.indices.compactMap { index in
                counts[index] == 0 && !discarded[index] ? (kinds[index], scenarios[index], roots[index], references[index]) : nil
            }
        }
        var rootsReport = [String: Int]()
        var allReport = [String: Int]()
        for (kind, scenario, root, reference) in snapshot {
            var state = "freed"
            if kind == .chain {
                state = "running"
            } else if let operation = reference.operation {
                state = operation.isExecuting ? "executing" : operation.isFinished ? "finished" : "pending"
                if operation.isCancelled { state += ",cancelled" }
                if let group = operation as? GroupOperation, group.isSuspended { state += ",suspended" }
                if let group = operation as? ResultGroupOperation<Int>, group.isSuspended { state += ",suspended" }
            }
            let key = "\(kind.label) [\(state)]"
            allReport[key, default: 0] += 1
            if root { rootsReport["\(key) from scenario \(scenario?.rawValue ?? "?")", default: 0] += 1 }
        }
        return (rootsReport, allReport)
    }

    private func withLock<Result>(_ body: () -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body()
    }
}
