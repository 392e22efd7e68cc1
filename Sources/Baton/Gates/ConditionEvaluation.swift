import Dispatch
import Foundation

/// One evaluation of an operation's conditions. It can be abandoned (the operation was cancelled, or
/// another condition decided): what is still running is stopped, and a produced dependency that no
/// other operation waits for is cancelled.
final class Evaluation: Sendable {
    private let state = Mutex(Cleanups())

    private struct Cleanups {
        var abandoned = false
        var list: [@Sendable () -> Void] = []
    }

    /// Runs `cleanup` when the evaluation is abandoned (at once if it already was).
    func onAbandon(_ cleanup: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if state.abandoned { return true }
            state.list.append(cleanup)
            return false
        }
        if now { cleanup() }
    }

    func abandon() {
        let cleanups: [@Sendable () -> Void] = state.withLock { state in
            guard !state.abandoned else { return [] }
            state.abandoned = true
            defer { state.list = [] }
            return state.list
        }
        for cleanup in cleanups { cleanup() }
    }

    var isAbandoned: Bool { state.withLock { $0.abandoned } }
}

/// Passes on the first answer only: a condition that answers twice is answered once.
final class FirstAnswer: Sendable {
    /// The answer, until it is given: taken out then, so whoever still holds this (a timeout that has
    /// not fired yet) holds nothing of what the answer captured.
    private let answer: Mutex<(@Sendable (ConditionResult) -> Void)?>

    init(_ answer: @escaping @Sendable (ConditionResult) -> Void) {
        self.answer = Mutex(answer)
    }

    func callAsFunction(_ result: ConditionResult) {
        let first = answer.withLock { answer in
            defer { answer = nil }
            return answer
        }
        first?(result)
    }

    /// Drops the answer unanswered: nobody wants it any more (the evaluation was abandoned).
    func discard() {
        answer.withLock { $0 = nil }
    }
}

extension Condition {
    /// Evaluates the condition: its produced dependency first (shared), then its body. Answers once.
    func evaluate(
        _ context: ConditionContext, in evaluation: Evaluation, queue: OperationQueue,
        answer: @escaping @Sendable (ConditionResult) -> Void
    ) {
        let once = FirstAnswer(answer)
        guard let producer else { return evaluateBody(context, in: evaluation, queue: queue, once) }
        producer.attach(context, queue: queue, evaluation: evaluation) { outcome in
            switch outcome {
            case .succeeded: self.evaluateBody(context, in: evaluation, queue: queue, once)
            case .failed(let error): once(.failed(error))
            case .cancelled: once(.notSatisfied)
            }
        }
    }

    private func evaluateBody(
        _ context: ConditionContext, in evaluation: Evaluation, queue: OperationQueue, _ once: FirstAnswer
    ) {
        guard !evaluation.isAbandoned else { return }
        switch body {
        case .test(let test):
            test(context) { once($0) }
        case .asyncTest(let test):
            let task = Task { once(await test(context)) }
            evaluation.onAbandon { task.cancel() }
        case .all(let conditions):
            let allSatisfied = Countdown(events: conditions.count) { once(.satisfied) }
            for condition in conditions {
                condition.evaluate(context, in: evaluation, queue: queue) { result in
                    guard case .satisfied = result else { return once(result) }
                    allSatisfied.tick()
                }
            }
            allSatisfied.tick()
        case .any(let conditions):
            guard !conditions.isEmpty else { return once(.notSatisfied) }
            let tally = Mutex((remaining: conditions.count, failure: (any Error)?.none))
            for condition in conditions {
                condition.evaluate(context, in: evaluation, queue: queue) { result in
                    if case .satisfied = result { return once(.satisfied) }
                    let last: ConditionResult? = tally.withLock { tally in
                        if case .failed(let error) = result, tally.failure == nil { tally.failure = error }
                        tally.remaining -= 1
                        guard tally.remaining == 0 else { return nil }
                        return tally.failure.map { .failed($0) } ?? .notSatisfied
                    }
                    if let last { once(last) }
                }
            }
        case .not(let condition, let error):
            condition.evaluate(context, in: evaluation, queue: queue) { result in
                guard case .satisfied = result else { return once(.satisfied) }
                once(error.map { .failed($0) } ?? .notSatisfied)
            }
        case .flag(let flag, let timeout):
            let name = self.name
            let token = flag.whenSet(timeout: timeout) { set in
                once(set ? .satisfied : .failed(BatonError.conditionTimedOut(condition: name, after: timeout)))
            }
            if let token { evaluation.onAbandon { flag.endWait(token) } }
        case .silent(let condition):
            condition.evaluate(context, in: evaluation, queue: queue) { result in
                if case .failed = result { return once(.notSatisfied) }
                once(result)
            }
        }
    }
}

/// A condition's produced dependency: made and run once for every operation that waits on the
/// condition, and cancelled when the last of them stops waiting before it finished.
final class Producer: Sendable {
    private let make: @Sendable (ConditionContext) -> Operation
    private let state = Mutex(ProducerState())

    enum Result: Sendable {
        case succeeded
        case failed(any Error)
        case cancelled
    }

    /// An operation waiting for the produced one, and what to tell it.
    private struct Waiter {
        let operation: AsyncOperation
        let done: @Sendable (Result) -> Void
    }

    private struct ProducerState {
        enum Phase {
            case idle
            /// Being made, or running: `generation` tells this run's completion from an abandoned one's.
            /// `queue`: the composite's queue it runs on, if any (its owner lends it categories; held weakly).
            case running(operation: UncheckedSendable<Operation>?, queue: UncheckedSendable<ChildQueue>?)
            case done(Result)
        }
        var phase = Phase.idle
        var generation: UInt64 = 0
        var waiters = WaitList<Waiter>()
    }

    init(make: @escaping @Sendable (ConditionContext) -> Operation) {
        self.make = make
    }

    /// How many operations wait for the produced operation now (for tests).
    var waiterCount: Int {
        state.withLock { $0.waiters.count }
    }

    /// Calls `done` with the produced operation's result, making and launching it on `queue` if nobody
    /// has yet. Abandoning `evaluation` stops waiting.
    func attach(
        _ context: ConditionContext, queue: OperationQueue, evaluation: Evaluation,
        done: @escaping @Sendable (Result) -> Void
    ) {
        enum Step {
            case finished(Result)
            case wait(UInt64, made: (Operation, AsyncOperation?)?)
            case make(UInt64, generation: UInt64)
        }
        let step: Step = state.withLock { state in
            if case .done(let result) = state.phase { return .finished(result) }
            let token = state.waiters.append(Waiter(operation: context.operation, done: done))
            switch state.phase {
            case .running(let operation?, let queue): return .wait(token, made: (operation.value, queue?.value.owner))
            case .running(nil, _): return .wait(token, made: nil)
            case .idle, .done: break
            }
            state.generation += 1
            state.phase = .running(operation: nil, queue: nil)
            return .make(token, generation: state.generation)
        }
        switch step {
        case .finished(let result):
            done(result)
        case .wait(let token, let made):
            evaluation.onAbandon { self.detach(token) }
            // Made already: looked at now (otherwise when it is launched).
            if let (operation, parent) = made { refuseCycles(through: operation, under: parent, among: [token]) }
        case .make(let token, let generation):
            evaluation.onAbandon { self.detach(token) }
            launch(make(context), generation: generation, on: queue)
        }
    }

    private func launch(_ operation: Operation, generation: UInt64, on queue: OperationQueue) {
        let composite = queue as? ChildQueue
        let current = state.withLock { state -> Bool in
            guard state.generation == generation, case .running(nil, _) = state.phase else { return false }
            state.phase = .running(
                operation: UncheckedSendable(value: operation), queue: composite.map { UncheckedSendable(value: $0) })
            return true
        }
        // Everyone stopped waiting while it was being made, or (looked at now: those that attached
        // meanwhile, and its maker) would have waited for itself through it: nobody wants it. It ends
        // cancelled, unexecuted, so that nothing watching it (a recorder) sees it pending for good.
        if current { refuseCycles(through: operation, under: composite?.owner, among: nil) }
        guard current, state.withLock({ $0.generation == generation }) else {
            operation.cancel()
            if (try? operation.claim()) != nil { queue.launch(operation) }
            return
        }
        do {
            try operation.claim()
        } catch {
            return finished(generation, .failed(error))
        }
        operation.observeCompletionOnce { [weak operation] in
            let result: Result
            switch operation?.observedOutcome ?? .cancelled {
            case .succeeded: result = .succeeded
            case .failed(let error): result = .failed(error)
            case .cancelled: result = .cancelled
            }
            self.finished(generation, result)
        }
        queue.launch(operation)
    }

    private func finished(_ generation: UInt64, _ result: Result) {
        let waiters: [Waiter] = state.withLock { state in
            guard state.generation == generation, case .running = state.phase else { return [] }
            state.phase = .done(result)
            return state.waiters.takeAll().values
        }
        for waiter in waiters { waiter.done(result) }
    }

    /// Fails at once every waiter (of `tokens`, or all) that would wait for itself through `produced`:
    /// the produced operation claims a category in the lane where an ancestor composite of that
    /// waiter holds it alone, and that composite waits for the waiter to finish. (A produced operation
    /// launched on its first waiter's composite queue claims under that composite: the first waiter
    /// never waits for itself this way; an operation that attaches later from elsewhere in the tree
    /// may.) Only the produced operation's own claims are looked at: one that waits through a claim
    /// of its children or of its own conditions' produced operations waits until its condition's
    /// timeout.
    private func refuseCycles(through produced: Operation, under parent: AsyncOperation?, among tokens: [UInt64]?) {
        // Executing (or done), it holds its lanes already: it waits for nobody.
        guard let produced = produced as? AsyncOperation, !produced.isExecuting, !produced.isFinished else { return }
        let categories = produced.categories
        guard !categories.isEmpty,
            let lanes = try? AsyncOperation.lanes(for: categories, under: parent),
            case let exclusive = lanes.filter({ Gatekeeper.limit(of: $0.name) == 1 }), !exclusive.isEmpty
        else { return }
        let waiting: [(token: UInt64, callback: Waiter)] = state.withLock { state in
            let all = state.waiters.tokened
            guard let tokens else { return all }
            return all.filter { tokens.contains($0.token) }
        }
        for (token, waiter) in waiting {
            guard let error = AsyncOperation.waitsForItself(waiter.operation, through: produced, lanes: exclusive) else {
                continue
            }
            let (refused, abandoned): (Waiter?, Operation?) = state.withLock { state in
                guard let refused = state.waiters.remove(token) else { return (nil, nil) }
                guard state.waiters.isEmpty, case .running(let operation, _) = state.phase else { return (refused, nil) }
                state.phase = .idle
                state.generation += 1
                return (refused, operation?.value)
            }
            refused?.done(.failed(error))
            abandoned?.cancelHeld()
        }
    }

    /// A waiter stops waiting; the last one cancels the produced operation (a later waiter makes a new
    /// one).
    private func detach(_ token: UInt64) {
        let abandoned: Operation? = state.withLock { state in
            guard state.waiters.remove(token) != nil, state.waiters.isEmpty,
                case .running(let operation, _) = state.phase
            else { return nil }
            state.phase = .idle
            state.generation += 1
            return operation?.value
        }
        abandoned?.cancelHeld()
    }
}
