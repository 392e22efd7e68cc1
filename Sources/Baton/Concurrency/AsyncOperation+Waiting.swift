import Dispatch
import Foundation

/// The waits behind ``OutcomeReporting``'s `run`, `wait` and `value`, untyped: one mechanism for all
/// of them. A wait registers with the lifecycle machine and gets a token; the finish resumes every
/// registered wait; a wait that ends early (its timeout, its task's cancellation) releases its token,
/// and with it everything it held. One guard decides, before anything is claimed or enqueued, whether
/// the wait would wait for itself.
extension AsyncOperation {
    /// How a registration went.
    enum WaitTicket {
        /// Registered: `resume` runs once the operation has finished, unless ``endWait(_:)`` comes first.
        case waiting(UInt64)
        /// Already finished, with this outcome.
        case finished(Outcome<(any Sendable)?>)
        /// The waiting thread runs this operation's own callouts: it would wait for itself.
        case refused
    }

    /// Registers `resume` to run once the operation has finished.
    func registerWait(_ resume: @escaping @Sendable () -> Void) -> WaitTicket {
        let selfBlocking = Callouts.areRunning(for: self)
        return core.withLock { state in
            switch state.life.registerWait(selfBlocking: selfBlocking) {
            case .finished: return .finished(state.life.finished!.value)
            case .refused: return .refused
            case .registered(let token):
                state.appendWait(resume, token: token)
                return .waiting(token)
            }
        }
    }

    /// Ends a wait early: its registration and what it holds are released. `false` when the finish
    /// resumed it first (the outcome is then stored).
    @discardableResult
    func endWait(_ token: UInt64) -> Bool {
        let released: (@Sendable () -> Void)? = core.withLock { state in
            guard state.life.waitEnded(token: token) else { return nil }
            return state.removeWait(token)
        }
        return released != nil
    }

    /// The one deadlock guard of every wait on this operation: the wait would wait for itself when the
    /// waiting thread runs the operation's own callouts (checked by the machine at registration), or
    /// when the operation must still be started by `queue` (the one it is run on, or the one a Baton
    /// entry point launched it on) and the waiting context holds what that queue needs.
    func deadlockReason(runningOn queue: OperationQueue?, blocking: Bool) -> String? {
        if RunningQueue.bodyOperation === self { return Self.ownBodyReason }
        let blocked = Callouts.blockedLanes(blocking: blocking)
        if let reason = categoryDeadlockReason(blocked: blocked, runningOn: queue) { return reason }
        if let queue { return queue.deadlockReason(blocking: blocking) }
        let (target, pending) = core.withLock { state in (state.launchQueue, state.life.isPending) }
        guard pending, let target else { return nil }
        return target.deadlockReason(blocking: blocking)
    }

    /// Claims the operation, adds it to `queue`, and blocks until it finishes or `timeout` runs out
    /// (then cancels it: it is the caller's).
    func runBlocking(on queue: OperationQueue, timeout: Duration) throws(BatonError) -> Outcome<(any Sendable)?> {
        try check(timeout)
        if let reason = deadlockReason(runningOn: queue, blocking: true) {
            throw .wouldDeadlock(operation: reference, reason: reason)
        }
        if let outcome = try claimUnlessFinished() { return outcome }
        return try block(timeout: timeout) {
            queue.launch(self)
        } onTimeout: {
            self.cancel()
        }
    }

    /// Blocks until someone else's run of the operation finishes, or `timeout` runs out.
    func waitBlocking(timeout: Duration) throws(BatonError) -> Outcome<(any Sendable)?> {
        try check(timeout)
        if let reason = deadlockReason(runningOn: nil, blocking: true) {
            throw .wouldDeadlock(operation: reference, reason: reason)
        }
        return try block(timeout: timeout, then: {}, onTimeout: {})
    }

    /// Registers, runs `then` (the launch), and blocks until the finish resumes the wait or `timeout`
    /// runs out; the registration is released either way.
    private func block(
        timeout: Duration, then launch: () -> Void, onTimeout: () -> Void
    ) throws(BatonError) -> Outcome<(any Sendable)?> {
        let done = DispatchSemaphore(value: 0)
        switch registerWait({ done.signal() }) {
        case .finished(let outcome):
            return outcome
        case .refused:
            throw .wouldDeadlock(operation: reference, reason: Self.selfWaitReason)
        case .waiting(let token):
            launch()
            // A step this thread was to start once it returns may be what the wait needs.
            Relay.release()
            // In a callback nested so deep that Baton deferred work on this thread until it returns,
            // what the wait needs may be that work: unless the operation already finished, refuse
            // rather than time out.
            if Trampoline.hasDeferredWork, done.wait(timeout: .now()) == .timedOut, endWait(token) {
                onTimeout()
                throw .wouldDeadlock(operation: reference, reason: Self.deferredWorkReason)
            }
            if done.wait(timeout: timeout.deadlineFromNow) == .timedOut, endWait(token) {
                onTimeout()
                throw .timedOut(operation: reference, after: timeout)
            }
            // Resumed (perhaps right at the deadline): the finish stored the outcome before resuming.
            return storedOutcome ?? .cancelled
        }
    }

    static let deferredWorkReason =
        "called from a callback nested so deep that Baton deferred work on this thread until it returns"

    static let ownBodyReason = "waited for from inside its own body, which must return before it can finish"

    static let selfWaitReason =
        "waited for from inside its own start or outcome callbacks, which must return before it can finish"

    /// Claims the operation for a run, or returns its outcome when it has finished (before the claim,
    /// or meanwhile: a finished operation's run returns its outcome).
    private func claimUnlessFinished() throws(BatonError) -> Outcome<(any Sendable)?>? {
        if let outcome = storedOutcome { return outcome }
        do {
            try claim()
            return nil
        } catch {
            if let outcome = storedOutcome { return outcome }
            throw error
        }
    }

    /// A wait's own timeout must not be negative (as ``timeout`` must not).
    private func check(_ timeout: Duration) throws(BatonError) {
        if timeout < .zero {
            throw .invalidArgument(operation: reference, reason: "a wait's timeout must not be negative, got \(timeout)")
        }
    }

    /// Claims the operation, adds it to `queue`, and suspends until it finishes. Cancelling the
    /// awaiting task cancels the operation (it is the caller's).
    func runSuspending(on queue: OperationQueue) async throws(BatonError) -> AwaitEnd<Outcome<(any Sendable)?>> {
        if let reason = deadlockReason(runningOn: queue, blocking: false) {
            throw .wouldDeadlock(operation: reference, reason: reason)
        }
        if let outcome = try claimUnlessFinished() { return .finished(outcome) }
        queue.launch(self)
        return try await waitSuspending(cancellingOnTaskCancellation: true)
    }

    /// Suspends until the operation has finished. Cancelling the awaiting task ends the wait at once
    /// (``AwaitEnd/taskCancelled``), whether or not anyone ever runs the operation, and releases its
    /// registration; it cancels the operation too when the caller runs it (`run`), not when someone
    /// else does (`value`).
    func waitSuspending(
        cancellingOnTaskCancellation cancels: Bool
    ) async throws(BatonError) -> AwaitEnd<Outcome<(any Sendable)?>> {
        if !cancels, let reason = deadlockReason(runningOn: nil, blocking: false) {
            throw .wouldDeadlock(operation: reference, reason: reason)
        }
        let waiter = OutcomeWaiter<AwaitEnd<Outcome<(any Sendable)?>>?>()
        let end = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                waiter.install(continuation)
                switch registerWait({ [weak self] in waiter.resume(with: .finished(self?.storedOutcome ?? .cancelled)) }) {
                case .finished(let outcome):
                    waiter.resume(with: .finished(outcome))
                case .refused:
                    waiter.resume(with: nil)
                case .waiting(let token):
                    // Cancelled meanwhile: the wait is over, its registration is released here.
                    if !waiter.attach(token) { endWait(token) }
                }
            }
        } onCancel: {
            // The wait is decided first (a finish the cancellation causes does not overtake it), and
            // the task resumes once the operation is cancelled.
            waiter.resume(with: .taskCancelled) { if cancels { self.cancel() } }
            if let token = waiter.attachedToken { self.endWait(token) }
        }
        guard let end else { throw .wouldDeadlock(operation: reference, reason: Self.selfWaitReason) }
        return end
    }
}

/// How an `async` wait ended: the work finished, or the awaiting task was cancelled first.
enum AwaitEnd<Finished: Sendable>: Sendable {
    case finished(Finished)
    case taskCancelled

    /// What `run` and `value` report: a cancelled task reads as a cancelled outcome.
    func orCancelled<Output>() -> Finished where Finished == Outcome<Output> {
        switch self {
        case .finished(let outcome): return outcome
        case .taskCancelled: return .cancelled
        }
    }

    /// What `runForOutcome` reports: the outcome, or `CancellationError` for the wait itself.
    func orThrow() throws -> Finished {
        switch self {
        case .finished(let outcome): return outcome
        case .taskCancelled: throw CancellationError()
        }
    }
}

/// The Baton operation that started the current task, and the operation queue that started it: an
/// `async` wait inside it knows what it holds (the queue's slot, its categories), as
/// `OperationQueue.current` and the thread's holders tell a blocking one (a task has neither).
///
/// Tasks the body starts inherit it, and for the queue's slot that is enough: the operation holds
/// the slot only until it has finished, so a task that outlives it holds nothing. For categories
/// and for waiting on itself, only the body's own task counts (``isBodyTask``): the operation
/// finishes when its body returns, so a wait there is certain to wait for itself, while a task the
/// body starts may not be awaited by it at all, and refusing its wait would refuse work that runs.
enum RunningQueue {
    /// `queue` and `operation` are written once, in `init`; the operation is held weakly.
    final class Holder: @unchecked Sendable {
        /// `nil` when the operation was started by hand, not by a queue.
        let queue: ObjectIdentifier?
        weak var operation: AsyncOperation?
        /// The identity of the body's task, once it has begun.
        private let body = Mutex<Int?>(nil)

        init(queue: ObjectIdentifier?, operation: AsyncOperation) {
            self.queue = queue
            self.operation = operation
        }

        /// The queue whose slot the current task's operation still holds.
        var heldQueue: ObjectIdentifier? {
            guard let queue, let operation, !operation.isFinished else { return nil }
            return queue
        }

        /// Called first thing by the body's task.
        func bodyBegan() {
            let task = withUnsafeCurrentTask { $0?.hashValue }
            body.withLock { $0 = task }
        }

        /// Whether the current task is the body's own (not a task it started).
        var isBodyTask: Bool {
            guard let task = withUnsafeCurrentTask(body: { $0?.hashValue }) else { return false }
            return body.withLock { $0 } == task
        }
    }

    /// The unfinished operation whose body is the current task, if any.
    static var bodyOperation: AsyncOperation? {
        guard let holder = current, holder.isBodyTask, let operation = holder.operation, !operation.isFinished
        else { return nil }
        return operation
    }

    @TaskLocal static var current: Holder?
}

extension OperationQueue {
    /// Why waiting in the current context until work on this queue has run would wait for itself, or
    /// `nil`: the one queue check of every wait, blocking and `async`, on operations and chains.
    ///
    /// A blocking wait holds its thread: on the main thread, a queue that runs on the main thread can
    /// never run; on a thread running one of this queue's operations, a serial queue (width 1) can run
    /// nothing else, nor can a queue whose dispatch queue (`underlyingQueue`) is that thread's queue,
    /// since Baton cannot tell a serial dispatch queue from a concurrent one. An `async` wait holds
    /// the queue slot of the Baton operation whose task awaits (``RunningQueue``).
    func deadlockReason(blocking: Bool) -> String? {
        let underlying = blocking ? underlyingQueue : nil
        if blocking && Thread.isMainThread && (self === OperationQueue.main || underlying?.label == Self.mainLabel) {
            return "the main thread would wait for a queue that runs on the main thread"
        }
        let current =
            blocking
            ? OperationQueue.current.map(ObjectIdentifier.init) ?? Relay.startingFor : RunningQueue.current?.heldQueue
        guard current == ObjectIdentifier(self) else { return nil }
        if maxConcurrentOperationCount == 1 {
            return "called from the serial queue that must run it"
        }
        if underlying != nil {
            return "called from the queue that must run it, whose dispatch queue may be serial"
        }
        return nil
    }

    /// Whether the queue runs its operations on the main thread. `DispatchQueue.main` is a new
    /// wrapper on every read on Linux: the label tells.
    var runsOnMainThread: Bool {
        self === OperationQueue.main || underlyingQueue.map { $0.label == Self.mainLabel } == true
    }

    /// The main dispatch queue's label, read once.
    static let mainLabel = DispatchQueue.main.label
}

/// One await of an outcome, resumed exactly once: by the work's end, or by the cancellation of the
/// awaiting task, whichever comes first. It also keeps the wait's registration token, so that whoever
/// ends the wait early releases the registration.
final class OutcomeWaiter<Value: Sendable>: Sendable {
    private enum Phase {
        case idle
        case waiting(CheckedContinuation<Value, Never>)
        case resumed
        /// Resumed before the continuation was installed (the task was cancelled first).
        case decided(Value)
    }

    private struct State {
        var phase = Phase.idle
        var token: UInt64?
        var isOver: Bool {
            switch phase {
            case .idle, .waiting: return false
            case .resumed, .decided: return true
            }
        }
    }

    private let state = Mutex(State())

    func install(_ continuation: CheckedContinuation<Value, Never>) {
        let decided: Value? = state.withLock { state in
            guard case .decided(let value) = state.phase else {
                state.phase = .waiting(continuation)
                return nil
            }
            state.phase = .resumed
            return value
        }
        if let decided { continuation.resume(returning: decided) }
    }

    func resume(with value: Value) {
        resume(with: value, after: {})
    }

    /// Decides the wait with `value` (unless it is over), runs `body`, and only then resumes the
    /// awaiting task: what `body` does (cancelling the work) is done when the task goes on.
    func resume(with value: Value, after body: () -> Void) {
        let continuation: CheckedContinuation<Value, Never>? = state.withLock { state in
            switch state.phase {
            case .idle:
                state.phase = .decided(value)
                return nil
            case .waiting(let continuation):
                state.phase = .resumed
                return continuation
            case .resumed, .decided:
                return nil
            }
        }
        body()
        continuation?.resume(returning: value)
    }

    /// Keeps the wait's registration token; `false` when the wait is already over (the caller then
    /// releases the registration itself).
    func attach(_ token: UInt64) -> Bool {
        state.withLock { state in
            guard !state.isOver else { return false }
            state.token = token
            return true
        }
    }

    /// The token attached while the wait was on.
    var attachedToken: UInt64? {
        state.withLock { $0.token }
    }
}
