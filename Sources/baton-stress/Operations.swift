import Baton
import Dispatch
import Foundation

/// How a leaf behaves, decided by the seed when the workload is built.
struct LeafPlan: Sendable {
    enum Finish: Sendable {
        /// Finishes inside `execute()`.
        case synchronously
        /// Finishes from another thread after this many microseconds.
        case after(microseconds: Int)
        /// Finishes only when cancelled (always paired with a timeout).
        case whenCancelled
    }

    var finish: Finish
    var fails: Bool
    var finishesTwice: Bool
    var cancelFinishesAsynchronously: Bool
    var value: Int
    var timeout: Double?
    /// Cancel from another thread: `nil` never, 0 at once (async), otherwise after so many microseconds.
    var cancelAfter: Int?
    /// The ledger's category lanes the leaf holds while it executes (see `Ledger.enterLanes`).
    var lanes: [Int] = []
}

struct StressFailure: Error, CustomStringConvertible {
    let code: Int
    var description: String { "stress failure \(code)" }
}

/// The behaviour every leaf shares; each leaf class forwards `execute()` and `didCancel()` here.
protocol StressLeaf: AsyncOperation {
    var ledger: Ledger { get }
    var id: Int { get }
    var plan: LeafPlan { get }
    /// Finishes successfully, with an output when the leaf has one.
    func succeed()
}

extension StressLeaf {
    func configure() {
        ledger.bind(id, self)
        if let timeout = plan.timeout { self.timeout = .seconds(timeout) }
    }

    func runLeaf() {
        ledger.noteExecute(id, finishedAlready: isFinished || outcome != nil)
        ledger.enterLanes(id, plan.lanes)
        switch plan.finish {
        case .synchronously:
            complete()
        case .after(let microseconds):
            DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(microseconds)) { self.complete() }
        case .whenCancelled:
            break
        }
    }

    func complete() {
        guard ledger.claimFinish(id) else { return }
        ledger.leaveLanes(id)
        if plan.fails { finish(throwing: StressFailure(code: plan.value)) } else { succeed() }
        if plan.finishesTwice { succeed() }
    }

    func cancelLeaf() {
        guard ledger.claimFinish(id) else { return }
        ledger.leaveLanes(id)
        if plan.cancelFinishesAsynchronously {
            DispatchQueue.global().async { self.finish() }
        } else {
            finish()
        }
    }
}

/// Schedules the plan's cancellation of `operation` from another thread.
func scheduleCancel(_ operation: AsyncOperation, after microseconds: Int?) {
    guard let microseconds else { return }
    if microseconds == 0 {
        DispatchQueue.global().async { operation.cancel() }
    } else {
        DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(microseconds)) { operation.cancel() }
    }
}

final class VoidLeaf: AsyncOperation, StressLeaf, @unchecked Sendable {
    let ledger: Ledger
    let id: Int
    let plan: LeafPlan

    init(_ ledger: Ledger, _ plan: LeafPlan, root: Bool = false, parent: Int?, scenario: Scenario? = nil, role: Role = .built) {
        self.ledger = ledger
        self.plan = plan
        id = ledger.register(.voidLeaf, root: root, parent: parent, scenario: scenario, role: role)
        super.init()
        configure()
    }

    deinit { ledger.countedDied() }
    override func execute() { runLeaf() }
    override func didCancel() { cancelLeaf() }
    func succeed() { finish() }
}

final class IntLeaf: ResultOperation<Int>, StressLeaf, @unchecked Sendable {
    let ledger: Ledger
    let id: Int
    let plan: LeafPlan

    init(_ ledger: Ledger, _ plan: LeafPlan, root: Bool = false, parent: Int?, scenario: Scenario? = nil, role: Role = .built) {
        self.ledger = ledger
        self.plan = plan
        id = ledger.register(.intLeaf, root: root, parent: parent, scenario: scenario, role: role)
        super.init()
        configure()
    }

    deinit { ledger.countedDied() }
    override func execute() { runLeaf() }
    override func didCancel() { cancelLeaf() }
    func succeed() { finish(with: plan.value) }
}

/// Adds one to its input: a chain or sequence of them that succeeds ends with first value + steps.
final class StepLeaf: TransformOperation<Int, Int>, StressLeaf, @unchecked Sendable {
    let ledger: Ledger
    let id: Int
    let plan: LeafPlan

    init(_ ledger: Ledger, _ plan: LeafPlan, parent: Int?, role: Role = .built) {
        self.ledger = ledger
        self.plan = plan
        id = ledger.register(.stepLeaf, root: false, parent: parent, role: role)
        super.init(input: 0)
        configure()
    }

    deinit { ledger.countedDied() }
    override func execute() { runLeaf() }
    override func didCancel() { cancelLeaf() }
    func succeed() { finish(with: (input ?? 0) &+ 1) }
}

/// A group that enters the live counter; the slot is opened by the builder before the children.
final class StressGroup: GroupOperation, @unchecked Sendable {
    let ledger: Ledger

    init(_ ledger: Ledger, operations: [Operation], failurePolicy: GroupFailurePolicy, maxConcurrent: Int) {
        self.ledger = ledger
        super.init(operations: operations, failurePolicy: failurePolicy, maxConcurrentOperationCount: maxConcurrent)
    }

    deinit { ledger.countedDied() }
}

/// A sequence (list or generator form) that enters the live counter.
final class StressSequence<Output: Sendable>: SequenceOperation<Output>, @unchecked Sendable {
    let ledger: Ledger

    init(_ ledger: Ledger, operations: [Operation]) {
        self.ledger = ledger
        super.init(operations: operations)
    }

    init(_ ledger: Ledger, first: Operation, next: @escaping @Sendable (Operation) -> Operation?) {
        self.ledger = ledger
        super.init(first: first, next: next)
    }

    deinit { ledger.countedDied() }
}
