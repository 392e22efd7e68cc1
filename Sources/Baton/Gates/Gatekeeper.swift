import Dispatch
import Foundation

/// The process's one claim table, behind one lock: every grant, release and withdrawal of every scope
/// is decided here, so a request that spans scopes is still all or none. Waiters are woken after the
/// lock is released, in a loop (a woken request that was cancelled meanwhile gives its categories back,
/// which may wake the next one, without recursing).
enum Gatekeeper {
    /// A waiting operation and the token its admission asked with.
    struct Waiter {
        let operation: AsyncOperation
        let token: UInt64
        let lanes: [Lane]
    }

    private static let table = Mutex(ClaimTable<Waiter>())

    /// The queue a produced dependency runs on when the operation's own queue is unknown (it was added
    /// with Foundation's `addOperation`).
    static let fallbackQueue: OperationQueue = {
        let queue = OperationQueue()
        queue.name = "Baton produced dependencies"
        return queue
    }()

    /// Changes the table under its lock; when the change left a line that only a pace holds back (or
    /// a lane to forget later) before any armed timer, arms one for it. Waiters the change let go of
    /// for another operation (``ClaimTable/letGo``) are released on a thread of their own: the caller
    /// may hold an operation's lock, and freeing a composite (and its scope) calls the table again.
    private static func change<Result>(_ body: (inout ClaimTable<Waiter>) -> Result) -> Result {
        let (result, deadline, remains) = table.withLock { table -> (Result, UInt64?, Remains?) in
            (body(&table), table.deadlineToArm(), table.letGo.isEmpty ? nil : Remains(table.takeLetGo()))
        }
        if let deadline { Deadlines.at(deadline) { wake(change { $0.advance() }) } }
        // The box is emptied there, whichever thread lets go of the box itself last.
        if let remains { DispatchQueue.global().async { remains.release() } }
        return result
    }

    /// Waiters to let go of off the caller's thread (see ``change(_:)``).
    private final class Remains: @unchecked Sendable {
        private var waiters: [Waiter]
        init(_ waiters: [Waiter]) { self.waiters = waiters }
        func release() { waiters = [] }
    }

    /// Asks for `lanes` for `operation`; `true` when granted now, `false` when it waits. `nil`: nothing
    /// was asked, because a composite that lent one of them no longer holds the category (it finished
    /// after the operation found its lanes): the operation finds them again.
    static func request(_ operation: AsyncOperation, token: UInt64, lanes: [Lane]) -> Bool? {
        let waiter = Waiter(operation: operation, token: token, lanes: lanes)
        return change { table in
            guard table.lendersHold(lanes) else { return nil }
            return table.request(operation.serialNumber, lanes: lanes, waiter: waiter)
        }
    }

    /// Asks for `lanes` for `operation`, which holds a worker of its queue while it waits (see
    /// ``Admission/holdsWorker``): granted when every lane has room, or put first in every line.
    /// `.granted`, or `.waiting` with the holders to ask to give their lanes back (after the caller
    /// releases its own lock: see ``AsyncOperation/yieldLanes()``); `nil` as for `request`.
    static func requestFirst(_ operation: AsyncOperation, token: UInt64, lanes: [Lane]) -> FirstRequest? {
        let waiter = Waiter(operation: operation, token: token, lanes: lanes)
        return change { table in
            guard table.lendersHold(lanes) else { return nil }
            guard let holders = table.requestFirst(operation.serialNumber, lanes: lanes, waiter: waiter) else {
                return .granted
            }
            return .waiting(holders: holders.map(\.operation))
        }
    }

    enum FirstRequest {
        case granted
        case waiting(holders: [AsyncOperation])
    }

    /// Puts `operation`'s waiting request first in its lines (its queue has started it since it asked:
    /// see ``Admission/holdsWorker``), wakes whoever that lets through, and asks the holders of its
    /// lanes to give them back if they have not started.
    static func putFirst(_ operation: AsyncOperation) {
        let (granted, holders) = change { $0.putFirst(operation.serialNumber) }
        wake(granted)
        for holder in holders { holder.operation.yieldLanes() }
    }

    /// Gives back `lanes`, held by `operation`, in the caller's step (under the operation's lock, the
    /// one nesting allowed): returns whom that lets through, to wake once that lock is released.
    static func giveBack(_ lanes: [Lane], by operation: AsyncOperation) -> [(UInt64, Waiter)] {
        guard !lanes.isEmpty else { return [] }
        return change { $0.release(lanes, by: operation.serialNumber) }
    }

    /// Gives back `lanes`, held by `operation`, and wakes whoever that lets through.
    static func release(_ lanes: [Lane], by operation: AsyncOperation) {
        guard !lanes.isEmpty else { return }
        wake(change { $0.release(lanes, by: operation.serialNumber) })
    }

    /// Takes back `operation`'s waiting request. `false` when it was not waiting (its grant is on its
    /// way, and will be given back).
    @discardableResult
    static func withdraw(_ operation: AsyncOperation) -> Bool {
        guard let granted = change({ $0.withdraw(operation.serialNumber) }) else { return false }
        wake(granted)
        return true
    }

    /// Changes a limit; wakes the requests that now fit, and asks the holders of a lane that a holder
    /// of a worker waits for, and that now has no room, to give it back (see ``requestFirst``).
    static func setLimit(_ limit: Int, of name: Lane.Name) {
        let (granted, holders) = change { table in
            let granted = table.setLimit(limit, of: name)
            return (granted, table.holdersKeepingWorkerHolders(of: name))
        }
        wake(granted)
        for holder in holders { holder.operation.yieldLanes() }
    }

    static func limit(of name: Lane.Name) -> Int {
        table.withLock { $0.limit(of: name) }
    }

    static func setPace(_ pace: Pace?, of name: Lane.Name) {
        wake(change { $0.setPace(pace, of: name) })
    }

    static func pace(of name: Lane.Name) -> Pace? {
        table.withLock { $0.pace(of: name) }
    }

    /// A scope is gone: its limits go with it.
    static func forgetLimits(of scope: ObjectIdentifier) {
        table.withLock { $0.forgetLimits(of: scope) }
    }

    /// The operations holding `lane`, oldest first, and its category's pace: what the live view says
    /// of a wait for it, read in one step.
    static func holdersAndPace(of lane: Lane) -> (holders: [AsyncOperation], pace: Pace?) {
        table.withLock { ($0.holders(of: lane).map(\.waiter.operation), $0.pace(of: lane.name)) }
    }

    /// Whether nothing is held and nobody waits (tests check it once their operations finished).
    static var isIdle: Bool {
        table.withLock { $0.isIdle }
    }

    static func wake(_ granted: consuming [(UInt64, Waiter)]) {
        // Consumed, so popping takes no copy (a copy of the array the table returned cost about 370
        // instructions per grant, callgrind).
        var pending = granted
        while let (_, waiter) = pending.popLast() {
            if let unkept = waiter.operation.categoriesGranted(waiter.token, lanes: waiter.lanes) {
                pending.append(contentsOf: unkept.granted)
                if let path = unkept.reopen { waiter.operation.reopenAfterDecline(path) }
            }
        }
    }
}

/// The internal queue of a composite, which knows its owner: a child launched on it inherits the
/// categories the owner holds.
final class ChildQueue: OperationQueue, @unchecked Sendable {
    private let ownerBox = Mutex(WeakOwner())

    private struct WeakOwner {
        weak var operation: AsyncOperation?
        /// No composite from the owner up has a gate: nothing is ever lent here.
        var lendsNothing = false
    }

    /// The composite whose children run here.
    var owner: AsyncOperation? {
        get { ownerBox.withLock { $0.operation } }
        set {
            ownerBox.withLock { box in
                box.operation = newValue
                box.lendsNothing = false
            }
        }
    }

    /// The owner, unless nothing is ever lent here (then `nil`, and `true`), in one step.
    var lending: (owner: AsyncOperation?, lendsNothing: Bool) {
        ownerBox.withLock { $0.lendsNothing ? (nil, true) : ($0.operation, false) }
    }

    /// A claim found that no composite from the owner up has a gate, or can get one: nothing is ever
    /// lent here.
    func noteLendsNothing() {
        ownerBox.withLock { $0.lendsNothing = true }
    }
}
